package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// enqueueInput has the field names of POST /jobs.
type enqueueInput struct {
	UserID        string            `json:"user_id" jsonschema:"Your tenant or caller identity; scopes idempotent_key. At most 256 bytes."`
	IdempotentKey string            `json:"idempotent_key" jsonschema:"Your deduplication key, unique per user_id. Resubmitting the same (user_id, idempotent_key) returns the existing job instead of creating a second one, so retry freely with the same key."`
	URL           string            `json:"url,omitempty" jsonschema:"The request's target: an absolute http or https URL without credentials. Give exactly one of url and pool_id."`
	PoolID        string            `json:"pool_id,omitempty" jsonschema:"Send to a pool of registered members instead of a URL ([A-Za-z0-9._-], at most 128). Give exactly one of url and pool_id."`
	Method        string            `json:"method,omitempty" jsonschema:"HTTP method, default GET."`
	Headers       map[string]string `json:"headers,omitempty" jsonschema:"Request headers, one value per name, sent verbatim (put credentials here, not in the URL)."`
	Body          string            `json:"body,omitempty" jsonschema:"Request body, sent verbatim. JSON-encode structured bodies yourself."`
	WebhookURL    string            `json:"webhook_url,omitempty" jsonschema:"Optional http(s) URL that receives the result as a POST when the job finishes. Not needed if you wait with aquifer_get_job."`

	// The optional job options of POST /jobs, traceparent and tracestate
	// included (MCP has no request headers to carry them).
	httpkit.OptionsJSON
}

// enqueueBatchInput is POST /jobs/batch's body. The items are decoded one
// by one, as the REST API does, so a malformed one is answered in its own
// result instead of failing the call.
type enqueueBatchInput struct {
	Jobs []json.RawMessage `json:"jobs"`
}

type enqueueOutput struct {
	JobID       string `json:"job_id" jsonschema:"The job's id (32 hex characters). Pass it to aquifer_get_job."`
	Status      string `json:"status" jsonschema:"The job's status now: queued, in_flight, completed or failed."`
	Duplicate   bool   `json:"duplicate,omitempty" jsonschema:"True when this (user_id, idempotent_key) was submitted before: job_id is the existing job and nothing new was created."`
	ResourceURI string `json:"resource_uri" jsonschema:"The job as an MCP resource."`
}

type getJobInput struct {
	JobID       string  `json:"job_id" jsonschema:"The job id returned by aquifer_enqueue_job."`
	WaitSeconds float64 `json:"wait_seconds,omitempty" jsonschema:"Wait up to this many seconds (at most 60) for the job to finish before answering. 0 or absent answers at once. If the job is still queued or in_flight when the wait ends, call again."`
}

// cancelInput names the job to cancel.
type cancelInput struct {
	JobID string `json:"job_id" jsonschema:"The job id returned by aquifer_enqueue_job."`
}

type noInput struct{}

// challengeInput has the fields of POST /l8/challenge.
type challengeInput struct {
	ChallengeID     string `json:"challenge_id" jsonschema:"A UUID naming this challenge."`
	Nonce           string `json:"nonce" jsonschema:"A random nonce, never reused."`
	Timestamp       int64  `json:"timestamp" jsonschema:"Unix time in seconds when the challenge was made."`
	SenderPublicKey string `json:"sender_public_key" jsonschema:"The challenger's Ed25519 public key, standard base64."`
	Signature       string `json:"signature" jsonschema:"The challenger's signature over challenge_id:nonce, standard base64."`
}

// addTool registers a tool with the input schema inferred for In (or the
// one given), and keeps the schema for checkArgs.
func addTool[In, Out any](s *Server, t *sdk.Tool, h sdk.ToolHandlerFor[In, Out]) {
	sch, _ := t.InputSchema.(*jsonschema.Schema)
	if sch == nil {
		sch = schemaFor[In]()
		t.InputSchema = sch
	}
	s.inputs[t.Name] = sch
	sdk.AddTool(s.sdk, t, h)
}

func (s *Server) addTools() {
	addTool(s, &sdk.Tool{
		Name:  "aquifer_enqueue_job",
		Title: "Queue an HTTP request",
		Description: "Queue an HTTP request for durable, rate-paced delivery. Aquifer stores the job before answering, " +
			"sends it at the pace the destination can take (retrying 5xx and network errors, waiting out 429s), and keeps " +
			"the upstream's response as the job's result. Returns job_id; then call aquifer_get_job with wait_seconds to " +
			"get the result. The same (user_id, idempotent_key) never creates a second job: it returns the existing one " +
			"with duplicate=true. Errors: invalid fields (fix and resubmit), admission control shedding load (retry later " +
			"with the same idempotent_key).",
		InputSchema: enqueueSchema(),
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, OpenWorldHint: ptr(true), DestructiveHint: ptr(false)},
	}, s.enqueue)

	addTool(s, &sdk.Tool{
		Name:  "aquifer_enqueue_batch",
		Title: "Queue many HTTP requests at once",
		Description: "Queue up to 1000 HTTP requests in one call and one durable commit. Each item of jobs takes the " +
			"arguments of aquifer_enqueue_job and is checked on its own: the answer has one result per item, in order, " +
			"with outcome created, duplicate (job_id is the existing job) or error (with the error and the field; " +
			"nothing was stored for that item, the others are not affected). Errors for the whole call: no jobs or " +
			"more than 1000, admission control shedding load (nothing stored; retry later with the same keys).",
		InputSchema: enqueueBatchSchema(),
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, OpenWorldHint: ptr(true), DestructiveHint: ptr(false)},
	}, s.enqueueBatch)

	addTool(s, &sdk.Tool{
		Name:  "aquifer_get_job",
		Title: "Read or wait for a job",
		Description: "Read a job: its status (queued, in_flight, completed, failed), attempts, and once finished the " +
			"upstream's response (response_status, body, content_type) or, for a failed job, the reason. With " +
			"wait_seconds (up to 60) it waits for the job to finish and answers as soon as it does, so you need no " +
			"webhook; if it is still running when the wait ends you get its current state and can call again. " +
			"Bodies that are not valid UTF-8 come back base64-encoded with body_encoding=base64.",
		InputSchema: getJobSchema(),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, s.getJob)

	addTool(s, &sdk.Tool{
		Name:  "aquifer_cancel_job",
		Title: "Cancel a job that has not been sent",
		Description: "Cancel a job whose request has not been sent yet: one still queued, or waiting out a retry " +
			"backoff between attempts (as DELETE /jobs/{id}). The job ends failed with reason canceled, its request " +
			"is never sent, and its webhook (if any) still reports it. Returns the canceled job. Errors: the job is " +
			"being sent right now or has already finished (it cannot be canceled; read it with aquifer_get_job), or " +
			"the id is unknown or expired.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: false, OpenWorldHint: ptr(false)},
	}, s.cancelJob)

	addTool(s, &sdk.Tool{
		Name:  "aquifer_health",
		Title: "Aquifer health",
		Description: "Aquifer's health: status ok or degraded, whether the job store answers, counts of queued and " +
			"in-flight jobs and pending webhooks, every live destination lane with its current pace, admission " +
			"control state, and pools.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, s.health)

	addTool(s, &sdk.Tool{
		Name:  "aquifer_l8_metadata",
		Title: "Aquifer L8 identity",
		Description: "Aquifer's L8 identity document (as served at /.well-known/l8): the Ed25519 public key that " +
			"signs webhook deliveries, the Standard Webhooks key, the challenge endpoint and supported algorithms. " +
			"Use it to verify deliveries from this Aquifer.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, s.l8Metadata)

	addTool(s, &sdk.Tool{
		Name:  "aquifer_l8_challenge",
		Title: "Challenge Aquifer's L8 identity",
		Description: "Ask Aquifer to prove it holds its L8 key (as POST /l8/challenge): send a fresh challenge " +
			"signed with your own key; the answer carries Aquifer's signature over challenge_id:nonce. A stale " +
			"timestamp, a reused nonce or a bad signature is refused with the reason.",
		Annotations: &sdk.ToolAnnotations{IdempotentHint: false},
	}, s.l8Challenge)
}

// enqueueSchema is the inferred schema with what inference cannot say:
// the times are strings or integers (Unix milliseconds), priority is one of
// three words, the numbers of seconds are not negative.
func enqueueSchema() *jsonschema.Schema {
	sch := schemaFor[enqueueInput]()
	for _, name := range []string{"not_before", "deadline"} {
		if p := sch.Properties[name]; p != nil {
			p.Type, p.Types = "", []string{"string", "integer"}
		}
	}
	if p := sch.Properties["priority"]; p != nil {
		p.Enum = []any{"high", "normal", "low"}
	}
	for _, name := range []string{"delay_seconds", "max_wait_seconds", "timeout_seconds"} {
		if p := sch.Properties[name]; p != nil {
			p.Minimum = ptr(0.0)
		}
	}
	if r := sch.Properties["retry"]; r != nil {
		if p := r.Properties["max_attempts"]; p != nil {
			p.Minimum = ptr(1.0)
		}
	}
	return sch
}

// enqueueBatchSchema is aquifer_enqueue_batch's input: 1 to 1000 items,
// each checked by the tool itself (so that a bad one fails alone).
func enqueueBatchSchema() *jsonschema.Schema {
	return &jsonschema.Schema{
		Type:     "object",
		Required: []string{"jobs"},
		Properties: map[string]*jsonschema.Schema{
			"jobs": {
				Type:        "array",
				Description: "The job requests, each an object with the arguments of aquifer_enqueue_job (user_id, idempotent_key, url or pool_id, and the optional fields).",
				MinItems:    ptr(1),
				MaxItems:    ptr(app.MaxBatch),
				Items:       &jsonschema.Schema{Description: "One job request, as aquifer_enqueue_job's arguments."},
			},
		},
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
	}
}

// getJobSchema is the inferred schema with bounds on wait_seconds.
func getJobSchema() *jsonschema.Schema {
	sch := schemaFor[getJobInput]()
	if w := sch.Properties["wait_seconds"]; w != nil {
		w.Minimum = ptr(0.0)
	}
	return sch
}

func ptr[T any](v T) *T { return &v }

func (s *Server) enqueue(ctx context.Context, _ *sdk.CallToolRequest, in enqueueInput) (*sdk.CallToolResult, enqueueOutput, error) {
	if s.opts.MaxBodyBytes > 0 && int64(len(in.Body)) > s.opts.MaxBodyBytes {
		return nil, enqueueOutput{}, fmt.Errorf("body is %d bytes, more than the limit of %d bytes; nothing was stored", len(in.Body), s.opts.MaxBodyBytes)
	}
	opts, err := in.Options()
	if err != nil {
		return nil, enqueueOutput{}, s.toolError("aquifer_enqueue_job", err)
	}
	res, err := s.core.Enqueue(ctx, &domain.JobRequest{
		UserID: in.UserID, IdempotentKey: in.IdempotentKey, URL: in.URL, PoolID: in.PoolID,
		Method: in.Method, Headers: in.Headers, Body: in.Body, WebhookURL: in.WebhookURL, Options: opts,
	})
	if err != nil {
		return nil, enqueueOutput{}, s.toolError("aquifer_enqueue_job", err)
	}
	return nil, enqueueOutput{JobID: string(res.JobID), Status: string(res.Status), Duplicate: res.Duplicate,
		ResourceURI: jobURI(res.JobID)}, nil
}

func (s *Server) enqueueBatch(ctx context.Context, _ *sdk.CallToolRequest, in enqueueBatchInput) (*sdk.CallToolResult, *httpkit.BatchResultJSON, error) {
	if err := httpkit.CheckBatchSize(len(in.Jobs)); err != nil {
		return nil, nil, s.toolError("aquifer_enqueue_batch", err)
	}
	b := httpkit.NewBatch(in.Jobs, nil, s.opts.MaxBodyBytes)
	var done []app.BatchItem
	if len(b.Requests) > 0 {
		var err error
		if done, err = s.core.EnqueueBatch(ctx, b.Requests); err != nil {
			return nil, nil, s.toolError("aquifer_enqueue_batch", err)
		}
	}
	out, _ := b.Result(done, s.log)
	return nil, out, nil
}

func (s *Server) getJob(ctx context.Context, _ *sdk.CallToolRequest, in getJobInput) (*sdk.CallToolResult, httpkit.JobView, error) {
	if in.JobID == "" {
		return nil, httpkit.JobView{}, errors.New("job_id is required")
	}
	if in.WaitSeconds < 0 || math.IsNaN(in.WaitSeconds) {
		return nil, httpkit.JobView{}, errors.New("wait_seconds must be between 0 and 60")
	}
	wait := min(time.Duration(in.WaitSeconds*float64(time.Second)), MaxWait)
	j, err := s.waitJob(ctx, domain.JobID(in.JobID), wait)
	if err != nil {
		return nil, httpkit.JobView{}, s.toolError("aquifer_get_job", err)
	}
	return nil, httpkit.NewJobView(j), nil
}

func (s *Server) cancelJob(ctx context.Context, _ *sdk.CallToolRequest, in cancelInput) (*sdk.CallToolResult, httpkit.JobView, error) {
	if in.JobID == "" {
		return nil, httpkit.JobView{}, errors.New("invalid job_id: job_id is required")
	}
	j, err := s.core.Cancel(ctx, domain.JobID(in.JobID))
	if err != nil {
		return nil, httpkit.JobView{}, s.toolError("aquifer_cancel_job", err)
	}
	return nil, httpkit.NewJobView(j), nil
}

func (s *Server) health(ctx context.Context, _ *sdk.CallToolRequest, _ noInput) (*sdk.CallToolResult, *app.Health, error) {
	return nil, s.core.Health(ctx), nil
}

func (s *Server) l8Metadata(_ context.Context, _ *sdk.CallToolRequest, _ noInput) (*sdk.CallToolResult, *l8.Metadata, error) {
	m := s.core.L8Metadata()
	if m == nil {
		return nil, nil, errors.New("L8 is not enabled on this Aquifer")
	}
	return nil, m, nil
}

func (s *Server) l8Challenge(ctx context.Context, _ *sdk.CallToolRequest, in challengeInput) (*sdk.CallToolResult, *l8.ChallengeResponse, error) {
	resp, err := s.core.L8Challenge(ctx, &l8.ChallengeRequest{
		ChallengeID: in.ChallengeID, Nonce: in.Nonce, Timestamp: in.Timestamp,
		SenderPublicKey: in.SenderPublicKey, Signature: in.Signature,
	})
	if err != nil {
		return nil, nil, s.toolError("aquifer_l8_challenge", err)
	}
	return nil, resp, nil
}

// toolError turns a core error into the message of an MCP tool error. Each
// message says what happened and what to do; internal errors are logged here
// and shown only generically.
func (s *Server) toolError(tool string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return errors.New("the request was canceled")
	}
	var rej *domain.RejectedError
	if errors.As(err, &rej) {
		return fmt.Errorf("%s; nothing was stored: retry in %d seconds with the same idempotent_key",
			rej.Error(), int64(math.Ceil(rej.RetryAfter.Seconds())))
	}
	msg := domain.PublicMessage(err)
	switch domain.CodeOf(err) {
	case domain.CodeInvalid, domain.CodeTooLarge:
		var de *domain.Error
		if errors.As(err, &de) && de.Field != "" {
			return fmt.Errorf("invalid %s: %s", de.Field, msg)
		}
		return fmt.Errorf("invalid request: %s", msg)
	case domain.CodeNotFound:
		if errors.Is(err, domain.ErrNotFound) {
			return fmt.Errorf("%s (unknown id, or the job expired)", msg)
		}
		return errors.New(msg)
	case domain.CodeUnavailable:
		return fmt.Errorf("%s: Aquifer cannot reach its job store right now; nothing was stored, retry shortly with the same idempotent_key", msg)
	case domain.CodeInternal:
		s.log.Error("tool failed", zap.String("tool", tool), zap.Error(err))
		return errors.New("internal error (details are in Aquifer's log)")
	default:
		return errors.New(msg)
	}
}
