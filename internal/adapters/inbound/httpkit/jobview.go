package httpkit

import (
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// JobView is a job as the adapters show it: GET /jobs/{id}, MCP tool results
// and resources. Secret request headers and secret URL parameters are
// redacted and the request body is never echoed; body is the upstream's
// response body. The jsonschema tags
// describe it to agents (MCP output schemas).
type JobView struct {
	JobID          string            `json:"job_id" jsonschema:"The job's id."`
	Status         string            `json:"status" jsonschema:"queued (waiting for its turn), in_flight (being sent), completed (the upstream answered) or failed (retries spent, or canceled)."`
	URL            string            `json:"url" jsonschema:"The target URL, secret query parameters redacted; empty for pool jobs."`
	Method         string            `json:"method"`
	CreatedAt      int64             `json:"created_at" jsonschema:"Unix time in milliseconds."`
	UpdatedAt      int64             `json:"updated_at" jsonschema:"Unix time in milliseconds."`
	Tenant         string            `json:"tenant,omitempty" jsonschema:"The API-key tenant the job belongs to (shown to operators; a tenant sees its own jobs without it)."`
	UserID         string            `json:"user_id"`
	PoolID         string            `json:"pool_id,omitempty"`
	WebhookURL     string            `json:"webhook_url,omitempty" jsonschema:"The webhook URL, secret query parameters redacted."`
	Headers        map[string]string `json:"headers,omitempty" jsonschema:"The request headers, secrets redacted."`
	Attempts       int               `json:"attempts" jsonschema:"Dispatch attempts so far."`
	ResponseStatus *int              `json:"response_status,omitempty" jsonschema:"The upstream's HTTP status, once finished (0: no response was obtained)."`
	Body           *string           `json:"body,omitempty" jsonschema:"The upstream's response body, once finished."`
	BodyEncoding   string            `json:"body_encoding,omitempty" jsonschema:"base64 when the body is not valid UTF-8."`
	BodyTruncated  bool              `json:"body_truncated,omitempty" jsonschema:"True when the response was longer than Aquifer keeps."`
	ContentType    string            `json:"content_type,omitempty" jsonschema:"The response's Content-Type."`
	Reason         string            `json:"reason,omitempty" jsonschema:"Why the job failed."`
	Webhook        *WebhookView      `json:"webhook,omitempty" jsonschema:"Delivery of the result to webhook_url."`
	History        []AttemptView     `json:"history" jsonschema:"The job's last dispatch attempts (at most 10), oldest first; kept across retries."`

	// The job's options (omitted when the job has the default).
	NotBefore      string     `json:"not_before,omitempty" jsonschema:"When the job becomes due (RFC 3339, UTC, milliseconds); omitted when it was due at once."`
	Scheduled      bool       `json:"scheduled,omitempty" jsonschema:"True while the job waits for its not_before: stored and queued, but in no destination's queue yet."`
	Deadline       string     `json:"deadline,omitempty" jsonschema:"The latest time the job may be sent (RFC 3339, UTC, milliseconds); a job still waiting then fails with reason deadline exceeded."`
	Priority       string     `json:"priority" jsonschema:"high, normal or low."`
	Retry          *RetryView `json:"retry,omitempty" jsonschema:"The job's own retry policy; omitted when it has the server's."`
	TimeoutSeconds float64    `json:"timeout_seconds,omitempty" jsonschema:"The limit on each attempt, in seconds; omitted when it is the server's."`
	TraceParent    string     `json:"traceparent,omitempty" jsonschema:"The W3C traceparent the job continues."`
}

// RetryView is a job's own retry policy; a field left out is the server's.
type RetryView struct {
	MaxAttempts       int     `json:"max_attempts,omitempty"`
	BackoffSeconds    float64 `json:"backoff_seconds,omitempty"`
	MaxBackoffSeconds float64 `json:"max_backoff_seconds,omitempty"`
}

// WebhookView reports the delivery of a finished job's result.
type WebhookView struct {
	Status         string `json:"status" jsonschema:"pending, delivered or failed."`
	Attempts       int    `json:"attempts"`
	ResponseStatus int    `json:"response_status,omitempty"`
	Reason         string `json:"reason,omitempty"`
}

// NewJobView renders j. A job the core still shows with its tenant scope
// (to an operator, who sees every tenant's jobs) shows its tenant on its
// own and its user and pool ids as the tenant named them.
func NewJobView(j *domain.Job) JobView {
	tenant, user := domain.Unscope(j.UserID)
	_, pool := domain.Unscope(j.PoolID)
	out := JobView{
		JobID: string(j.ID), Status: string(j.Status), URL: domain.RedactURL(j.URL), Method: j.Method,
		CreatedAt: j.CreatedAt.UnixMilli(), UpdatedAt: j.UpdatedAt.UnixMilli(), Tenant: tenant, UserID: user,
		PoolID: pool, WebhookURL: domain.RedactURL(j.WebhookURL), Headers: domain.RedactHeaders(j.Headers),
		Attempts: j.Attempts, History: historyView(j.History),
		NotBefore: domain.FormatWhen(j.NotBefore), Scheduled: j.Scheduled(), Deadline: domain.FormatWhen(j.Deadline),
		Priority: j.Priority.String(), TimeoutSeconds: j.Timeout.Seconds(), TraceParent: j.TraceParent,
	}
	if r := j.Retry; r != (domain.RetryOptions{}) {
		out.Retry = &RetryView{MaxAttempts: r.MaxAttempts, BackoffSeconds: r.Backoff.Seconds(), MaxBackoffSeconds: r.MaxBackoff.Seconds()}
	}
	if r := j.Result; r != nil {
		status := r.ResponseStatus
		body, enc := app.EncodeBody(r.Body)
		out.ResponseStatus, out.Body, out.BodyEncoding = &status, &body, enc
		out.BodyTruncated, out.ContentType, out.Reason = r.BodyTruncated, r.ContentType, r.Reason
	}
	if d := j.Delivery; d != nil {
		out.Webhook = &WebhookView{Status: string(d.Status), Attempts: d.Attempts, ResponseStatus: d.ResponseStatus, Reason: d.Reason}
	}
	return out
}
