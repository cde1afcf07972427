package dispatch

import (
	"container/heap"
	"context"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/app/load"
	"github.com/aquiferhq/aquifer/internal/app/pool"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/pacing"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// fetchRetry is how long a queue waits before reading the store again after a
// failed read.
const fetchRetry = time.Second

// lane paces everything waiting for one upstream: jobs to dispatch there, and
// results to deliver there when it is a webhook receiver. It owns the
// upstream's budget — one limiter, one concurrency gate, one live pace — so
// the sum of everything sent to the upstream never exceeds it.
//
// Work waits in queues, one per store lane: the shared queue, plus one per
// tenant when account queues are on. The lane serves the queues with work
// round-robin, so a tenant with five jobs is not stuck behind one with five
// thousand. A rate-limit answer (429, Retry-After, remaining=0) pauses only
// the queue it came from, since tenants' credentials have their own limits;
// load signals (X-Aqueduct-*, ORCA, 503 Retry-After) slow the whole lane.
//
// One goroutine (run) owns all lane state except the stats snapshot. Other
// goroutines talk to it through channels: wake plus pending signals (the
// store may hold unread work), offers (a job just committed), done (an
// attempt ended).
type lane struct {
	d        *Dispatcher
	upstream domain.UpstreamKey
	log      *zap.Logger

	wake    chan struct{}
	offers  chan *domain.Job
	done    chan *outcome
	fetches chan *fetchResult
	drops   chan domain.JobID // cancelled jobs to forget
	seen    chan observation  // responses obtained outside the lane (proxy direct attempts)
	ctl     chan func()       // run on the lane's goroutine (lease changes)
	quit    chan struct{}
	fetchWG sync.WaitGroup

	sigMu    sync.Mutex
	signals  map[domain.QueueKey]laneSignal // guarded by sigMu; drained by run
	sigCalls int64                          // signal calls since the last drain; guarded by sigMu

	// pending counts offers and signals sent but not yet taken in by run;
	// busy is whether the lane had any work at its last loop. Together they
	// say whether the upstream has a backlog (busy).
	pending atomic.Int64
	hasWork atomic.Bool

	rate     atomic.Uint64 // math.Float64bits of the current rate, for readers
	rateText []string      // the current rate as a header value; owned by run

	// outage is the lane's circuit (nil for pools, which route around a
	// failing member, and when circuits are off). Attempts report to it.
	outage *laneOutage

	// Owned by run.
	pace    *pacing.Pace
	limiter *pacing.Limiter
	gate    *pacing.Gate
	queues  map[domain.QueueKey]*queue
	order   []*queue // round-robin order
	// active: this process dispatches the lane. Always true for a store one
	// process owns; with a shared store, only while it holds the lane's lease.
	active    bool
	next      int // index in order where the next pick starts
	idleSince time.Time
	// Why the lane runs at its pace, for operators (LaneDetail): the
	// signal that last moved the pace below the ceiling and when, the end
	// of a 503 Retry-After hold, and the last failed attempt.
	pacedBy     string
	pacedAt     time.Time
	heldUntil   time.Time
	lastError   string
	lastErrorAt time.Time

	// Budget pacing (on unless the upstream's budget_pacing is false): each
	// queue of a URL lane spreads its rate-limit window over the time to the
	// reset (queue.budget); a pool's members do so in the pool registry.
	noBudget bool
	// adaptiveReason is set by adaptive concurrency while it holds the
	// lane's concurrency: why, in words ("" when it does not; mode reads it).
	adaptiveReason string
	// The mode as last published (cachedMode), and when it was worked out.
	modeName, modeReason string
	modeAt               time.Time
	// adaptive finds the destination's concurrency from its latency when
	// its upstream is configured adaptive: true (nil otherwise, and for
	// pools, whose members answer with latencies of their own). The gate
	// then runs at the lower of the pace's and the adaptive limit. Owned
	// by run.
	adaptive *pacing.Adaptive

	mu       sync.Mutex // guards snapshot
	snapshot LaneStats
}

// laneSignal is a pending "read the store" note for one queue.
type laneSignal struct {
	rewind bool     // re-read from the start
	floor  [3]int64 // per priority class: re-read from here (ReadySeq-1 of work that could not be offered)
}

// allClasses names every priority class in a signal.
const allClasses = -1

func newLane(d *Dispatcher, u domain.UpstreamKey) *lane {
	ceiling := d.cfg.Rates.For(u)
	pace := pacing.NewPace(pacing.PaceConfig{RPS: ceiling.RPS, MaxConcurrent: ceiling.MaxConcurrent})
	log := d.log.With(zap.String("upstream", string(u)))
	l := &lane{
		d:        d,
		upstream: u,
		log:      log,
		outage:   newLaneOutage(d, u, log),
		wake:     make(chan struct{}, 1),
		offers:   make(chan *domain.Job, offerBuffer),
		done:     make(chan *outcome, 64),
		fetches:  make(chan *fetchResult, 4),
		drops:    make(chan domain.JobID, 16),
		seen:     make(chan observation, 16),
		ctl:      make(chan func(), 4),
		active:   !d.clustered,
		quit:     make(chan struct{}),
		signals:  make(map[domain.QueueKey]laneSignal),
		pace:     pace,
		limiter:  pacing.NewLimiter(pace.RPS()),
		gate:     pacing.NewGate(pace.MaxConcurrent()),
		queues:   make(map[domain.QueueKey]*queue),
		noBudget: ceiling.NoBudget || u.IsPool(),
	}
	if ceiling.Adaptive && !u.IsPool() {
		l.adaptive = pacing.NewAdaptive(pacing.AdaptiveConfig{MaxConcurrent: ceiling.MaxConcurrent}, d.cfg.Clock.Now())
		l.adaptiveReason = l.adaptive.Reason()
		l.setConcurrency()
	}
	l.setRate(pace.RPS())
	return l
}

// setConcurrency sets the gate to the lane's concurrency limit: the pace's,
// or the adaptive limit when that is lower.
func (l *lane) setConcurrency() {
	limit := l.pace.MaxConcurrent()
	if l.adaptive != nil {
		limit = min(limit, l.adaptive.Limit())
	}
	l.gate.SetLimit(limit)
}

// observeAdaptive feeds one finished attempt to the adaptive limit: its
// RTT, whether the destination failed it (a 5xx, a transport error or a
// timeout), and how many attempts were running as it ended. An attempt
// that never reached the destination, and a 429 (a quota's answer, fast
// and not a measure of load), teach it nothing.
func (l *lane) observeAdaptive(o *outcome, inFlight int, now time.Time) {
	if l.adaptive == nil || o.rtt <= 0 || o.status == http.StatusTooManyRequests {
		return
	}
	limit, rtt, probing := l.adaptive.Limit(), l.adaptive.RTT(), l.adaptive.Probing()
	if l.adaptive.Observe(now, pacing.AdaptiveSample{RTT: o.rtt, InFlight: inFlight, Failed: o.failed}) {
		l.setConcurrency()
		l.log.Debug("adaptive concurrency changed", zap.Int("from", limit), zap.Int("to", l.adaptive.Limit()),
			zap.Duration("no_load_rtt", l.adaptive.NoLoadRTT()), zap.Duration("rtt", l.adaptive.RTT()))
	}
	if l.adaptive.Limit() != limit || l.adaptive.RTT() != rtt || l.adaptive.Probing() != probing {
		l.adaptiveReason = l.adaptive.Reason()
	}
}

// offerBuffer is how many handed-over jobs may wait for a busy lane before
// further ones are left for the lane to read from the store.
const offerBuffer = 1024

// signal asks the lane to read queue key from the store, from the start
// (rewind) or from floor on, for priority class class (allClasses: every
// class).
func (l *lane) signal(key domain.QueueKey, rewind bool, floor int64, class int) {
	l.sigMu.Lock()
	s, ok := l.signals[key]
	if !ok {
		s.floor = [3]int64{math.MaxInt64, math.MaxInt64, math.MaxInt64}
	}
	s.rewind = s.rewind || rewind
	for c := range s.floor {
		if class == allClasses || class == c {
			s.floor[c] = min(s.floor[c], floor)
		}
	}
	l.signals[key] = s
	l.sigCalls++
	l.pending.Add(1)
	l.sigMu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// poke wakes the lane to look at its work again (pool capacity changed).
func (l *lane) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// busy reports whether the lane has work: waiting, delayed, running, or on
// its way in.
func (l *lane) busy() bool { return l.pending.Load() > 0 || l.hasWork.Load() }

func (l *lane) pendingSignals() bool {
	l.sigMu.Lock()
	defer l.sigMu.Unlock()
	return len(l.signals) > 0
}

func (l *lane) stats() LaneStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshot
}

// setRate publishes the lane's current rate.
func (l *lane) setRate(rps float64) {
	l.rate.Store(math.Float64bits(rps))
	l.rateText = load.RateText(rps)
}

// flowRate is the lane's current rate, safe to read from any goroutine.
func (l *lane) flowRate() float64 { return math.Float64frombits(l.rate.Load()) }

func (l *lane) run(ctx context.Context) {
	defer l.fetchWG.Wait()
	defer close(l.quit)
	clock := l.d.cfg.Clock
	timer := clock.NewTimer(time.Hour)
	defer timer.Stop()
	l.idleSince = clock.Now()
	var consumed int64 // offers and signals taken in since hasWork was last set
	for {
		now := clock.Now()
		var wait time.Duration
		if l.active {
			for _, q := range l.order {
				q.promoteDue(now)
				for c := range q.streams {
					st := &q.streams[c]
					if st.stale && !st.fetching && len(st.window) <= l.d.cfg.WindowJobs/2 && !now.Before(st.fetchAt) {
						l.fetch(ctx, q, c, now)
					}
				}
			}
			wait = l.dispatchReady(now)
		}
		l.collectIdleQueues(now)
		l.publishStats(now)
		// Publish hasWork before releasing what was taken in, so busy never
		// reads false while work is in the lane.
		l.hasWork.Store(l.anyWork())
		if consumed > 0 {
			l.pending.Add(-consumed)
			consumed = 0
		}

		if len(l.queues) == 0 {
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
		for _, q := range l.order {
			wait = minPositive(wait, q.nextWake(now, l.d.cfg.LaneIdleTimeout))
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
			consumed += l.applySignals()
		case j := <-l.offers:
			consumed++
			if l.active {
				l.queue(j.ReadyQueue).accept(j, l.d.cfg.WindowJobs)
			}
		case o := <-l.done:
			l.complete(o, clock.Now())
		case f := <-l.fetches:
			l.fetched(f, clock.Now())
		case id := <-l.drops:
			l.drop(id)
		case fn := <-l.ctl:
			fn()
		case o := <-l.seen:
			l.observeResponse(l.queue(o.queue), o.status, o.signals, clock.Now())
			if q := l.queue(o.queue); q.budget != nil {
				q.budget.Observe(clock.Now(), o.signals.Budget) // a request sent around the lane spent budget too
			}
			if o.status == http.StatusTooManyRequests && o.signals.RetryAfter > 0 {
				q := l.queue(o.queue)
				q.pause(clock.Now().Add(o.signals.RetryAfter))
				q.pausedBy = domain.SignalRetryAfter
			}
		case <-timer.C():
		}
	}
}

// queue returns the queue for key, creating it.
func (l *lane) queue(key domain.QueueKey) *queue {
	q := l.queues[key]
	if q == nil {
		q = &queue{key: key, inMem: make(map[int64]struct{}), avoid: make(map[int64]string), aging: l.d.cfg.PriorityAging}
		for c := range q.streams {
			q.streams[c].stale = true
		}
		if r, ok := l.d.tenants.QueueCap(key); ok {
			q.limiter, q.maxRunning = pacing.NewLimiter(r.RPS), r.MaxConcurrent
		}
		if !l.noBudget {
			ceilRPS, _ := l.pace.Ceiling()
			q.budget, q.budgeted = pacing.NewBudgetPacer(ceilRPS), make(map[int64]struct{})
		}
		l.queues[key] = q
		l.order = append(l.order, q)
	}
	return q
}

// applySignals marks the signalled queues stale and returns how many signal
// calls it took in.
func (l *lane) applySignals() int64 {
	l.sigMu.Lock()
	pending, calls := l.signals, l.sigCalls
	l.signals, l.sigCalls = make(map[domain.QueueKey]laneSignal), 0
	l.sigMu.Unlock()
	for key, s := range pending {
		q := l.queue(key)
		for c, floor := range s.floor {
			if s.rewind {
				floor = 0
			}
			if floor != math.MaxInt64 {
				q.streams[c].markStale(floor)
			}
		}
	}
	return calls
}

// fetchResult is a page read from the store for one priority class of one
// queue.
type fetchResult struct {
	queue domain.QueueKey
	class int
	limit int
	jobs  []*domain.Job
	err   error
}

// fetch starts reading the next page of q's ready work from the store. The
// read runs on its own goroutine so that dispatch never waits for the disk;
// its result comes back on l.fetches.
func (l *lane) fetch(ctx context.Context, q *queue, class int, now time.Time) {
	st := &q.streams[class]
	limit := l.d.cfg.WindowJobs - len(st.window)
	if limit <= 0 {
		return
	}
	st.fetching, st.refetch, st.pendingFloor = true, false, math.MaxInt64
	p := &ports.ListReadyParams{Queue: q.key, Priority: domain.Priorities[class], AfterSeq: st.cursor, Limit: limit, Now: now}
	l.fetchWG.Add(1)
	go func() {
		defer l.fetchWG.Done()
		jobs, err := l.d.cfg.Store.ListReady(ctx, p)
		select {
		case l.fetches <- &fetchResult{queue: p.Queue, class: class, limit: limit, jobs: jobs, err: err}:
		case <-l.quit:
		}
	}()
}

// fetched adds a page read from the store to its queue's window.
func (l *lane) fetched(f *fetchResult, now time.Time) {
	q := l.queue(f.queue)
	st := &q.streams[f.class]
	st.fetching = false
	if !l.active {
		return // read before the lease was lost: another process owns this work now
	}
	if f.err != nil {
		if l.d.runCtx.Err() == nil {
			l.log.Warn("reading queued jobs failed; retrying", zap.String("lane", string(q.key)), zap.Error(f.err))
		}
		st.fetchAt = now.Add(fetchRetry)
		st.markStale(st.pendingFloor)
		return
	}
	for _, j := range f.jobs {
		st.cursor = max(st.cursor, j.ReadySeq)
		st.fetched = max(st.fetched, j.ReadySeq)
		if _, dup := q.inMem[j.ReadySeq]; dup || l.d.isCanceled(j) {
			continue
		}
		if _, done := st.doneInFetch[j.ReadySeq]; done {
			continue
		}
		q.inMem[j.ReadySeq] = struct{}{}
		st.window = append(st.window, j)
	}
	clear(st.doneInFetch)
	st.stale = len(f.jobs) == f.limit
	if st.refetch {
		// Work the queue could not take arrived while the read ran.
		st.markStale(st.pendingFloor)
	}
}

// dispatchReady starts as much work as the gate and limiter allow, taking
// queues in turn. It returns how long until the limiter allows the next start
// (0 if not waiting on the limiter).
func (l *lane) dispatchReady(now time.Time) time.Duration {
	if l.d.isPaused(l.upstream) {
		return 0 // an operator paused the destination; Resume wakes the lane
	}
	if fresh, retryIn := l.d.owner.Fresh(now); !fresh {
		// The lease may be running out (renewals are late): start nothing
		// another process could be about to start too.
		return retryIn
	}
	poolID := l.upstream.PoolID()
	if poolID != "" && !l.followPool(poolID) {
		return 0 // no members: the jobs wait; a registration wakes the lane
	}
	for l.gate.Open() {
		ok, probe, wait := l.outage.allow(now)
		if !ok {
			// The destination is down: hold the work, but let what has
			// waited too long fail.
			return minPositive(wait, l.failOverdue(now))
		}
		turn := l.next
		q := l.pick(now)
		if q == nil {
			return 0
		}
		var member, target string
		flowRate := l.rateText
		if head := q.head(); poolID != "" && head.Phase() == domain.PhaseDispatch {
			id, addr, rate, wait, ok := l.d.pools.Pick(poolID, q.avoid[head.ReadySeq])
			if !ok {
				l.next = turn // nothing started: q keeps its turn
				return wait   // every member paused or busy: a completion or a pause's end wakes the lane
			}
			// The member hears its own share of the pool's rate.
			member, target, flowRate = id, addr, load.RateText(rate)
		}
		if wait := l.limiter.Take(now); wait > 0 {
			if member != "" {
				l.d.pools.Unpick(poolID, member)
			}
			// Nothing started: q keeps its turn. (Moving on would hand the
			// next slot to the queue before it again, every time: with room
			// for more than one attempt, one tenant would take every slot.)
			l.next = turn
			return wait + pacing.Jitter(l.limiter.Interval(), l.d.cfg.Rand)
		}
		if q.limiter != nil {
			q.limiter.Take(now) // underCap checked it has room
		}
		j := q.pop()
		if j.Phase() == domain.PhaseDispatch && !l.d.BeginDispatch(j) {
			// Cancelled since it was picked, or running already (held by
			// a proxy attempt, or a second copy of a running job).
			q.forget(j)
			if member != "" {
				l.d.pools.Unpick(poolID, member)
			}
			continue
		}
		l.gate.Acquire()
		q.running++
		if j.Phase() == domain.PhaseDispatch && j.PastDeadline(now) {
			// Not sent late: it fails as it is, and its webhook says why.
			if member != "" {
				l.d.pools.Unpick(poolID, member)
			}
			l.d.startExpiry(l, q.key, j, domain.ReasonDeadlineExceeded)
			continue
		}
		if probe {
			l.outage.startProbe()
		}
		if q.budget != nil {
			q.budget.Start(now)
			q.budgeted[j.ReadySeq] = struct{}{}
		}
		l.d.startAttempt(l, q.key, j, flowRate, member, target, probe)
	}
	return 0
}

// failOverdue fails the work at the head of each queue that has waited
// longer than the outage hold allows (queues are FIFO, so the head waited
// longest), and returns how long until the next head is due (0: none).
func (l *lane) failOverdue(now time.Time) time.Duration {
	var wait time.Duration
	for _, q := range l.order {
		for q.head() != nil && l.gate.Open() {
			j := q.head()
			due := holdDeadline(j, l.d.cfg.Outage.MaxHold)
			if !j.Deadline.IsZero() && j.Phase() == domain.PhaseDispatch {
				due = minTime(due, j.Deadline)
			}
			if now.Before(due) {
				wait = minPositive(wait, due.Sub(now))
				break
			}
			q.pop()
			if j.Phase() == domain.PhaseDispatch && !l.d.BeginDispatch(j) {
				q.forget(j) // cancelled meanwhile, or running already
				continue
			}
			l.gate.Acquire()
			q.running++
			if j.PastDeadline(now) {
				l.d.startExpiry(l, q.key, j, domain.ReasonDeadlineExceeded)
				continue
			}
			l.d.startExpiry(l, q.key, j, l.d.outageReason(l.outage.stats().LastError))
		}
	}
	return wait
}

// followPool sets a pool lane's ceiling to the pool's live capacity: the sum
// of its members' effective rates and concurrency. It reports whether the
// pool has members.
func (l *lane) followPool(poolID string) bool {
	rps, conc, members := l.d.pools.Capacity(poolID)
	if members == 0 || rps <= 0 || conc <= 0 {
		return false
	}
	if rps != l.limiter.Rate() || conc != l.gate.Limit() {
		l.pace.SetCeiling(rps, conc)
		l.pace.Restore(rps, conc)
		l.limiter.SetRate(rps)
		l.gate.SetLimit(conc)
		l.setRate(rps)
	}
	return true
}

// pick returns the next queue, round-robin, that has work ready and is not
// paused; expired work at a queue's head is dropped on the way (the purge
// deletes its row).
func (l *lane) pick(now time.Time) *queue {
	n := len(l.order)
	for i := range n {
		q := l.order[(l.next+i)%n]
		for h := q.head(); h != nil && (h.Expired(now) || l.d.isCanceled(h)); h = q.head() {
			q.forget(q.pop())
		}
		if q.head() != nil && !now.Before(q.pausedUntil) && q.underCap(now) && q.underBudget(now) {
			l.next = (l.next + i + 1) % n
			return q
		}
	}
	return nil
}

// complete handles the end of an attempt: the budget slot is freed, the
// response's signals adjust the pace, and the work either ends or waits in
// its queue for its next try.
func (l *lane) complete(o *outcome, now time.Time) {
	l.observeAdaptive(o, l.gate.Running(), now)
	l.gate.Release()
	q := l.queue(o.queue)
	q.running--
	if o.member != "" {
		// Pool work: the signals and pauses belong to the member that
		// answered, not to the pool's lane; a retry avoids that member.
		l.d.pools.Record(l.upstream.PoolID(), o.member, pool.Outcome{Failed: o.failed, Status: o.status,
			Signals: o.signals, Observed: o.observed, DeferTo: o.deferTo})
		switch o.kind {
		case outcomeRetry, outcomeDeferred:
			q.avoid[o.job.ReadySeq] = o.member
			heap.Push(&q.delayed, delayed{job: o.job, due: o.retryAt})
		default:
			q.forget(o.job)
			delete(q.avoid, o.job.ReadySeq)
		}
		return
	}
	if _, counted := q.budgeted[o.job.ReadySeq]; counted {
		delete(q.budgeted, o.job.ReadySeq)
		q.budget.Finish(now, o.signals.Budget, o.observed)
	}
	if o.failed && o.reason != "" {
		l.lastError, l.lastErrorAt = o.reason, now
	}
	if o.probe {
		l.outage.probeEnded(now) // no-op unless the probe reported nothing either way
	}
	if o.observed {
		l.observeResponse(q, o.status, o.signals, now)
	}
	switch o.kind {
	case outcomeHeld:
		heap.Push(&q.delayed, delayed{job: o.job, due: o.retryAt}) // back at the front once due; held by the circuit
	case outcomeDeferred:
		q.pause(o.retryAt) // nothing else from this queue overtakes it
		q.pausedBy = domain.SignalRetryAfter
		if o.signals.RetryAfter <= 0 && o.signals.ResetIn > 0 {
			q.pausedBy = domain.SignalRateLimit
		}
		heap.Push(&q.delayed, delayed{job: o.job, due: o.retryAt})
	case outcomeRetry:
		heap.Push(&q.delayed, delayed{job: o.job, due: o.retryAt})
	default:
		q.forget(o.job)
	}
}

// drop forgets a cancelled job wherever the lane holds it, waiting or
// delayed for a retry.
func (l *lane) drop(id domain.JobID) {
	for _, q := range l.order {
		for c := range q.streams {
			st := &q.streams[c]
			for i, j := range st.window {
				if j.ID == id && j.Phase() == domain.PhaseDispatch {
					delete(q.inMem, j.ReadySeq)
					st.window = append(st.window[:i:i], st.window[i+1:]...)
					break
				}
			}
		}
		for i, dl := range q.delayed {
			if dl.job.ID == id && dl.job.Phase() == domain.PhaseDispatch {
				delete(q.inMem, dl.job.ReadySeq)
				delete(q.avoid, dl.job.ReadySeq)
				heap.Remove(&q.delayed, i)
				break
			}
		}
	}
}

// observeResponse folds one response's pacing signals into the lane: load
// signals set the pace, a rate-limit reset pauses q, a 503 Retry-After holds
// the whole lane.
func (l *lane) observeResponse(q *queue, status int, sig pacing.Signals, now time.Time) {
	if l.pace.Observe(sig) {
		l.limiter.SetRate(l.pace.RPS())
		l.setConcurrency()
		l.setRate(l.pace.RPS())
		l.pacedBy, l.pacedAt = loadSignal(sig), now
		l.log.Debug("pace changed", zap.Float64("rps", l.pace.RPS()), zap.Int("max_concurrent", l.pace.MaxConcurrent()))
	}
	if sig.ResetIn > 0 {
		q.pause(now.Add(sig.ResetIn))
		q.pausedBy = domain.SignalRateLimit
	}
	if status == http.StatusServiceUnavailable && sig.RetryAfter > 0 {
		l.limiter.Delay(now.Add(sig.RetryAfter))
		l.heldUntil = maxTime(l.heldUntil, now.Add(sig.RetryAfter))
	}
}

// activate starts dispatching (this process took the lane's lease): the
// pace continues from st when the previous holder saved one, and every
// queue is read again from the start.
func (l *lane) activate(st ports.LaneState) {
	if st.Saved && st.RPS > 0 && st.MaxConcurrent > 0 {
		conc := st.MaxConcurrent
		if l.adaptive != nil {
			// What was saved is the lane's effective limit, the adaptive
			// one (LaneStats.MaxConcurrent): the adaptive limit returns to
			// it once its probe has measured this destination afresh, and
			// the pace keeps its own ceiling.
			l.adaptive.Restore(conc)
			_, conc = l.pace.Ceiling()
		}
		l.pace.Restore(st.RPS, conc)
		l.limiter.SetRate(l.pace.RPS())
		l.setConcurrency()
		l.setRate(l.pace.RPS())
	}
	l.active = true
	for _, q := range l.order {
		for c := range q.streams {
			q.streams[c].markStale(0)
		}
	}
}

// deactivate stops dispatching (the lease is lost or being given up):
// buffered work is forgotten — it stays in the store for the next holder —
// and running attempts finish normally.
func (l *lane) deactivate() {
	l.active = false
	for _, q := range l.order {
		for c := range q.streams {
			st := &q.streams[c]
			for _, j := range st.window {
				delete(q.inMem, j.ReadySeq)
			}
			st.window = nil
			st.cursor, st.fetched, st.stale = 0, 0, true
		}
		for _, dl := range q.delayed {
			delete(q.inMem, dl.job.ReadySeq)
		}
		q.delayed = nil
		clear(q.avoid)
	}
}

// observation is a response the lane did not send itself.
type observation struct {
	queue   domain.QueueKey
	status  int
	signals pacing.Signals
}

// anyWork reports whether any queue has work.
func (l *lane) anyWork() bool {
	for _, q := range l.order {
		if !q.idle() {
			return true
		}
	}
	return false
}

// collectIdleQueues forgets queues that have had nothing to do for the idle
// timeout (a tenant that went quiet).
func (l *lane) collectIdleQueues(now time.Time) {
	kept := l.order[:0]
	for _, q := range l.order {
		if q.idle() {
			if q.idleSince.IsZero() {
				q.idleSince = now
			}
			if now.Sub(q.idleSince) >= l.d.cfg.LaneIdleTimeout {
				delete(l.queues, q.key)
				continue
			}
		} else {
			q.idleSince = time.Time{}
		}
		kept = append(kept, q)
	}
	clear(l.order[len(kept):])
	l.order = kept
	if l.next >= len(l.order) {
		l.next = 0
	}
}

func (l *lane) publishStats(now time.Time) {
	buffered, paused := 0, 0
	for _, q := range l.order {
		buffered += q.buffered()
		if now.Before(q.pausedUntil) {
			paused++
		}
	}
	ceilRPS, ceilConc := l.pace.Ceiling()
	circuit := l.outage.stats()
	mode, reason := l.cachedMode(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.snapshot = LaneStats{
		Upstream: l.upstream, RPS: l.pace.RPS(), MaxConcurrent: l.gate.Limit(),
		CeilingRPS: ceilRPS, CeilingMaxConcurrent: ceilConc,
		InFlight: l.gate.Running(), Buffered: buffered, Queues: len(l.order), PausedQueues: paused,
		Circuit: circuit, Mode: mode, ModeReason: reason,
	}
}

// queue is one store lane's ready work inside a lane: one FIFO stream per
// priority, and the work waiting out a retry. The store is the queue: each
// stream's window holds at most WindowJobs ready items and more are paged in
// commit order (ReadySeq) as it drains, so a backlog of millions costs disk,
// not RAM. Work is identified by ReadySeq, which is unique per readiness: a
// job can wait in the same queue twice (dispatch, then delivery) under two
// ReadySeqs.
//
// Which stream goes next is the priority rule (head): each stream's oldest
// job counts as having arrived when it became due, less aging for each
// class it stands above low, and the earliest goes. So a high job passes
// normal jobs that became due less than aging before it, and low ones less
// than twice that; a job that has waited longer than that is not passed —
// no job starves, however much higher-priority work keeps arriving.
type queue struct {
	key     domain.QueueKey
	streams [3]stream          // by domain.Priority.Class: high, normal, low
	aging   time.Duration      // the priority rule's step
	sel     int                // the stream head chose last
	delayed delayHeap          // work waiting out a retry backoff or a deferral
	inMem   map[int64]struct{} // ReadySeq of work in a window, delayed or running
	avoid   map[int64]string   // pool work: the member its last attempt failed on

	pausedUntil time.Time // the destination asked this queue to wait
	pausedBy    string    // the signal that asked it (domain.Signal*)
	running     int
	// A capped tenant's queue (its own pace inside the lane's budget):
	// limiter nil otherwise.
	limiter    *pacing.Limiter
	maxRunning int
	// budget spreads the destination's rate-limit window for this queue's
	// credentials (nil with budget pacing off); budgeted holds the ReadySeq
	// of each attempt it counted, so only those end it (an expiry does not).
	budget    *pacing.BudgetPacer
	budgeted  map[int64]struct{}
	idleSince time.Time
}

// stream is the ready work of one priority of a queue, FIFO.
//
// Fresh work is handed over directly (offers) when the stream is caught up;
// otherwise the stream reads it from the store. Two positions keep that
// exact: cursor, below which all ready work is in memory or done, and
// fetched, the highest ReadySeq a store read returned. ReadySeq follows
// commit order, so an offer at or below fetched was already read, and an
// offer the stream cannot take lowers cursor so the next read finds it.
type stream struct {
	window   []*domain.Job // ready work, FIFO
	cursor   int64
	fetched  int64
	stale    bool // the store may hold ready work not read yet
	fetching bool // a read is running; what arrives meanwhile is noted in refetch
	refetch  bool
	// doneInFetch holds work that finished while a read was running: the
	// read may have seen it before its end was committed, and must not
	// bring it back.
	doneInFetch  map[int64]struct{}
	pendingFloor int64
	fetchAt      time.Time
}

// accept takes work handed over right after its commit, if its stream is
// caught up and has room; otherwise it leaves the work for a store read.
func (q *queue) accept(j *domain.Job, window int) {
	st := &q.streams[j.Priority.Class()]
	if j.ReadySeq <= st.fetched {
		return // a store read already returned it
	}
	if _, dup := q.inMem[j.ReadySeq]; dup {
		return
	}
	if st.stale || st.fetching || len(st.window) >= window {
		st.markStale(j.ReadySeq - 1)
		return
	}
	q.inMem[j.ReadySeq] = struct{}{}
	st.window = append(st.window, j)
	st.cursor = max(st.cursor, j.ReadySeq)
}

// markStale notes that the store holds ready work from floor on that the
// stream has not read. During a read it is remembered and applied when the
// read's result is in, so the result cannot move the cursor past it.
func (st *stream) markStale(floor int64) {
	if st.fetching {
		st.refetch = true
		st.pendingFloor = min(st.pendingFloor, floor)
		return
	}
	st.stale = true
	st.cursor = min(st.cursor, floor)
}

// underCap reports whether a capped tenant's queue may start one more
// attempt now (always true for other queues).
func (q *queue) underCap(now time.Time) bool {
	return q.limiter == nil || (q.running < q.maxRunning && q.limiter.Wait(now) == 0)
}

// underBudget reports whether the queue's rate-limit budget lets one more
// attempt start now (always true without budget pacing).
func (q *queue) underBudget(now time.Time) bool {
	if q.budget == nil {
		return true
	}
	_, ok := q.budget.Wait(now)
	return ok
}

// forget drops finished work from the queue's memory. A read of its stream
// running now may have seen it still waiting; it is kept from coming back.
func (q *queue) forget(j *domain.Job) {
	delete(q.inMem, j.ReadySeq)
	if st := &q.streams[j.Priority.Class()]; st.fetching {
		if st.doneInFetch == nil {
			st.doneInFetch = make(map[int64]struct{})
		}
		st.doneInFetch[j.ReadySeq] = struct{}{}
	}
}

// head returns the work that goes next under the priority rule (nil if the
// windows are empty) and remembers its stream for pop. A stream with nothing
// in memory whose store read is due or running may hold work that goes
// first: until it is read, lower priorities wait for it (a short wait, and
// only when higher-priority work has just arrived or the lane has just
// started).
func (q *queue) head() *domain.Job {
	var best *domain.Job
	var bestAt time.Time
	for c := range q.streams {
		st := &q.streams[c]
		w := st.window
		if len(w) == 0 {
			if st.stale || st.fetching {
				break
			}
			continue
		}
		// Class c counts as arriving (2-c) aging steps earlier than low.
		at := w[0].DueAt().Add(-time.Duration(2-c) * q.aging)
		if best == nil || at.Before(bestAt) {
			best, bestAt, q.sel = w[0], at, c
		}
	}
	return best
}

// pop removes and returns the work head returned last.
func (q *queue) pop() *domain.Job {
	st := &q.streams[q.sel]
	j := st.window[0]
	st.window[0] = nil
	st.window = st.window[1:]
	if len(st.window) == 0 {
		st.window = nil // let the backing array go
	}
	return j
}

// buffered is how much work the queue holds in memory: its windows and its
// retry waits.
func (q *queue) buffered() int {
	n := q.delayed.Len()
	for c := range q.streams {
		n += len(q.streams[c].window)
	}
	return n
}

// waiting reports whether any window holds work.
func (q *queue) waiting() bool {
	for c := range q.streams {
		if len(q.streams[c].window) > 0 {
			return true
		}
	}
	return false
}

// promoteDue moves work whose wait has elapsed back to the front of its
// stream's window, oldest first.
func (q *queue) promoteDue(now time.Time) {
	var due [3][]*domain.Job
	any := false
	for !q.delayed.empty() && !q.delayed.next().After(now) {
		j := heap.Pop(&q.delayed).(delayed).job
		c := j.Priority.Class()
		due[c] = append(due[c], j)
		any = true
	}
	if !any {
		return
	}
	for c, js := range due {
		if len(js) > 0 {
			q.streams[c].window = append(js, q.streams[c].window...)
		}
	}
}

func (q *queue) pause(until time.Time) {
	if until.After(q.pausedUntil) {
		q.pausedUntil = until
	}
}

func (q *queue) idle() bool {
	if !q.delayed.empty() || q.running != 0 {
		return false
	}
	for c := range q.streams {
		st := &q.streams[c]
		if len(st.window) > 0 || st.stale || st.fetching {
			return false
		}
	}
	return true
}

// nextWake is how long until something in the queue needs the lane's
// attention without an outside event (0: nothing).
func (q *queue) nextWake(now time.Time, idleTimeout time.Duration) time.Duration {
	var w time.Duration
	if !q.delayed.empty() {
		w = minPositive(w, max(q.delayed.next().Sub(now), time.Microsecond))
	}
	for c := range q.streams {
		if st := &q.streams[c]; st.stale && !st.fetching && now.Before(st.fetchAt) {
			w = minPositive(w, st.fetchAt.Sub(now))
		}
	}
	waiting := q.waiting()
	if waiting && now.Before(q.pausedUntil) {
		w = minPositive(w, q.pausedUntil.Sub(now))
	}
	if waiting && q.limiter != nil {
		w = minPositive(w, q.limiter.Wait(now))
	}
	if waiting && q.budget != nil {
		wait, _ := q.budget.Wait(now) // 0 when it waits for an attempt to end, which wakes the lane
		w = minPositive(w, wait)
	}
	if q.idle() && !q.idleSince.IsZero() {
		w = minPositive(w, max(idleTimeout-now.Sub(q.idleSince), time.Millisecond))
	}
	return w
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
