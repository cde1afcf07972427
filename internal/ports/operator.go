package ports

import (
	"context"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// OperatorStore is what operators' tools need from a store: listing and
// counting jobs by filter, re-queueing finished jobs, durable bulk
// operations, and durable lane pauses. Every built-in store implements it;
// a store of one's own without it runs jobs but answers those calls with
// an error saying the store does not support them.
//
// Reads (ListJobs, CountJobs, GetOperation, Operations, LanePauses) must not
// block the store's writer: listing while jobs are ingested is the normal
// case.
type OperatorStore interface {
	// ListJobs returns up to p.Limit unexpired jobs that p.Filter matches
	// (domain.JobFilter.Matches), newest first (by Seq, descending), with
	// Seq < p.BeforeSeq when it is set. A page's last Seq is the next
	// page's BeforeSeq: paging visits every job that exists throughout
	// exactly once.
	ListJobs(ctx context.Context, p *ListJobsParams) ([]*domain.Job, error)

	// CountJobs returns, per status, how many unexpired jobs match every
	// filter of p.Filter but its Statuses (statuses with none are left
	// out).
	CountJobs(ctx context.Context, p *CountJobsParams) (map[domain.Status]int64, error)

	// Retry re-queues a finished job as a new attempt cycle: status queued,
	// no attempts, deferrals or result, no delivery, ready again in its own
	// queue with a new ReadySeq, expiring QueuedTTL after p.Now, with no
	// NotBefore and no Deadline (an operator's retry runs now). Its id,
	// request, other options, Seq and History are kept. It returns the job
	// as stored.
	// ErrNotFound if the job is gone; domain.ErrNotFinished unless
	// job.Retryable().
	Retry(ctx context.Context, p *RetryParams) (*domain.Job, error)

	// SaveOperation stores a new bulk operation (or overwrites one by id).
	SaveOperation(ctx context.Context, op *domain.Operation) error

	// GetOperation returns a bulk operation, or ErrNotFound.
	GetOperation(ctx context.Context, id string) (*domain.Operation, error)

	// Operations returns the stored bulk operations, newest first; with
	// running set, only those still running (to resume them after a
	// restart).
	Operations(ctx context.Context, running bool) ([]*domain.Operation, error)

	// RunBatch acts on one batch of a bulk operation and records its
	// progress in one transaction: for OpKindRetry it re-queues each listed
	// job that is Retryable (as Retry does); for OpKindCancel it finishes
	// each listed job whose stored status is queued as failed with reason
	// "canceled" (as Finish does, making its delivery due in the item's
	// DeliverIn). Jobs gone or in another state are left alone. p.Op, the
	// operation's new state, is saved in the same transaction — with
	// Changed increased by the number of jobs the batch changed and Skipped
	// by the number of items it left alone, so the counts commit with the
	// changes — but only if the stored operation's Processed still equals
	// p.PrevProcessed: otherwise nothing is written and it returns
	// ErrOperationConflict (two runners of one operation; the loser stops).
	// ErrNotFound if the operation is not stored. It returns the ids of the
	// jobs it changed.
	RunBatch(ctx context.Context, p *RunBatchParams) ([]domain.JobID, error)

	// PauseLane durably pauses a destination (an upstream); pausing a
	// paused lane replaces its pause.
	PauseLane(ctx context.Context, p domain.LanePause) error

	// ResumeLane removes a destination's pause. Resuming a lane that is
	// not paused is not an error.
	ResumeLane(ctx context.Context, upstream domain.UpstreamKey) error

	// LanePauses returns every paused destination, in upstream order.
	LanePauses(ctx context.Context) ([]domain.LanePause, error)
}

// ErrOperationConflict is returned by RunBatch when the operation's stored
// progress is not what the caller last saw.
var ErrOperationConflict = &domain.Error{Code: domain.CodeConflict, Message: "the operation's progress moved on: another runner is running it"}

// ListJobsParams are the arguments of OperatorStore.ListJobs.
type ListJobsParams struct {
	Filter    domain.JobFilter
	BeforeSeq int64 // 0: from the newest
	Limit     int   // at least 1
	Now       time.Time
}

// CountJobsParams are the arguments of OperatorStore.CountJobs.
type CountJobsParams struct {
	Filter domain.JobFilter
	Now    time.Time
}

// RetryParams are the arguments of OperatorStore.Retry.
type RetryParams struct {
	ID  domain.JobID
	Seq int64 // as in MarkInFlightParams
	Now time.Time
}

// BatchItem is one job of a RunBatch.
type BatchItem struct {
	ID  domain.JobID
	Seq int64
	// DeliverIn is, for a cancel, the webhook receiver's lane where the
	// job's result becomes due ("" when the job has no webhook).
	DeliverIn domain.QueueKey
}

// RunBatchParams are the arguments of OperatorStore.RunBatch.
type RunBatchParams struct {
	Op            *domain.Operation // the operation's state after this batch
	PrevProcessed int64             // the stored operation's Processed before it
	Items         []BatchItem
	// Retention is how long a cancelled job is kept (0: domain.TTL).
	Retention time.Duration
	Now       time.Time
}
