package storekit

import (
	"context"
	"errors"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// OperatorWrites implements the ports.OperatorStore methods that write:
// each builds an op and submits it to the writer, so an operator's retry,
// a bulk batch or a pause commits in the same groups as the dispatch path's
// writes instead of on a second write path. A store embeds it next to
// JobWrites; its commit applies the ops and its own reads answer the rest of
// ports.OperatorStore.
type OperatorWrites struct{ w *Writer }

// OperatorWrites returns the OperatorStore write methods of w.
func (w *Writer) OperatorWrites() OperatorWrites { return OperatorWrites{w} }

// Retry implements ports.OperatorStore.
func (o OperatorWrites) Retry(ctx context.Context, p *ports.RetryParams) (*domain.Job, error) {
	r := o.w.Submit(ctx, &Op{Kind: OpRetry, ID: p.ID, Seq: p.Seq, At: p.Now, Retry: p})
	if r.Err != nil {
		return nil, r.Err
	}
	return r.Job, nil
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
	return o.w.Submit(ctx, &Op{Kind: OpPauseLane, Upstream: p.Upstream, At: p.At, Pause: &p}).Err
}

// ResumeLane implements ports.OperatorStore.
func (o OperatorWrites) ResumeLane(ctx context.Context, upstream domain.UpstreamKey) error {
	return o.w.Submit(ctx, &Op{Kind: OpResumeLane, Upstream: upstream}).Err
}
