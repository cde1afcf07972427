package domain

import (
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on request fields. They keep one request from bloating rows, logs and
// outbound requests; the overall body size is limited separately.
const (
	MaxUserIDLen        = 256
	MaxIdempotentKeyLen = 512
	MaxURLLen           = 8192
	MaxPoolIDLen        = 128
	MaxMethodLen        = 32
	MaxHeaders          = 100
	MaxHeaderNameLen    = 256
	MaxHeaderValueLen   = 8192
)

// AccountQueueMode is a caller's opinion about per-tenant isolation for the
// job's upstream, taken from the X-Aqueduct-Account-Queue request header.
type AccountQueueMode int

const (
	AccountQueueUnchanged AccountQueueMode = iota // no header: leave the upstream's mode as it is
	AccountQueueEnabled                           // "enabled": one lane per tenant
	AccountQueueDisabled                          // any other value: one shared lane
)

// JobRequest is what a caller asks Aquifer to send.
type JobRequest struct {
	// ID, when set by an adapter, is the new job's id (it must satisfy
	// ValidJobID); otherwise one is generated. Never taken from callers'
	// JSON: the A2A adapter uses it to make a task's id the job's id.
	ID JobID

	UserID        string
	IdempotentKey string
	URL           string
	PoolID        string
	Method        string
	Headers       map[string]string
	Body          string
	WebhookURL    string

	AccountQueue AccountQueueMode // from a request header, never from JSON

	// Options are the caller's job options as sent (all optional).
	Options OptionsRequest

	upstream UpstreamKey // set by Validate
	resolved JobOptions  // set by ResolveOptions

	// The hosts of URL and WebhookURL as Validate parsed them, so that the
	// destination check does not parse them again (ValidatedHost).
	urlHost, webhookHost validatedHost
}

// validatedHost is the host of the URL raw.
type validatedHost struct{ raw, host string }

// ValidatedHost returns the host (url.URL.Hostname) of raw when Validate
// parsed exactly raw as r's url or webhook_url; ok is false otherwise (not
// validated, or changed since).
func (r *JobRequest) ValidatedHost(raw string) (host string, ok bool) {
	for _, v := range [2]validatedHost{r.urlHost, r.webhookHost} {
		if v.raw == raw && raw != "" {
			return v.host, true
		}
	}
	return "", false
}

// ResolveOptions checks r.Options against the server's bounds and fixes
// them for a job submitted at now; NewJob then builds the job with them.
func (r *JobRequest) ResolveOptions(now time.Time, b OptionBounds) error {
	o, err := r.Options.Resolve(now, b)
	if err != nil {
		return err
	}
	r.resolved = o
	return nil
}

// Resolved returns the options ResolveOptions fixed.
func (r *JobRequest) Resolved() JobOptions { return r.resolved }

// Upstream returns the destination's key; valid after Validate succeeded.
func (r *JobRequest) Upstream() UpstreamKey { return r.upstream }

// hopByHop headers are meaningful only for one connection; Aquifer sets them
// itself on the outbound request, so a job may not carry them.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Transfer-Encoding": true,
	"Upgrade": true, "Te": true, "Trailer": true, "Content-Length": true,
}

// Validate checks the request and normalises it in place: the method is
// upper-cased and defaults to GET. It returns the first problem found as an
// *Error naming the field, in the order BEHAVIOR.md §4.2 gives.
func (r *JobRequest) Validate() error {
	if r.ID != "" && !ValidJobID(string(r.ID)) {
		return Invalid("id", "id must be 32 lower-case hex digits")
	}
	if strings.TrimSpace(r.UserID) == "" {
		return Invalid("user_id", "user_id is required")
	}
	if err := checkText("user_id", r.UserID, MaxUserIDLen); err != nil {
		return err
	}
	if strings.TrimSpace(r.IdempotentKey) == "" {
		return Invalid("idempotent_key", "idempotent_key is required")
	}
	if err := checkText("idempotent_key", r.IdempotentKey, MaxIdempotentKeyLen); err != nil {
		return err
	}
	switch {
	case r.URL == "" && r.PoolID == "":
		return Invalid("url", "either url or pool_id is required")
	case r.URL != "" && r.PoolID != "":
		return Invalid("url", "url and pool_id are mutually exclusive — a job dispatches to one or the other")
	case r.URL != "":
		u, err := parseTargetURL("url", r.URL)
		if err != nil {
			return err
		}
		r.upstream, _ = upstreamOfURL(u)
		r.urlHost = validatedHost{r.URL, u.Hostname()}
	default:
		if err := ValidatePoolID("pool_id", r.PoolID); err != nil {
			return err
		}
		r.upstream = PoolUpstream(r.PoolID)
	}
	if r.Method == "" {
		r.Method = http.MethodGet
	}
	if len(r.Method) > MaxMethodLen || !IsToken(r.Method) {
		return Invalid("method", "method %q is not a valid HTTP method token", truncate(r.Method, 40))
	}
	r.Method = strings.ToUpper(r.Method)
	if r.Method == http.MethodConnect {
		return Invalid("method", "method CONNECT is not supported")
	}
	if r.WebhookURL != "" {
		u, err := parseTargetURL("webhook_url", r.WebhookURL)
		if err != nil {
			return err
		}
		r.webhookHost = validatedHost{r.WebhookURL, u.Hostname()}
	}
	return ValidateHeaders("headers", r.Headers)
}

// ValidateTargetURL checks that raw is an absolute http or https URL with a
// host and no embedded credentials.
func ValidateTargetURL(field, raw string) error {
	_, err := parseTargetURL(field, raw)
	return err
}

func parseTargetURL(field, raw string) (*url.URL, error) {
	if len(raw) > MaxURLLen {
		return nil, Invalid(field, "%s is longer than %d bytes", field, MaxURLLen)
	}
	if strings.ContainsAny(raw, " \t\r\n\x00") || !utf8.ValidString(raw) {
		return nil, Invalid(field, "%s contains whitespace or control characters", field)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, Invalid(field, "%s is not a valid URL", field)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return nil, Invalid(field, "%s must be an absolute http or https URL", field)
	}
	if u.Host == "" || strings.TrimSuffix(u.Hostname(), ".") == "" { // "http://./" names no host
		return nil, Invalid(field, "%s must include a host", field)
	}
	if u.User != nil {
		return nil, Invalid(field, "%s must not contain credentials; send them in a header", field)
	}
	if p := u.Port(); p != "" {
		if len(p) > 5 || !allDigits(p) || atoi(p) == 0 || atoi(p) > 65535 { // "00000" is port 0 too
			return nil, Invalid(field, "%s has an invalid port", field)
		}
	}
	return u, nil
}

// ValidatePoolID checks a pool identifier: 1–128 characters from
// [A-Za-z0-9._-].
func ValidatePoolID(field, id string) error {
	if id == "" {
		return Invalid(field, "%s is required", field)
	}
	if len(id) > MaxPoolIDLen {
		return Invalid(field, "%s is longer than %d characters", field, MaxPoolIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return Invalid(field, "%s may contain only letters, digits, '.', '_' and '-'", field)
		}
	}
	return nil
}

// ValidateHeaders checks header names (RFC 9110 tokens, each name once,
// case-insensitively) and values (no control characters but tab).
func ValidateHeaders(field string, h map[string]string) error {
	if len(h) > MaxHeaders {
		return Invalid(field, "%s has more than %d entries", field, MaxHeaders)
	}
	seen := make(map[string]bool, len(h))
	for name, value := range h {
		if name == "" || len(name) > MaxHeaderNameLen || !IsToken(name) {
			return Invalid(field, "header name %q is not a valid HTTP header name", truncate(name, 40))
		}
		canon := http.CanonicalHeaderKey(name)
		if seen[canon] {
			return Invalid(field, "header %q is given more than once", canon)
		}
		seen[canon] = true
		if hopByHop[canon] {
			return Invalid(field, "header %q is managed by Aquifer and may not be set", canon)
		}
		if len(value) > MaxHeaderValueLen {
			return Invalid(field, "value of header %q is longer than %d bytes", canon, MaxHeaderValueLen)
		}
		for i := 0; i < len(value); i++ {
			if c := value[i]; (c < 0x20 && c != '\t') || c == 0x7f {
				return Invalid(field, "value of header %q contains control characters", canon)
			}
		}
	}
	return nil
}

// NewJob builds a queued forward job from a validated request, with the
// options ResolveOptions fixed (none if it was not called). A job due later
// is scheduled: it has no ReadyQueue until the store promotes it, and it
// is kept QueuedTTL past its due time.
func NewJob(id JobID, r *JobRequest, lane QueueKey, now time.Time) *Job {
	var headers map[string]string
	if len(r.Headers) > 0 {
		headers = make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			headers[k] = v
		}
	}
	var body []byte
	if r.Body != "" {
		body = []byte(r.Body)
	}
	j := &Job{
		ID:            id,
		UserID:        r.UserID,
		IdempotentKey: r.IdempotentKey,
		URL:           r.URL,
		PoolID:        r.PoolID,
		Method:        r.Method,
		Headers:       headers,
		Body:          body,
		WebhookURL:    r.WebhookURL,
		Queue:         lane,
		ReadyQueue:    lane,
		Status:        StatusQueued,
		CreatedAt:     now,
		UpdatedAt:     now,
		ExpiresAt:     now.Add(QueuedTTL),
		JobOptions:    r.resolved,
	}
	if j.NotBefore.After(now) {
		j.ReadyQueue = ""
		j.ExpiresAt = j.NotBefore.Add(QueuedTTL)
	}
	return j
}

func checkText(field, s string, max int) error {
	if len(s) > max {
		return Invalid(field, "%s is longer than %d bytes", field, max)
	}
	if !utf8.ValidString(s) {
		return Invalid(field, "%s is not valid UTF-8", field)
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return Invalid(field, "%s contains control characters", field)
		}
	}
	return nil
}

// IsToken reports whether s is an RFC 9110 token (method and header names):
// what jobs are checked against when submitted and the outbound HTTP/1.1
// client again before it writes a request.
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		switch c {
		case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
			continue
		}
		return false
	}
	return true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func atoi(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		n = n*10 + int(s[i]-'0')
	}
	return n
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
