package app

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
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

// webhookKeyPrefix prefixes the idempotency key of a webhook job. Webhook jobs
// have their own Kind, so these keys never collide with callers' keys.
const webhookKeyPrefix = "webhook:"

// webhookJob builds the durable job that delivers j's result. Its key
// "webhook:<job id>" makes the delivery happen once per job, even when the job
// itself ran twice.
func (d *dispatcher) webhookJob(j *domain.Job, status domain.Status, res *domain.Result, now time.Time) (*domain.Job, error) {
	body, err := json.Marshal(NewWebhookPayload(j.ID, status, res))
	if err != nil {
		return nil, fmt.Errorf("encode webhook payload: %w", err)
	}
	u, ok := domain.UpstreamOf(j.WebhookURL)
	if !ok {
		return nil, fmt.Errorf("webhook_url %q has no upstream", j.WebhookURL)
	}
	return &domain.Job{
		ID:            d.ids.New(),
		Kind:          domain.KindWebhook,
		ParentID:      j.ID,
		UserID:        j.UserID,
		IdempotentKey: webhookKeyPrefix + string(j.ID),
		URL:           j.WebhookURL,
		Method:        "POST",
		Headers:       map[string]string{"Content-Type": "application/json"},
		Body:          body,
		Lane:          domain.SharedLane(u),
		Status:        domain.StatusQueued,
		CreatedAt:     now,
		UpdatedAt:     now,
		ExpiresAt:     now.Add(domain.QueuedTTL),
	}, nil
}
