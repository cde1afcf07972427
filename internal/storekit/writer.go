package storekit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/groupcommit"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Config shapes a Writer.
type Config struct {
	// MaxBatch caps how many ops share one commit; default 1024.
	MaxBatch int
	// GatherYields is how many times the writer yields the processor to let
	// more ops join a group before committing it (groupcommit.Options);
	// default 2, negative for none.
	GatherYields int
	// CtxErr turns the error of a caller's context that ended before its op
	// reached the writer into what the caller is told; nil: the context's
	// error as it is.
	CtxErr func(error) error
	// Encode, if set, runs for every op on the caller's goroutine before
	// Send hands it to the writer: a store encodes there (into Op.Encoded)
	// what its commit would otherwise encode on the single writer, whose
	// time bounds the store's write rate. An error fails the op unsent.
	Encode func(*Op) error
}

// Writer is a store's single writer: one goroutine that commits the ops
// submitted to it in groups (groupcommit.Run), through the commit function
// the store gave Start. The store owns what a commit does; the Writer owns
// the submitting, the waiting and the closing.
type Writer struct {
	ops     chan *Op
	closing chan struct{}
	done    chan struct{}
	once    sync.Once
	mu      sync.RWMutex // guards closed against sends (and Enter) after Close
	closed  bool
	ctxErr  func(error) error
	encode  func(*Op) error
	opts    groupcommit.Options

	// Health is what the writer knows of its commits; the store's commit
	// records each one it tries, and CheckWrites reads it.
	Health groupcommit.Health

	commits, committed atomic.Int64
}

// Start starts the writer goroutine. commit applies one group and answers
// its callers (Answer); it runs on the writer goroutine only, one group at a
// time, and must not keep the slice.
func Start(c Config, commit func(group []*Op)) *Writer {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1024
	}
	switch {
	case c.GatherYields == 0:
		c.GatherYields = 2
	case c.GatherYields < 0:
		c.GatherYields = 0
	}
	w := &Writer{
		ops:     make(chan *Op, 4*c.MaxBatch),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		ctxErr:  c.CtxErr,
		encode:  c.Encode,
		opts:    groupcommit.Options{MaxBatch: c.MaxBatch, GatherYields: c.GatherYields},
	}
	go func() {
		defer close(w.done)
		groupcommit.Run(w.ops, w.closing, w.opts, commit)
	}()
	return w
}

// Send hands o to the writer without waiting for its commit, once
// Config.Encode (if any) has encoded it. It fails with domain.ErrClosed
// after Close, or if ctx ends before the writer takes o.
func (w *Writer) Send(ctx context.Context, o *Op) error {
	if w.encode != nil {
		if err := w.encode(o); err != nil {
			return err
		}
	}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return domain.ErrClosed
	}
	select {
	case w.ops <- o:
	case <-ctx.Done():
		w.mu.RUnlock()
		if w.ctxErr != nil {
			return w.ctxErr(ctx.Err())
		}
		return ctx.Err()
	}
	w.mu.RUnlock()
	return nil
}

// Submit hands o to the writer and waits for its result. Once o is
// submitted the wait ignores ctx, so a caller that goes away cannot be told
// "failed" about a write that in fact committed.
func (w *Writer) Submit(ctx context.Context, o *Op) Result {
	o.Await()
	if err := w.Send(ctx, o); err != nil {
		return Result{Err: err}
	}
	return o.Result()
}

// Count submits o and returns how many jobs it changed.
func (w *Writer) Count(ctx context.Context, o *Op) (int, error) {
	r := w.Submit(ctx, o)
	return int(r.N), r.Err
}

// Sweep submits o, an op on what a read found (OpPurge, OpDeleteFinished),
// and returns how many jobs it changed; when the read found nothing it
// submits nothing.
func (w *Writer) Sweep(ctx context.Context, o *Op) (int, error) {
	if o.Found.empty() {
		return 0, nil
	}
	return w.Count(ctx, o)
}

// ResetStale implements the writing half of ports.JobStore.ResetStale: of
// the in-flight jobs a read found stale, those not in p.Exclude go to the
// writer, which resets each one still stale when it applies the op.
func (w *Writer) ResetStale(ctx context.Context, candidates []*domain.Job, p *ports.ResetStaleParams) ([]*domain.Job, error) {
	var keep []*domain.Job
	for _, j := range candidates {
		if !p.Exclude[j.ID] {
			keep = append(keep, j)
		}
	}
	if len(keep) == 0 {
		return nil, nil
	}
	r := w.Submit(ctx, &Op{Kind: OpResetStale, Found: Found{Jobs: keep}, Stale: p, At: p.Now})
	return r.Jobs, r.Err
}

// CheckWrites implements ports.WriteChecker for a store whose commit
// applies OpProbe: nil while commits succeed, the failure (and since when)
// otherwise. If no commit was tried for probeAfter, a probe op is committed
// first.
func (w *Writer) CheckWrites(ctx context.Context, probeAfter time.Duration) error {
	if w.Health.Idle(time.Now(), probeAfter) {
		if r := w.Submit(ctx, &Op{Kind: OpProbe, At: time.Now()}); errors.Is(r.Err, domain.ErrClosed) {
			return r.Err
		}
	}
	return w.Health.Err()
}

// Committed counts a commit of ops operations (Stats).
func (w *Writer) Committed(ops int) {
	w.commits.Add(1)
	w.committed.Add(int64(ops))
}

// Stats returns the commits counted and the operations in them:
// ops/commits is the mean group size.
func (w *Writer) Stats() (commits, ops int64) { return w.commits.Load(), w.committed.Load() }

// Close stops taking ops, waits for the writer to commit every op already
// submitted, and stops it. It waits for every Enter to Exit first. Safe to
// call more than once.
func (w *Writer) Close() {
	w.once.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		close(w.closing)
		<-w.done
	})
}

// Closed reports whether Close has begun.
func (w *Writer) Closed() bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.closed
}

// Closing is closed when Close begins, for the store's other goroutines.
func (w *Writer) Closing() <-chan struct{} { return w.closing }

// Enter admits a use of the store that must not overlap Close (a read of an
// engine that cannot be used once closed); Exit must follow. It fails with
// domain.ErrClosed once Close has begun.
func (w *Writer) Enter() error {
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return domain.ErrClosed
	}
	return nil
}

// Exit ends a use admitted by Enter.
func (w *Writer) Exit() { w.mu.RUnlock() }
