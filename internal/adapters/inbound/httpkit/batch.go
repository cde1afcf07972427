package httpkit

import (
	"encoding/json"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// BatchJSON is the body of POST /jobs/batch. Its items are kept raw so that
// each is decoded on its own: a malformed item gets its own error and keeps
// none of the others out.
type BatchJSON struct {
	Jobs []json.RawMessage `json:"jobs"`
}

// Batch outcomes, one per item.
const (
	OutcomeCreated   = "created"
	OutcomeDuplicate = "duplicate"
	OutcomeError     = "error"
)

// BatchItemJSON is one item's answer: what POST /jobs would have answered
// for that job alone, with its status code. The jsonschema tags describe it
// to agents (MCP output schemas).
type BatchItemJSON struct {
	Index      int    `json:"index" jsonschema:"The item's index in jobs, from 0."`
	Outcome    string `json:"outcome" jsonschema:"created (a new job), duplicate (this user_id and idempotent_key already had a job: job_id is that job) or error (nothing stored for this item)."`
	StatusCode int    `json:"status_code" jsonschema:"The HTTP status POST /jobs would have answered for this job alone: 201, 200 for a duplicate, 4xx or 5xx for an error."`
	JobID      string `json:"job_id,omitempty" jsonschema:"The job's id (created or duplicate)."`
	Status     string `json:"status,omitempty" jsonschema:"The job's status (created or duplicate)."`
	Error      string `json:"error,omitempty" jsonschema:"What is wrong with the item (error)."`
	Field      string `json:"field,omitempty" jsonschema:"The field the error is about, when there is one (url, retry.max_attempts)."`
	LimitBytes int64  `json:"limit_bytes,omitempty" jsonschema:"The size limit an item over it broke."`
}

// BatchResultJSON is the answer to a batch: one result per item, in order,
// and the count of each outcome.
type BatchResultJSON struct {
	Results    []BatchItemJSON `json:"results" jsonschema:"One result per item of jobs, in order."`
	Created    int             `json:"created" jsonschema:"How many items made a new job."`
	Duplicates int             `json:"duplicates" jsonschema:"How many items were duplicates of an existing job."`
	Errors     int             `json:"errors" jsonschema:"How many items were refused."`
}

// CheckBatchSize refuses a batch with no jobs or more than app.MaxBatch, as
// a *domain.Error about jobs.
func CheckBatchSize(n int) error {
	switch {
	case n == 0:
		return domain.Invalid("jobs", "jobs must hold at least one job request")
	case n > app.MaxBatch:
		return domain.Invalid("jobs", "jobs holds %d job requests; a batch holds at most %d", n, app.MaxBatch)
	}
	return nil
}

// Batch is a batch being answered: the items that decoded, for
// app.Service.EnqueueBatch, and the answers of those that did not.
type Batch struct {
	// Requests are the items that decoded, in item order.
	Requests []*domain.JobRequest
	at       []int // the item index of each request
	results  []BatchItemJSON
}

// NewBatch decodes each item on its own, as POST /jobs decodes its body: h
// supplies the account-queue header and the trace context headers (for
// items without a traceparent of their own), maxItemBytes (0: none) limits
// each item as POST /jobs limits its body.
func NewBatch(items []json.RawMessage, h http.Header, maxItemBytes int64) *Batch {
	b := &Batch{results: make([]BatchItemJSON, len(items))}
	for i, raw := range items {
		b.results[i].Index = i
		if maxItemBytes > 0 && int64(len(raw)) > maxItemBytes {
			b.results[i] = BatchItemJSON{Index: i, Outcome: OutcomeError, StatusCode: http.StatusRequestEntityTooLarge,
				Error:      fmt.Sprintf("job request is %d bytes, more than the limit of %d bytes", len(raw), maxItemBytes),
				LimitBytes: maxItemBytes}
			continue
		}
		var in JobRequestJSON
		if msg, field := decodeJSON(raw, &in); msg != "" {
			b.results[i] = BatchItemJSON{Index: i, Outcome: OutcomeError, StatusCode: http.StatusBadRequest, Error: msg, Field: field}
			continue
		}
		req, err := in.Request(h)
		if err != nil {
			b.fail(i, err, nil)
			continue
		}
		b.Requests, b.at = append(b.Requests, req), append(b.at, i)
	}
	return b
}

// fail records err as item i's answer; internal errors are logged (when
// log is set) and shown only generically.
func (b *Batch) fail(i int, err error, log *zap.Logger) {
	status, body := ErrorResponse(err)
	if status >= 500 && log != nil {
		log.Error("batch item failed", zap.Int("index", i), zap.Error(err))
	}
	b.results[i] = BatchItemJSON{Index: i, Outcome: OutcomeError, StatusCode: status, Error: body.Error, Field: body.Field}
}

// Result is the answer, given what EnqueueBatch made of Requests (one item
// each, in order; nil when Requests is empty), and the load of the last job
// stored, for the load headers (nil if none was).
func (b *Batch) Result(done []app.BatchItem, log *zap.Logger) (*BatchResultJSON, *app.Load) {
	var load *app.Load
	for k, it := range done {
		i := b.at[k]
		if it.Err != nil || it.Result == nil {
			err := it.Err
			if err == nil {
				err = &domain.Error{Code: domain.CodeInternal, Message: fmt.Sprintf("enqueue batch: no result for item %d", i)}
			}
			b.fail(i, err, log)
			continue
		}
		r := it.Result
		b.results[i] = BatchItemJSON{Index: i, Outcome: OutcomeCreated, StatusCode: http.StatusCreated,
			JobID: string(r.JobID), Status: string(r.Status)}
		if r.Duplicate {
			b.results[i].Outcome, b.results[i].StatusCode = OutcomeDuplicate, http.StatusOK
		}
		load = &r.Load
	}
	out := &BatchResultJSON{Results: b.results}
	for _, r := range b.results {
		switch r.Outcome {
		case OutcomeCreated:
			out.Created++
		case OutcomeDuplicate:
			out.Duplicates++
		default:
			out.Errors++
		}
	}
	return out, load
}
