// Package ports declares the interfaces Aquifer's application core needs from
// the outside world: durable storage, time, outbound HTTP and event delivery.
// Adapters implement them; the app consumes them. Each method documents the
// sentinel errors it returns.
package ports

import (
	"context"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// JobStore is durable job storage, and the queue itself: lanes page their
// ready jobs from it in commit order instead of holding every queued job in
// memory.
//
// Durability: a method that returns nil has made its change durable (under the
// backend's configured sync level) unless its comment says otherwise.
// Backends batch concurrent writers into shared transactions (group commit);
// each caller still waits for its own change.
//
// Errors: ErrNotFound (domain.ErrNotFound) where stated; any other error means
// the backend could not do the work and is wrapped as domain.CodeUnavailable by
// the app. Implementations must be safe for concurrent use.
type JobStore interface {
	// Insert durably stores job unless a live (unexpired) job with the same
	// (UserID, IdempotentKey) exists. It returns the stored job — the new one
	// with Seq and ReadySeq assigned, or the existing one — and whether it was
	// new. The check and the insert are one atomic step: of many concurrent
	// callers with the same key exactly one gets fresh == true. An expired job
	// holding the key is replaced.
	Insert(ctx context.Context, job *domain.Job) (stored *domain.Job, fresh bool, err error)

	// Get returns the job, or ErrNotFound if it does not exist or has expired.
	Get(ctx context.Context, id domain.JobID) (*domain.Job, error)

	// Lookup returns the live job holding (userID, idempotentKey), or
	// ErrNotFound. It reads only: admission control uses it to answer a
	// duplicate without writing anything.
	Lookup(ctx context.Context, userID, idempotentKey string) (*domain.Job, error)

	// Position returns how many jobs wait in queue ahead of readySeq (not
	// counting jobs recorded as in_flight), whatever their priority.
	Position(ctx context.Context, queue domain.QueueKey, readySeq int64) (int, error)

	// Delete removes the job and its idempotency key (so the key can be used
	// again at once). ErrNotFound if there is no such job.
	Delete(ctx context.Context, id domain.JobID) error

	// MarkInFlight records that a dispatch attempt of the job started at p.At.
	// It may return before the change is durable: losing it in a crash only
	// means the job is dispatched again after restart, which at-least-once
	// allows.
	MarkInFlight(ctx context.Context, p *MarkInFlightParams) error

	// Requeue records an attempt that will be tried again: a dispatch attempt
	// puts the job back to queued; a delivery attempt counts against its
	// delivery. Attempts and Deferrals (answers that asked Aquifer to come
	// back later, which are not failures) are the totals so far in that
	// phase. The job stays ready in its lane. ErrNotFound if the job is gone
	// or not in that phase.
	Requeue(ctx context.Context, p *RequeueParams) error

	// Finish records a terminal status and result. If p.DeliverIn is set, the
	// job's result becomes due for delivery in that lane in the same
	// transaction (Delivery pending, ReadyQueue = p.DeliverIn, a new
	// ReadySeq), which it returns. Finishing a job that is already terminal
	// overwrites its result but never enqueues a second delivery.
	// ErrNotFound if the job is gone (expired and purged).
	Finish(ctx context.Context, p *FinishParams) (readySeq int64, err error)

	// FinishDelivery records the end of a job's webhook delivery. ErrNotFound
	// if the job is gone or has no pending delivery.
	FinishDelivery(ctx context.Context, p *FinishDeliveryParams) error

	// ListReady returns up to p.Limit unexpired jobs of p.Priority whose
	// next action waits in p.Queue with ReadySeq > p.AfterSeq, in ReadySeq
	// order. Jobs recorded as in_flight are not waiting and are left out.
	ListReady(ctx context.Context, p *ListReadyParams) ([]*domain.Job, error)

	// ReadyQueues returns every queue that has at least one job waiting in it.
	ReadyQueues(ctx context.Context) ([]domain.QueueKey, error)

	// RecoverInFlight sets every in_flight job back to queued and returns how
	// many it changed. Called once at start-up, before any dispatch.
	RecoverInFlight(ctx context.Context) (int, error)

	// ResetStale sets in_flight jobs whose latest attempt started before
	// p.DispatchedBefore back to queued, skipping p.Exclude, and returns them.
	ResetStale(ctx context.Context, p *ResetStaleParams) ([]*domain.Job, error)

	// Purge deletes up to p.Limit jobs whose expiry is at or before p.Now and
	// returns how many it deleted.
	Purge(ctx context.Context, p *PurgeParams) (int, error)

	// Counts returns the number of unexpired unfinished jobs.
	Counts(ctx context.Context) (Counts, error)

	// Ping checks that the store can serve requests.
	Ping(ctx context.Context) error

	// SizeBytes returns the space the store occupies, for admission control.
	// Backends that cannot tell return -1.
	SizeBytes(ctx context.Context) (int64, error)

	// Close flushes pending batches and releases resources. Safe to call twice.
	Close() error

	ScheduleStore
}

// MarkInFlightParams are the arguments of JobStore.MarkInFlight.
type MarkInFlightParams struct {
	ID  domain.JobID
	Seq int64 // the job's Seq if known (0 if not): lets backends find the row faster
	At  time.Time
}

// RequeueParams are the arguments of JobStore.Requeue.
type RequeueParams struct {
	ID        domain.JobID
	Seq       int64        // as in MarkInFlightParams
	Phase     domain.Phase // PhaseDispatch or PhaseDeliver
	Attempts  int          // attempts made so far in that phase
	Deferrals int          // times so far the destination said "later" (429) in that phase
	Reason    string       // PhaseDeliver: why the attempt failed
	Response  int          // PhaseDeliver: the receiver's status (0 if none)
	// History, when not nil, replaces the job's attempt history
	// (PhaseDispatch: the history with this attempt appended).
	History []domain.Attempt
	Now     time.Time
}

// FinishParams are the arguments of JobStore.Finish.
type FinishParams struct {
	ID        domain.JobID
	Seq       int64         // as in MarkInFlightParams
	Status    domain.Status // StatusCompleted or StatusFailed
	Attempts  int
	Result    *domain.Result
	Now       time.Time
	DeliverIn domain.QueueKey // the webhook receiver's lane, or "" when the job has no webhook
	// History, when not nil, replaces the job's attempt history.
	History []domain.Attempt
	// Retention is how long the finished job is kept once nothing is left
	// to do (0: domain.TTL(Status)).
	Retention time.Duration
}

// FinishDeliveryParams are the arguments of JobStore.FinishDelivery.
type FinishDeliveryParams struct {
	ID        domain.JobID
	Seq       int64 // as in MarkInFlightParams
	Delivered bool  // false: retries spent
	Attempts  int
	Response  int    // the receiver's last status (0 if none)
	Reason    string // why delivery failed
	// Retention is how long the job is kept from now (0: domain.TTL of its
	// status).
	Retention time.Duration
	Now       time.Time
}

// ListReadyParams are the arguments of JobStore.ListReady.
type ListReadyParams struct {
	Queue domain.QueueKey
	// Priority is the priority of the jobs listed: a queue is read one
	// priority at a time, each in ReadySeq order.
	Priority domain.Priority
	AfterSeq int64
	Limit    int
	Now      time.Time
}

// ResetStaleParams are the arguments of JobStore.ResetStale.
type ResetStaleParams struct {
	DispatchedBefore time.Time
	Exclude          map[domain.JobID]bool
	Now              time.Time
}

// PurgeParams are the arguments of JobStore.Purge.
type PurgeParams struct {
	Now   time.Time
	Limit int
}

// Counts are the store-wide job counts reported in load headers and health.
type Counts struct {
	Queued     int64 // waiting for dispatch
	InFlight   int64 // being dispatched (as recorded in the store)
	Deliveries int64 // results waiting for webhook delivery
}

// Total returns all unfinished work.
func (c Counts) Total() int64 { return c.Queued + c.InFlight + c.Deliveries }

// LedgerStore is implemented by stores that support drain mode: stores one
// process owns entirely (SQLite, Pebble, memory), whose whole content is
// that process's ledger. A store shared by several processes does not offer
// it: clearing it would delete other processes' jobs.
type LedgerStore interface {
	// Ledger returns up to p.Limit unexpired jobs in a fixed order of the
	// store's choosing, starting after the entry whose Cursor is p.After
	// ("" = from the start). Paging through it visits every job that exists
	// throughout the paging exactly once.
	Ledger(ctx context.Context, p *LedgerParams) ([]LedgerEntry, error)

	// DeleteFinished deletes up to limit jobs with Seq <= throughSeq that are
	// finished with nothing left to do (terminal, no webhook delivery
	// pending), and returns how many it deleted. It never deletes work.
	DeleteFinished(ctx context.Context, throughSeq int64, limit int) (int, error)
}

// LedgerParams are the arguments of LedgerStore.Ledger.
type LedgerParams struct {
	After string // the Cursor of the previous page's last entry
	Limit int
	Now   time.Time
}

// LedgerEntry is one job as drain mode reports it.
type LedgerEntry struct {
	Cursor        string // opaque: where the next page starts
	Seq           int64
	ID            domain.JobID
	UserID        string
	IdempotentKey string
	Status        domain.Status
}

// TenantCounter is implemented by stores that can count one tenant's
// unfinished jobs cheaply (an index range over the scoped user_id), for
// tenant quotas. Stores without it are counted by the app itself.
type TenantCounter interface {
	// CountUnfinished returns the number of unexpired jobs whose user_id
	// starts with userIDPrefix and whose status is queued or in_flight.
	CountUnfinished(ctx context.Context, userIDPrefix string) (int64, error)
}

// WriteChecker is implemented by stores that know whether their writes
// commit: a store can answer reads (Ping) while every write fails, as when
// its disk is full. Health reports the store degraded while CheckWrites
// fails.
type WriteChecker interface {
	// CheckWrites returns nil while writes commit, or an error saying since
	// when and why they fail ("writes failing since …: no space left on
	// device"). A failed commit shows until the next one succeeds. A store
	// that has tried no write for a while runs a small probe write first, so
	// a full disk shows without traffic.
	CheckWrites(ctx context.Context) error
}

// ScheduleStore is the part of a JobStore that keeps job options: batches
// inserted in one commit, scheduled jobs promoted when due, jobs past their
// deadline found, queues read one priority at a time. Every backend
// implements it (JobStore embeds it).
//
// A scheduled job (domain.Job.Scheduled: queued, NotBefore ahead, no
// ReadyQueue) is durable at once but in no queue: ListReady, ReadyQueues
// and Position never see it, and it costs no memory in any lane. It counts
// as queued in Counts.
type ScheduleStore interface {
	// InsertBatch inserts every job as Insert does, all in one commit, and
	// returns one outcome per job in order. A job whose (UserID,
	// IdempotentKey) a live job holds — or an earlier job of the same batch
	// — is not inserted; its outcome names the holder.
	InsertBatch(ctx context.Context, jobs []*domain.Job) ([]InsertOutcome, error)

	// PromoteDue makes up to p.Limit scheduled jobs whose NotBefore is at
	// or before p.Now ready in their Queue, in NotBefore order (then Seq):
	// each gets ReadyQueue = Queue and a fresh ReadySeq, assigned in that
	// order, in one commit. It returns the promoted jobs. Jobs that are no
	// longer scheduled (cancelled meanwhile) are left alone.
	PromoteDue(ctx context.Context, p *PromoteParams) ([]*domain.Job, error)

	// NextDue returns the earliest NotBefore among scheduled jobs, or the
	// zero time when none is scheduled.
	NextDue(ctx context.Context) (time.Time, error)

	// Overdue returns up to p.Limit unexpired jobs that wait for dispatch
	// (queued, scheduled or not; not in_flight) whose Deadline is set and
	// at or before p.Now, earliest deadline first. It only reads.
	Overdue(ctx context.Context, p *OverdueParams) ([]*domain.Job, error)
}

// InsertOutcome is one job's result of InsertBatch.
type InsertOutcome struct {
	Job   *domain.Job // the job stored, or the live one holding its key
	Fresh bool
}

// PromoteParams are the arguments of ScheduleStore.PromoteDue.
type PromoteParams struct {
	Now   time.Time
	Limit int
}

// OverdueParams are the arguments of ScheduleStore.Overdue.
type OverdueParams struct {
	Now   time.Time
	Limit int
}
