package app

import (
	"container/heap"
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/pacing"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// fetchRetry is how long a lane waits before reading the store again after a
// failed read.
const fetchRetry = time.Second

// lane paces the work waiting for one upstream (or one tenant of it): jobs to
// dispatch there, and results to deliver there when it is a webhook receiver.
// The store is the queue: the lane keeps only a bounded window of ready work
// in memory and pages more in commit order (ReadySeq) when the window runs
// low, so a backlog of millions costs disk, not RAM. Work is identified by
// ReadySeq, which is unique per readiness: a job can wait in the same lane
// twice (dispatch, then delivery) under two different ReadySeqs.
//
// Fresh jobs are handed over directly (offers) when the lane is caught up;
// otherwise the lane reads them from the store. Two positions keep that
// exact: cursor, below which every queued job of the lane is in memory or
// done, and fetched, the highest Seq any store read returned. Seq is commit
// order, so an offer at or below fetched was already read, and an offer the
// lane cannot take lowers cursor so the next read finds it.
//
// One goroutine (run) owns all lane state except what stats reads under mu.
// Other goroutines talk to it through channels: wake (the store may hold
// unread jobs), offers (a job just committed), done (an attempt ended).
type lane struct {
	d       *dispatcher
	key     domain.LaneKey
	log     *zap.Logger
	ceiling domain.Rate

	wake   chan struct{}
	rewind atomic.Bool
	floor  atomic.Int64 // lowest Seq-1 of offers that did not fit in offers
	offers chan *domain.Job
	done   chan *outcome
	quit   chan struct{}

	// Owned by run.
	limiter   *pacing.Limiter
	gate      *pacing.Gate
	window    []*domain.Job      // ready jobs, FIFO
	delayed   delayHeap          // jobs waiting out a retry backoff
	inMem     map[int64]struct{} // ReadySeq of work in the window, delayed or running
	cursor    int64              // all ready work with ReadySeq <= cursor is in memory or done
	fetched   int64              // highest ReadySeq a store read returned
	stale     bool               // the store may hold queued jobs we have not read
	fetchAt   time.Time
	idleSince time.Time

	mu       sync.Mutex // guards snapshot for stats
	snapshot LaneStats
}

func newLane(d *dispatcher, key domain.LaneKey) *lane {
	ceiling := d.cfg.Rates.For(key.Upstream())
	l := &lane{
		d:       d,
		key:     key,
		log:     d.log.With(zap.String("lane", string(key))),
		ceiling: ceiling,
		wake:    make(chan struct{}, 1),
		offers:  make(chan *domain.Job, offerBuffer),
		done:    make(chan *outcome, 64),
		quit:    make(chan struct{}),
		limiter: pacing.NewLimiter(ceiling.RPS),
		gate:    pacing.NewGate(ceiling.MaxConcurrent),
		inMem:   make(map[int64]struct{}),
		stale:   true,
	}
	l.floor.Store(math.MaxInt64)
	return l
}

// offerBuffer is how many handed-over jobs may wait for a busy lane before
// further ones are left for the lane to read from the store.
const offerBuffer = 1024

// lowerFloor records that the work with this ReadySeq must be read from the store.
func (l *lane) lowerFloor(seq int64) {
	for {
		cur := l.floor.Load()
		if seq-1 >= cur || l.floor.CompareAndSwap(cur, seq-1) {
			return
		}
	}
}

// poke wakes the lane without blocking; one pending wake is enough.
func (l *lane) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *lane) stats() LaneStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshot
}

func (l *lane) run(ctx context.Context) {
	defer close(l.quit)
	clock := l.d.cfg.Clock
	timer := clock.NewTimer(time.Hour)
	defer timer.Stop()
	l.idleSince = clock.Now()
	for {
		now := clock.Now()
		l.promoteDue(now)
		if l.stale && len(l.window) <= l.d.cfg.WindowJobs/2 && !now.Before(l.fetchAt) {
			l.fetch(ctx, now)
		}
		wait := l.dispatchReady(now)
		l.publishStats()

		if l.idle() {
			if l.idleSince.IsZero() {
				l.idleSince = now
			}
			idleLeft := l.d.cfg.LaneIdleTimeout - now.Sub(l.idleSince)
			if idleLeft <= 0 && l.d.removeIfIdle(l) {
				return
			}
			wait = minPositive(wait, max(idleLeft, time.Millisecond))
		} else {
			l.idleSince = time.Time{}
		}
		if !l.delayed.empty() {
			wait = minPositive(wait, max(l.delayed.next().Sub(now), time.Microsecond))
		}
		if l.stale && now.Before(l.fetchAt) {
			wait = minPositive(wait, l.fetchAt.Sub(now))
		}
		if wait > 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}

		select {
		case <-ctx.Done():
			return
		case <-l.wake:
			l.stale = true
			if l.rewind.Swap(false) {
				l.cursor = 0
			}
			if f := l.floor.Swap(math.MaxInt64); f < l.cursor {
				l.cursor = f
			}
		case j := <-l.offers:
			l.accept(j)
		case o := <-l.done:
			l.complete(o)
		case <-timer.C():
		}
	}
}

func (l *lane) idle() bool {
	return len(l.window) == 0 && l.delayed.empty() && l.gate.Running() == 0 && !l.stale
}

// accept takes a job handed over right after its commit, if the lane is
// caught up and has room; otherwise it leaves the job for a store read.
func (l *lane) accept(j *domain.Job) {
	if j.ReadySeq <= l.fetched {
		return // a store read already returned it
	}
	if _, dup := l.inMem[j.ReadySeq]; dup {
		return
	}
	if l.stale || len(l.window) >= l.d.cfg.WindowJobs {
		l.stale = true
		l.cursor = min(l.cursor, j.ReadySeq-1)
		return
	}
	l.inMem[j.ReadySeq] = struct{}{}
	l.window = append(l.window, j)
	l.cursor = max(l.cursor, j.ReadySeq)
}

// fetch pages queued jobs after the cursor into the window.
func (l *lane) fetch(ctx context.Context, now time.Time) {
	limit := l.d.cfg.WindowJobs - len(l.window)
	if limit <= 0 {
		return
	}
	jobs, err := l.d.cfg.Store.ListReady(ctx, &ports.ListReadyParams{Lane: l.key, AfterSeq: l.cursor, Limit: limit, Now: now})
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("reading queued jobs failed; retrying", zap.Error(err))
		}
		l.fetchAt = now.Add(fetchRetry)
		return
	}
	for _, j := range jobs {
		l.cursor = max(l.cursor, j.ReadySeq)
		l.fetched = max(l.fetched, j.ReadySeq)
		if _, dup := l.inMem[j.ReadySeq]; dup {
			continue
		}
		l.inMem[j.ReadySeq] = struct{}{}
		l.window = append(l.window, j)
	}
	if len(jobs) < limit {
		l.stale = false
	}
}

// dispatchReady starts as many window jobs as the gate and limiter allow. It
// returns how long until the limiter allows the next one (0 if not waiting on
// the limiter).
func (l *lane) dispatchReady(now time.Time) time.Duration {
	if l.key.Upstream().IsPool() {
		return 0 // pool jobs wait until pools exist (issue 5); they stay queued
	}
	for len(l.window) > 0 && l.gate.Open() {
		j := l.window[0]
		if j.Expired(now) {
			l.popFront()
			delete(l.inMem, j.ReadySeq)
			continue
		}
		if wait := l.limiter.Take(now); wait > 0 {
			return wait + pacing.Jitter(l.limiter.Interval(), l.d.cfg.Rand)
		}
		l.popFront()
		l.gate.Acquire()
		l.d.startAttempt(l, j)
	}
	return 0
}

func (l *lane) popFront() {
	l.window[0] = nil
	l.window = l.window[1:]
	if len(l.window) == 0 {
		l.window = nil // let the backing array go
	}
}

// complete handles the end of an attempt.
func (l *lane) complete(o *outcome) {
	l.gate.Release()
	switch o.kind {
	case outcomeRetry:
		heap.Push(&l.delayed, delayed{job: o.job, due: o.retryAt})
	default:
		delete(l.inMem, o.job.ReadySeq)
	}
}

// promoteDue moves retries whose backoff has elapsed to the front of the window.
func (l *lane) promoteDue(now time.Time) {
	var due []*domain.Job
	for !l.delayed.empty() && !l.delayed.next().After(now) {
		due = append(due, heap.Pop(&l.delayed).(delayed).job)
	}
	if len(due) > 0 {
		l.window = append(due, l.window...)
	}
}

func (l *lane) publishStats() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.snapshot = LaneStats{
		Key: l.key, RPS: l.limiter.Rate(), MaxConcurrent: l.gate.Limit(),
		InFlight: l.gate.Running(), Window: len(l.window) + l.delayed.Len(),
	}
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 {
		return b
	}
	if b <= 0 {
		return a
	}
	return min(a, b)
}

type delayed struct {
	job *domain.Job
	due time.Time
}

type delayHeap []delayed

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h delayHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)        { *h = append(*h, x.(delayed)) }
func (h *delayHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
func (h delayHeap) empty() bool     { return len(h) == 0 }
func (h delayHeap) next() time.Time { return h[0].due }
