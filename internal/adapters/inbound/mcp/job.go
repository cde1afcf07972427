package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// jobOutput is a job as MCP shows it: the shape of GET /jobs/{id}. Secret
// request headers are redacted and the request body is never echoed; body is
// the upstream's response body.
type jobOutput struct {
	JobID          string            `json:"job_id" jsonschema:"The job's id."`
	Status         string            `json:"status" jsonschema:"queued (waiting for its turn), in_flight (being sent), completed (the upstream answered) or failed (retries spent, or canceled)."`
	URL            string            `json:"url" jsonschema:"The target URL; empty for pool jobs."`
	Method         string            `json:"method"`
	CreatedAt      int64             `json:"created_at" jsonschema:"Unix time in milliseconds."`
	UpdatedAt      int64             `json:"updated_at" jsonschema:"Unix time in milliseconds."`
	UserID         string            `json:"user_id"`
	PoolID         string            `json:"pool_id,omitempty"`
	WebhookURL     string            `json:"webhook_url,omitempty"`
	Headers        map[string]string `json:"headers,omitempty" jsonschema:"The request headers, secrets redacted."`
	Attempts       int               `json:"attempts" jsonschema:"Dispatch attempts so far."`
	ResponseStatus *int              `json:"response_status,omitempty" jsonschema:"The upstream's HTTP status, once finished (0: no response was obtained)."`
	Body           *string           `json:"body,omitempty" jsonschema:"The upstream's response body, once finished."`
	BodyEncoding   string            `json:"body_encoding,omitempty" jsonschema:"base64 when the body is not valid UTF-8."`
	BodyTruncated  bool              `json:"body_truncated,omitempty" jsonschema:"True when the response was longer than Aquifer keeps."`
	ContentType    string            `json:"content_type,omitempty" jsonschema:"The response's Content-Type."`
	Reason         string            `json:"reason,omitempty" jsonschema:"Why the job failed."`
	Webhook        *webhookOutput    `json:"webhook,omitempty" jsonschema:"Delivery of the result to webhook_url."`
}

type webhookOutput struct {
	Status         string `json:"status" jsonschema:"pending, delivered or failed."`
	Attempts       int    `json:"attempts"`
	ResponseStatus int    `json:"response_status,omitempty"`
	Reason         string `json:"reason,omitempty"`
}

func toJobOutput(j *domain.Job) jobOutput {
	out := jobOutput{
		JobID: string(j.ID), Status: string(j.Status), URL: j.URL, Method: j.Method,
		CreatedAt: j.CreatedAt.UnixMilli(), UpdatedAt: j.UpdatedAt.UnixMilli(), UserID: j.UserID,
		PoolID: j.PoolID, WebhookURL: j.WebhookURL, Headers: domain.RedactHeaders(j.Headers), Attempts: j.Attempts,
	}
	if r := j.Result; r != nil {
		status := r.ResponseStatus
		body, enc := app.EncodeBody(r.Body)
		out.ResponseStatus, out.Body, out.BodyEncoding = &status, &body, enc
		out.BodyTruncated, out.ContentType, out.Reason = r.BodyTruncated, r.ContentType, r.Reason
	}
	if d := j.Delivery; d != nil {
		out.Webhook = &webhookOutput{Status: string(d.Status), Attempts: d.Attempts, ResponseStatus: d.ResponseStatus, Reason: d.Reason}
	}
	return out
}

// waitJob returns job id once it is terminal, or as it is when wait ends,
// the caller gives up, or the server closes. It listens to the job's events
// rather than polling the store.
func (s *Server) waitJob(ctx context.Context, id domain.JobID, wait time.Duration) (*domain.Job, error) {
	if wait <= 0 {
		return s.core.Get(ctx, id)
	}
	j, sub, err := s.core.Subscribe(ctx, id)
	if err != nil {
		return nil, err
	}
	defer func() { sub.Close() }()
	if j.Status.Terminal() {
		return j, nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.closing:
			return s.core.Get(ctx, id)
		case <-timer.C:
			return s.core.Get(ctx, id)
		case ev, ok := <-sub.C:
			if !ok {
				// We fell behind and were dropped: reload and resubscribe.
				sub.Close()
				if j, sub, err = s.core.Subscribe(ctx, id); err != nil {
					return nil, err
				}
				if j.Status.Terminal() {
					return j, nil
				}
				continue
			}
			if ev.Type.Terminal() {
				// The store holds the result before the event is published.
				return s.core.Get(ctx, id)
			}
		}
	}
}

const jobURIPrefix = "aquifer://jobs/"

func jobURI(id domain.JobID) string { return jobURIPrefix + string(id) }

func (s *Server) addResources() {
	s.sdk.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "aquifer-job",
		Title:       "Aquifer job",
		URITemplate: jobURIPrefix + "{job_id}",
		Description: "A job's current state as JSON, the same document aquifer_get_job returns (status, attempts, " +
			"and once finished the upstream's response or the failure reason).",
		MIMEType: "application/json",
	}, s.readJob)
}

func (s *Server) readJob(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := strings.CutPrefix(uri, jobURIPrefix)
	if !ok || !domain.ValidJobID(id) {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	j, err := s.core.Get(ctx, domain.JobID(id))
	if err != nil {
		if domain.CodeOf(err) == domain.CodeNotFound {
			return nil, sdk.ResourceNotFoundError(uri)
		}
		return nil, s.toolError("resources/read", err)
	}
	b, err := json.Marshal(toJobOutput(j))
	if err != nil {
		return nil, err
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
}
