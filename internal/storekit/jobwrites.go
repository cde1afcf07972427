package storekit

import (
	"context"
	"errors"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// JobWrites implements the ports.JobStore methods that only build an op and
// submit it to the writer. A store embeds it; how each op is applied is the
// store's commit, and its package doc says what the engine adds (the
// postgres store, for one, records the process that wrote in the job's
// owner column).
type JobWrites struct{ w *Writer }

// JobWrites returns the JobStore write methods of w.
func (w *Writer) JobWrites() JobWrites { return JobWrites{w} }

// Insert implements ports.JobStore.
func (j JobWrites) Insert(ctx context.Context, job *domain.Job) (*domain.Job, bool, error) {
	if job == nil {
		return nil, false, errors.New("insert of a nil job")
	}
	r := j.w.Submit(ctx, &Op{Kind: OpInsert, Job: job})
	return r.Job, r.Fresh, r.Err
}

// InsertBatch implements ports.ScheduleStore: the whole batch is one op,
// so it commits in one transaction.
func (j JobWrites) InsertBatch(ctx context.Context, jobs []*domain.Job) ([]ports.InsertOutcome, error) {
	if len(jobs) == 0 {
		return []ports.InsertOutcome{}, nil
	}
	for _, job := range jobs {
		if job == nil {
			return nil, errors.New("insert of a nil job")
		}
	}
	r := j.w.Submit(ctx, &Op{Kind: OpInsertBatch, Inserts: jobs})
	return r.Batch, r.Err
}

// PromoteDue implements ports.ScheduleStore.
func (j JobWrites) PromoteDue(ctx context.Context, p *ports.PromoteParams) ([]*domain.Job, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	r := j.w.Submit(ctx, &Op{Kind: OpPromote, At: p.Now, Limit: p.Limit})
	return r.Jobs, r.Err
}

// Delete implements ports.JobStore.
func (j JobWrites) Delete(ctx context.Context, id domain.JobID) error {
	return j.w.Submit(ctx, &Op{Kind: OpDelete, ID: id}).Err
}

// MarkInFlight implements ports.JobStore. It does not wait for the commit.
func (j JobWrites) MarkInFlight(ctx context.Context, p *ports.MarkInFlightParams) error {
	return j.w.Send(ctx, &Op{Kind: OpMarkInFlight, ID: p.ID, Seq: p.Seq, At: p.At})
}

// Requeue implements ports.JobStore.
func (j JobWrites) Requeue(ctx context.Context, p *ports.RequeueParams) error {
	return j.w.Submit(ctx, &Op{Kind: OpRequeue, ID: p.ID, Seq: p.Seq, At: p.Now, Requeue: p}).Err
}

// Finish implements ports.JobStore.
func (j JobWrites) Finish(ctx context.Context, p *ports.FinishParams) (int64, error) {
	r := j.w.Submit(ctx, &Op{Kind: OpFinish, ID: p.ID, Seq: p.Seq, At: p.Now, Finish: p})
	return r.N, r.Err
}

// FinishDelivery implements ports.JobStore.
func (j JobWrites) FinishDelivery(ctx context.Context, p *ports.FinishDeliveryParams) error {
	return j.w.Submit(ctx, &Op{Kind: OpFinishDelivery, ID: p.ID, Seq: p.Seq, At: p.Now, Delivery: p}).Err
}

// RecoverInFlight implements ports.JobStore.
func (j JobWrites) RecoverInFlight(ctx context.Context) (int, error) {
	return j.w.Count(ctx, &Op{Kind: OpRecover, At: time.Now()})
}
