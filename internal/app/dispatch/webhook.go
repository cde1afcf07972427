package dispatch

import (
	"encoding/base64"
	"strconv"
	"unicode/utf8"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// WebhookPayload is the JSON body POSTed to a job's webhook_url (BEHAVIOR.md
// §15.1). Fields are declared in alphabetical order, so the encoding matches
// the original's sorted keys. Bodies that are not valid UTF-8 are sent as
// base64 with body_encoding "base64".
type WebhookPayload struct {
	Body           string `json:"body"`
	BodyEncoding   string `json:"body_encoding,omitempty"`
	BodyTruncated  bool   `json:"body_truncated,omitempty"`
	JobID          string `json:"job_id"`
	Reason         string `json:"reason,omitempty"`
	ResponseStatus int    `json:"response_status"`
	Status         string `json:"status"`
}

// NewWebhookPayload describes a finished job.
func NewWebhookPayload(id domain.JobID, status domain.Status, res *domain.Result) WebhookPayload {
	p := WebhookPayload{JobID: string(id), Status: string(status)}
	if res != nil {
		p.Body, p.BodyEncoding = EncodeBody(res.Body)
		p.BodyTruncated = res.BodyTruncated
		p.ResponseStatus = res.ResponseStatus
		if status == domain.StatusFailed {
			p.Reason = res.Reason
		}
	}
	return p
}

// EncodeBody returns b as a JSON-safe string: verbatim when it is UTF-8,
// otherwise base64 with the encoding name "base64".
func EncodeBody(b []byte) (text, encoding string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// webhookOverhead is the bytes of a webhook body besides the result's body
// and reason: the names, the id, the status.
const webhookOverhead = 160

// AppendWebhookPayload appends the webhook body of a finished job to b:
// byte for byte json.Marshal(NewWebhookPayload(id, status, res))
// (FuzzAppendWebhookPayloadIsMarshal), without reflection and without
// copying the result's body into a string first — every job's webhook is
// encoded once per attempt.
func AppendWebhookPayload(b []byte, id domain.JobID, status domain.Status, res *domain.Result) []byte {
	b = append(b, `{"body":`...)
	var encoding, reason string
	var truncated bool
	var code int
	if res != nil {
		if utf8.Valid(res.Body) {
			b = appendJSONString(b, res.Body)
		} else {
			encoding = "base64"
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, res.Body)
			b = append(b, '"')
		}
		truncated, code = res.BodyTruncated, res.ResponseStatus
		if status == domain.StatusFailed {
			reason = res.Reason
		}
	} else {
		b = append(b, `""`...)
	}
	if encoding != "" {
		b = append(b, `,"body_encoding":"`+encoding+`"`...)
	}
	if truncated {
		b = append(b, `,"body_truncated":true`...)
	}
	b = append(b, `,"job_id":`...)
	b = appendJSONString(b, id)
	if reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, reason)
	}
	b = append(b, `,"response_status":`...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, status)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string the way encoding/json writes
// one: the short escapes for \b \f \n \r \t " and \, \u00XX for the other
// control characters and for < > & (HTML-safe), \u2028 and \u2029 for the
// two line separators JavaScript reads as line ends, and \ufffd for each
// byte that is not UTF-8.
func appendJSONString[S ~string | ~[]byte](b []byte, s S) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	last := 0 // s[last:i] is still to be copied
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if !jsonEscaped[c] {
				i++
				continue
			}
			b = append(b, s[last:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, `\b`...)
			case '\f':
				b = append(b, `\f`...)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			case '\t':
				b = append(b, `\t`...)
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			last = i
			continue
		}
		r, size := utf8.DecodeRune([]byte(s[i:min(i+utf8.UTFMax, len(s))]))
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[last:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[last:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		last = i
	}
	b = append(b, s[last:]...)
	return append(b, '"')
}

// jsonEscaped marks the ASCII bytes appendJSONString escapes.
var jsonEscaped = func() (t [utf8.RuneSelf]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = true
	}
	t[0x7f] = false
	return t
}()
