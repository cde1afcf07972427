package aquifer

import (
	"context"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// What an operator does with a running Aquifer: find jobs (ListJobs),
// replay them one by one (Retry) or in bulk (RetryJobs, CancelJobs, with a
// dry run first), follow the bulk operations (Operation, Operations), and
// see and pause destinations (Lanes, Lane, PauseLane, ResumeLane). The
// same calls serve GET /jobs, /operations and /lanes (docs/API.md). They
// need a store that implements OperatorStore (every built-in one does);
// with another they fail with CodeUnavailable.
//
// Each call acts for the caller in ctx: WithTenant scopes it to one
// tenant's jobs, WithAdmin or a context with no tenant sees every tenant's.
// Pausing and resuming lanes takes an operator (CodeForbidden otherwise).

// JobQuery selects jobs: Statuses (any of them; none: every status),
// Tenant (an operator's query narrowed to one tenant; a tenant may name
// only itself), UserID and PoolID as the tenant named them, Destination
// (scheme://host[:port]), CreatedAfter/CreatedBefore (exclusive bounds),
// ResponseStatus, Q (a substring of the URL's path or of the failure
// reason, ASCII case-insensitive). For ListJobs, Cursor is a page's
// NextCursor and Limit the page size (default DefaultListLimit, at most
// MaxListLimit). The zero query selects every job the caller may see.
type JobQuery = app.JobQuery

// JobPage is one page of ListJobs, newest first: Jobs, NextCursor ("" on
// the last page) and, on the first page only (no Cursor), Counts: how many
// jobs match the query's other filters in each status, whatever its
// Statuses say.
type JobPage = app.JobPage

// Page sizes of ListJobs.
const (
	DefaultListLimit = app.DefaultListLimit
	MaxListLimit     = app.MaxListLimit
)

// Attempt is one entry of a job's attempt history (Job.History, oldest
// first, the last MaxHistory attempts, kept across retries): when it was
// sent, how long it took, the destination's Status (0 when no answer came)
// or the transport Error, the pacing Signal the answer carried (Signal…)
// and, for pool jobs, the Member that served it.
type Attempt = domain.Attempt

// MaxHistory is how many attempts a job's history keeps.
const MaxHistory = domain.MaxHistory

// Pacing signals: an Attempt's Signal, and a LaneView's PacedBy.
const (
	SignalAqueduct   = domain.SignalAqueduct   // X-Aqueduct-* headers
	SignalORCA       = domain.SignalORCA       // an ORCA load report
	SignalRetryAfter = domain.SignalRetryAfter // 429 or 503 with Retry-After
	SignalRateLimit  = domain.SignalRateLimit  // X-RateLimit-* and RateLimit headers
	SignalTenantCap  = domain.SignalTenantCap  // the tenant's configured cap
)

// Operation is a bulk retry or cancel: its Kind, State, the Filter it was
// started with (user and pool ids as stored: scoped to their tenant), and
// its progress — Total (jobs the filter selected when it began), Processed,
// Changed (re-queued or cancelled) and Skipped (their state had moved on).
// It runs in the background in batches, each committed with its progress,
// and resumes after a restart.
type Operation = domain.Operation

// OperationKind is what an Operation does to each job.
type OperationKind = domain.OperationKind

// OperationState is where an Operation stands.
type OperationState = domain.OperationState

// Operation kinds and states.
const (
	OperationRetry     = domain.OpKindRetry  // re-queue finished jobs
	OperationCancel    = domain.OpKindCancel // cancel jobs still waiting
	OperationRunning   = domain.OpRunning
	OperationCompleted = domain.OpCompleted
	OperationFailed    = domain.OpFailed
)

// JobFilter is an Operation's filter as stored.
type JobFilter = domain.JobFilter

// OperationResult answers RetryJobs and CancelJobs: for a dry run, DryRun
// and the Count of jobs it would act on; otherwise the Operation started
// (Count is its Total).
type OperationResult = app.OperationResult

// LaneView is one destination (scheme://host:port, or pool:<id>) as an
// operator sees it: its configured ceiling and the pace it is held to now
// (PacedBy names the signal, PacedAt when it moved; HeldUntil a
// Retry-After hold of the whole lane), its Backlog (queued in the store;
// a tenant's own only, for a tenant), InFlight and Buffered work,
// OldestQueued, the last error, its queues (operators only), an
// operator's pause (Paused, nil when none), its outage Circuit, and
// whether this process has it Live (HeldBy names the instance that does,
// in cluster mode).
type LaneView = app.LaneView

// QueueDetail is one queue of a lane: the shared queue or a tenant's.
type QueueDetail = app.QueueDetail

// CircuitStats is a lane's outage circuit (State.String() is closed, open
// or half_open).
type CircuitStats = app.CircuitStats

// LanePause is an operator's pause of a destination: since At, with the
// Reason given.
type LanePause = domain.LanePause

// ListJobs returns a page of the jobs q selects that the caller in ctx may
// see, newest first. Errors: CodeInvalid naming the field of q that is
// wrong, CodeForbidden when a tenant names another tenant.
func (aq *Aquifer) ListJobs(ctx context.Context, q *JobQuery) (*JobPage, error) {
	return aq.svc.ListJobs(ctx, q)
}

// Retry re-queues a finished job (failed, or completed) as a new attempt
// cycle with its original request: it keeps its id and its history, runs
// again, and delivers a new webhook when it ends. It returns the job as
// re-queued. CodeConflict when the job has not finished or its webhook is
// still being delivered; CodeNotFound when it does not exist (or belongs
// to another tenant).
func (aq *Aquifer) Retry(ctx context.Context, id JobID) (*Job, error) {
	return aq.svc.Retry(ctx, id)
}

// RetryJobs re-queues, as Retry does, every finished job q selects (q's
// Cursor and Limit do not apply). A dry run only counts them. A real run
// starts an Operation in the background and returns it at once; follow it
// with Operation. It acts on the jobs that exist when it starts, each at
// most once, even across a restart.
func (aq *Aquifer) RetryJobs(ctx context.Context, q *JobQuery, dryRun bool) (*OperationResult, error) {
	return aq.svc.StartOperation(ctx, domain.OpKindRetry, q, dryRun)
}

// CancelJobs cancels, as Cancel does, every queued job q selects; like
// RetryJobs it counts them in a dry run and otherwise starts an Operation.
// Jobs being sent at the time are left alone.
func (aq *Aquifer) CancelJobs(ctx context.Context, q *JobQuery, dryRun bool) (*OperationResult, error) {
	return aq.svc.StartOperation(ctx, domain.OpKindCancel, q, dryRun)
}

// Operation returns a bulk operation as it stands now; CodeNotFound when
// it does not exist or the caller may not see it (a tenant sees the
// operations over its own jobs).
func (aq *Aquifer) Operation(ctx context.Context, id string) (*Operation, error) {
	return aq.svc.GetOperation(ctx, id)
}

// Operations lists the bulk operations the caller may see, newest first.
func (aq *Aquifer) Operations(ctx context.Context) ([]*Operation, error) {
	return aq.svc.Operations(ctx)
}

// Lanes describes every destination with a lane in this process, a backlog
// or a pause, in destination order.
func (aq *Aquifer) Lanes(ctx context.Context) ([]*LaneView, error) {
	return aq.svc.Lanes(ctx)
}

// Lane describes one destination, named scheme://host[:port] (the default
// port filled in) or pool:<id>.
func (aq *Aquifer) Lane(ctx context.Context, dest string) (*LaneView, error) {
	return aq.svc.Lane(ctx, dest)
}

// PauseLane pauses a destination: its jobs are still accepted and stored,
// but none is sent (nor any webhook delivered to it) until ResumeLane.
// Attempts already running finish. The pause is durable, and on a shared
// store it holds for every instance. Pausing a paused lane replaces its
// reason. Operators only (CodeForbidden for a tenant).
func (aq *Aquifer) PauseLane(ctx context.Context, dest, reason string) (*LaneView, error) {
	return aq.svc.PauseLane(ctx, dest, reason)
}

// ResumeLane ends a destination's pause; resuming a lane that is not
// paused changes nothing. Operators only.
func (aq *Aquifer) ResumeLane(ctx context.Context, dest string) (*LaneView, error) {
	return aq.svc.ResumeLane(ctx, dest)
}
