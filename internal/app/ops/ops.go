// Package ops runs bulk operations: a retry or a cancel of every job a
// filter selects, in batches, newest first. An operation is durable: each
// batch changes its jobs and records the operation's progress in one store
// transaction (ports.OperatorStore.RunBatch), so a process killed half way
// resumes after restart where the last committed batch ended, and no job is
// acted on twice. The batch's compare-and-set on the progress keeps two
// runners of one operation (two instances on a shared store) from both
// applying a batch: the loser stops.
package ops

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Hooks is what a batch needs from the rest of the core around its store
// transaction: which of a page's jobs to send, and what to tell the lanes
// once the batch committed.
type Hooks interface {
	// Claim returns the items of page to act on. For a cancel it reserves
	// each job against dispatch (and leaves out jobs being sent now, or
	// dispatched by another process); for a retry it returns them all.
	Claim(op *domain.Operation, page []*domain.Job) []ports.BatchItem
	// Applied is told which jobs the committed batch changed, and which
	// claimed items it did not (to release their claims). committed is
	// false when the batch did not commit: every claim is released.
	Applied(op *domain.Operation, page []*domain.Job, items []ports.BatchItem, changed []domain.JobID, committed bool)
}

// Config is the runner's.
type Config struct {
	Store ports.OperatorStore
	Hooks Hooks
	Clock ports.Clock
	Log   *zap.Logger
	// BatchSize is how many jobs one batch examines. Default 500.
	BatchSize int
	// Retention is how long a cancelled job is kept (0: domain.TTL).
	Retention time.Duration
	// RetryBackoff is the wait before a batch is tried again after the
	// store failed. Default 1s, doubling to 30s.
	RetryBackoff time.Duration
}

// Runner runs operations, each on its own goroutine, until Stop.
type Runner struct {
	cfg Config

	mu      sync.Mutex
	running map[string]bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New returns a runner; Resume starts the operations a previous run left.
func New(cfg Config) *Runner {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = ports.SystemClock{}
	}
	r := &Runner{cfg: cfg, running: make(map[string]bool)}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// Begin stores a new operation of kind over filter, starting with the jobs
// that exist now (Seq at most newestSeq), and runs it. total is the count
// the filter selected when it began.
func (r *Runner) Begin(ctx context.Context, id string, kind domain.OperationKind, filter domain.JobFilter, newestSeq, total int64) (*domain.Operation, error) {
	now := r.cfg.Clock.Now()
	op := &domain.Operation{ID: id, Kind: kind, Filter: filter, State: domain.OpRunning, Cursor: newestSeq + 1,
		Total: total, CreatedAt: now, UpdatedAt: now}
	if total == 0 || newestSeq <= 0 {
		op.State = domain.OpCompleted
	}
	if err := r.cfg.Store.SaveOperation(ctx, op); err != nil {
		return nil, domain.StoreFailure("store the operation", err)
	}
	if !op.Finished() {
		r.start(op)
	}
	c := *op
	return &c, nil
}

// Resume starts every operation the store holds as running (a previous run
// was stopped or killed in the middle of it). It returns how many.
func (r *Runner) Resume(ctx context.Context) (int, error) {
	ops, err := r.cfg.Store.Operations(ctx, true)
	if err != nil {
		return 0, err
	}
	for _, op := range ops {
		r.cfg.Log.Info("resuming bulk operation", zap.String("operation", op.ID), zap.String("kind", string(op.Kind)),
			zap.Int64("processed", op.Processed), zap.Int64("total", op.Total))
		r.start(op)
	}
	return len(ops), nil
}

func (r *Runner) start(op *domain.Operation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[op.ID] || r.ctx.Err() != nil {
		return
	}
	r.running[op.ID] = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			delete(r.running, op.ID)
			r.mu.Unlock()
		}()
		r.run(r.ctx, op)
	}()
}

// Stop ends every running operation after its current batch; they stay
// running in the store and resume at the next start.
func (r *Runner) Stop(ctx context.Context) error {
	r.cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run works through op's batches until it is done, the runner stops, or
// another runner turns out to hold it.
func (r *Runner) run(ctx context.Context, op *domain.Operation) {
	log := r.cfg.Log.With(zap.String("operation", op.ID), zap.String("kind", string(op.Kind)))
	wait := r.cfg.RetryBackoff
	for ctx.Err() == nil && !op.Finished() {
		next, err := r.batch(ctx, op)
		switch {
		case err == nil:
			op, wait = next, r.cfg.RetryBackoff
			continue
		case errors.Is(err, ports.ErrOperationConflict):
			log.Info("bulk operation is run by another runner; leaving it")
			return
		case errors.Is(err, domain.ErrNotFound):
			log.Warn("bulk operation vanished from the store")
			return
		case ctx.Err() != nil:
			return
		}
		log.Warn("bulk operation batch failed; retrying", zap.Duration("in", wait), zap.Error(err))
		t := r.cfg.Clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return
		}
		wait = min(2*wait, 30*time.Second)
		if fresh, err := r.cfg.Store.GetOperation(ctx, op.ID); err == nil {
			op = fresh // a batch whose answer was lost may have committed
		}
	}
	if op.Finished() {
		log.Info("bulk operation finished", zap.String("state", string(op.State)), zap.Int64("changed", op.Changed),
			zap.Int64("skipped", op.Skipped))
	}
}

// batch runs the next batch of op and returns op's new state.
func (r *Runner) batch(ctx context.Context, op *domain.Operation) (*domain.Operation, error) {
	now := r.cfg.Clock.Now()
	page, err := r.cfg.Store.ListJobs(ctx, &ports.ListJobsParams{Filter: op.Filter, BeforeSeq: op.Cursor, Limit: r.cfg.BatchSize, Now: now})
	if err != nil {
		return nil, err
	}
	next := *op
	next.UpdatedAt = now
	if len(page) == 0 {
		next.State = domain.OpCompleted
		_, err := r.cfg.Store.RunBatch(ctx, &ports.RunBatchParams{Op: &next, PrevProcessed: op.Processed, Now: now})
		if err != nil {
			return nil, err
		}
		return &next, nil
	}
	items := r.cfg.Hooks.Claim(op, page)
	next.Cursor = page[len(page)-1].Seq
	next.Processed += int64(len(page))
	next.Skipped += int64(len(page) - len(items)) // not claimed: being sent, or another process's
	changed, err := r.cfg.Store.RunBatch(ctx, &ports.RunBatchParams{Op: &next, PrevProcessed: op.Processed, Items: items,
		Retention: r.cfg.Retention, Now: now})
	if err != nil {
		r.cfg.Hooks.Applied(op, page, items, nil, false)
		return nil, err
	}
	// The store added the batch's counts to what it saved; mirror them.
	next.Changed += int64(len(changed))
	next.Skipped += int64(len(items) - len(changed))
	r.cfg.Hooks.Applied(&next, page, items, changed, true)
	return &next, nil
}
