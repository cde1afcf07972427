package storekit

import (
	"context"
	"errors"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// OperatorWrites implements the ports.OperatorStore methods that only build
// an op and submit it to the writer, so an operator's retry, bulk batch or
// pause shares the group commit with ingest instead of taking a second
// write path. A store embeds it next to JobWrites.
type OperatorWrites struct{ w *Writer }

// OperatorWrites returns the OperatorStore write methods of w.
func (w *Writer) OperatorWrites() OperatorWrites { return OperatorWrites{w} }

// Retry implements ports.OperatorStore.
func (o OperatorWrites) Retry(ctx context.Context, p *ports.RetryParams) (*domain.Job, error) {
	r := o.w.Submit(ctx, &Op{Kind: OpRetry, ID: p.ID, Seq: p.Seq, At: p.Now, Retry: p})
	return r.Job, r.Err
}

// SaveOperation implements ports.OperatorStore.
func (o OperatorWrites) SaveOperation(ctx context.Context, op *domain.Operation) error {
	if op == nil || op.ID == "" {
		return errors.New("save of an operation without an id")
	}
	return o.w.Submit(ctx, &Op{Kind: OpSaveOperation, Operation: op}).Err
}

// RunBatch implements ports.OperatorStore.
func (o OperatorWrites) RunBatch(ctx context.Context, p *ports.RunBatchParams) ([]domain.JobID, error) {
	if p.Op == nil {
		return nil, errors.New("run of a batch without its operation")
	}
	r := o.w.Submit(ctx, &Op{Kind: OpRunBatch, At: p.Now, Batch: p})
	return r.IDs, r.Err
}

// PauseLane implements ports.OperatorStore.
func (o OperatorWrites) PauseLane(ctx context.Context, p domain.LanePause) error {
	return o.w.Submit(ctx, &Op{Kind: OpPauseLane, Pause: &p, At: p.At}).Err
}

// ResumeLane implements ports.OperatorStore.
func (o OperatorWrites) ResumeLane(ctx context.Context, upstream domain.UpstreamKey) error {
	return o.w.Submit(ctx, &Op{Kind: OpResumeLane, Upstream: upstream}).Err
}

// Retried returns a copy of j re-queued as a new attempt cycle, as
// ports.OperatorStore.Retry defines it: queued in its own queue with
// readySeq, no attempts, deferrals, result or delivery, expiring QueuedTTL
// after now. Id, request, Seq and History are kept. The caller has checked
// j.Retryable().
func Retried(j *domain.Job, readySeq int64, now time.Time) *domain.Job {
	c := *j
	c.Status, c.Attempts, c.Deferrals, c.Result, c.Delivery = domain.StatusQueued, 0, 0, nil, nil
	c.ReadyQueue, c.ReadySeq = j.Queue, readySeq
	c.UpdatedAt, c.ExpiresAt = now, now.Add(domain.QueuedTTL)
	return &c
}

// CancelParams are the Finish parameters that cancel queued job j as one
// item of a bulk cancel: failed with reason "canceled", its attempts kept,
// its delivery due in the item's DeliverIn.
func CancelParams(j *domain.Job, it ports.BatchItem, p *ports.RunBatchParams) *ports.FinishParams {
	return &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusFailed, Attempts: j.Attempts,
		Result: &domain.Result{Reason: domain.ReasonCanceled}, Now: p.Now, DeliverIn: it.DeliverIn, Retention: p.Retention}
}
