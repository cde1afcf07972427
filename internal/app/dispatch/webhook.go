package dispatch

import (
	"encoding/base64"
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
