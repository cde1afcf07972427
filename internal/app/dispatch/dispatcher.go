package dispatch

import (
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

// Dispatcher owns the lanes: it creates them on first use, starts and stops
// them, and collects idle ones. Lanes learn about new work only through
// Notify and Offer; they read the work itself from the store.
type Dispatcher struct {
	cfg     Config
	log     *zap.Logger
	owner   Ownership
	events  Publisher
	pools   Pools
	tenants Tenants
	signer  Signer
	load    LoadSource
	// clustered: lanes start inactive and dispatch only once Ownership
	// has them activated (SetActive).
	clustered bool

	// modes holds each upstream's account-queue mode (true: one queue per
	// tenant). It lives as long as the process, not the lane.
	modes sync.Map // domain.UpstreamKey → bool

	mu       sync.RWMutex // guards lanes, started, stopping
	lanes    map[domain.UpstreamKey]*lane
	started  bool
	stopping bool

	// loopCtx stops lane loops (no new dispatches); runCtx aborts attempts.
	loopCtx    context.Context
	stopLoops  context.CancelFunc
	runCtx     context.Context
	abortRuns  context.CancelFunc
	lanesWG    sync.WaitGroup
	attemptsWG sync.WaitGroup
	workers    *workers

	execMu    sync.Mutex
	executing map[domain.JobID]execInfo
	// canceled holds jobs cancelled before dispatch, with when: a copy of
	// such a job still in a lane's memory (or in a store read that started
	// before the cancellation committed) is dropped instead of run. Entries
	// are pruned once no such copy can remain (cancelHold).
	canceled map[domain.JobID]cancelMark

	// pauses holds the destinations an operator paused (SetPauses); nil
	// when none is. Lanes read it before every start, without a lock.
	pauses atomic.Pointer[map[domain.UpstreamKey]domain.LanePause]
}

// ErrAlreadyDispatched refuses to cancel a job whose request is being sent.
var ErrAlreadyDispatched = &domain.Error{Code: domain.CodeConflict, Message: "job already dispatched: its request is being sent; it cannot be canceled"}

// cancelHold is how long a cancelled job's id is remembered after its
// cancellation committed: longer than any store read that could have
// fetched it before. Lanes drop buffered copies at once (dropCanceled).
const cancelHold = 2 * time.Minute

// cancelMark is a job's cancellation as lanes check it: since when, and,
// once an operator retried the job, the ReadySeq of the retry — copies
// ready under an older ReadySeq are the cancelled ones; the retry's run.
type cancelMark struct {
	at       time.Time
	retrySeq int64 // 0: every copy is cancelled
}

// covers reports whether the mark cancels j (false for the zero mark).
func (m cancelMark) covers(j *domain.Job) bool {
	return !m.at.IsZero() && (m.retrySeq == 0 || j.ReadySeq < m.retrySeq)
}

// execInfo places a running dispatch attempt in its queue.
type execInfo struct {
	lane domain.QueueKey
	seq  int64
	// recorded: the store has the job as in_flight (a long attempt, see
	// markInFlightLater), so it no longer counts it as waiting.
	recorded bool
}

// New returns a dispatcher; Start starts its lanes. cfg is completed with
// its defaults; deps fields left nil get null objects (one process, no
// pools, no tenants, unsigned deliveries, zero load), so tests need only
// what they exercise.
func New(cfg Config, deps Deps) *Dispatcher {
	cfg = cfg.WithDefaults()
	d := &Dispatcher{
		cfg:       cfg,
		log:       cfg.Logger.Named("dispatch"),
		owner:     deps.Owner,
		events:    deps.Events,
		pools:     deps.Pools,
		tenants:   deps.Tenants,
		signer:    deps.Signer,
		load:      deps.Load,
		clustered: deps.Owner != nil,
		lanes:     make(map[domain.UpstreamKey]*lane),
		executing: make(map[domain.JobID]execInfo),
		canceled:  make(map[domain.JobID]cancelMark),
		workers:   newWorkers(cfg.Clock, 30*time.Second),
	}
	if d.owner == nil {
		d.owner = SingleProcess{}
	}
	if d.events == nil {
		d.events = noEvents{}
	}
	if d.pools == nil {
		d.pools = noPools{}
	}
	if d.tenants == nil {
		d.tenants = noTenants{}
	}
	if d.signer == nil {
		d.signer = noSigner{}
	}
	if d.load == nil {
		d.load = noLoad{}
	}
	d.loopCtx, d.stopLoops = context.WithCancel(context.Background())
	d.runCtx, d.abortRuns = context.WithCancel(context.Background())
	return d
}

// Notify tells the lane of key's upstream that the store may hold ready
// work for key it has not read, creating the lane if needed. rewind makes it
// re-read from the start, for work put back behind its cursor.
func (d *Dispatcher) Notify(key domain.QueueKey, rewind bool) {
	if !d.owner.Holds(key.Upstream()) {
		return // another process dispatches it (or will, when it takes the lease)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return // the work is durable; the next start recovers it
	}
	d.laneLocked(key.Upstream()).signal(key, rewind, math.MaxInt64, allClasses)
}

// NotifyFrom tells key's lane to read its queue again from after floor
// (work another process committed there).
func (d *Dispatcher) NotifyFrom(key domain.QueueKey, floor int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return
	}
	d.laneLocked(key.Upstream()).signal(key, false, floor, allClasses)
}

// HasLane reports whether u has a lane in this process.
func (d *Dispatcher) HasLane(u domain.UpstreamKey) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.lanes[u] != nil
}

// Running is how many attempts u's lane has running.
func (d *Dispatcher) Running(u domain.UpstreamKey) int {
	d.mu.RLock()
	l := d.lanes[u]
	d.mu.RUnlock()
	if l == nil {
		return 0
	}
	return l.stats().InFlight
}

// Offer hands just-committed work to its lane. If the lane's buffer is full
// the lane reads it from the store instead.
func (d *Dispatcher) Offer(j *domain.Job) {
	u := j.ReadyQueue.Upstream()
	if !d.owner.Holds(u) {
		d.owner.WorkElsewhere(j)
		return
	}
	d.mu.RLock()
	l := d.lanes[u]
	if l != nil && !d.stopping {
		// The common case: the lane exists. Sending under the read lock keeps
		// removeIfIdle (which takes the write lock) from missing this offer.
		l.pending.Add(1)
		select {
		case l.offers <- j:
			d.mu.RUnlock()
			return
		default:
			l.pending.Add(-1)
		}
	}
	d.mu.RUnlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return
	}
	l = d.laneLocked(u)
	l.pending.Add(1)
	select {
	case l.offers <- j:
	default:
		l.pending.Add(-1)
		l.signal(j.ReadyQueue, false, j.ReadySeq-1, j.Priority.Class())
	}
}

// RequeueHeld makes a job that was held back from its lane (a proxy direct
// attempt that did not work out) available to it again: the lane re-reads
// its queue from the job on.
func (d *Dispatcher) RequeueHeld(j *domain.Job) {
	if !d.owner.Holds(j.ReadyQueue.Upstream()) {
		d.owner.WorkElsewhere(j)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return // the job is queued in the store; the next start runs it
	}
	d.laneLocked(j.ReadyQueue.Upstream()).signal(j.ReadyQueue, false, j.ReadySeq-1, j.Priority.Class())
}

// Busy reports whether upstream has work in this process: queued, waiting
// to retry, running, or just handed over.
func (d *Dispatcher) Busy(u domain.UpstreamKey) bool {
	d.mu.RLock()
	l := d.lanes[u]
	d.mu.RUnlock()
	return l != nil && l.busy()
}

// Down reports whether u's lane has found its destination down (its
// outage circuit is not closed).
func (d *Dispatcher) Down(u domain.UpstreamKey) bool {
	d.mu.RLock()
	l := d.lanes[u]
	d.mu.RUnlock()
	return l != nil && l.outage.stats().State != pacing.CircuitClosed
}

// AnyBusy reports whether any lane has work.
func (d *Dispatcher) AnyBusy() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, l := range d.lanes {
		if l.busy() {
			return true
		}
	}
	return false
}

// Observe passes a response obtained outside the lanes (a proxy direct
// attempt) to upstream's lane, so its pacing signals count. It never blocks:
// under a flood of them some are dropped, which only delays adaptation.
func (d *Dispatcher) Observe(key domain.QueueKey, status int, sig pacing.Signals) {
	if !d.owner.Holds(key.Upstream()) {
		return // the holder paces it
	}
	d.mu.Lock()
	if d.stopping {
		d.mu.Unlock()
		return
	}
	l := d.laneLocked(key.Upstream())
	d.mu.Unlock()
	select {
	case l.seen <- observation{queue: key, status: status, signals: sig}:
	default:
	}
}

func (d *Dispatcher) laneLocked(u domain.UpstreamKey) *lane {
	l := d.lanes[u]
	if l == nil {
		l = newLane(d, u)
		d.lanes[u] = l
		if d.started {
			d.startLaneLocked(l)
		}
	}
	return l
}

// PoolChanged wakes a pool's lane: a member registered or freed a slot.
func (d *Dispatcher) PoolChanged(poolID string) {
	d.mu.RLock()
	l := d.lanes[domain.PoolUpstream(poolID)]
	d.mu.RUnlock()
	if l != nil {
		l.poke()
	}
}

// FlowRate is the current rate of u's lane, or its configured ceiling when
// it has no lane.
func (d *Dispatcher) FlowRate(u domain.UpstreamKey) float64 {
	d.mu.RLock()
	l := d.lanes[u]
	d.mu.RUnlock()
	if l == nil {
		return d.cfg.Rates.For(u).RPS
	}
	return l.flowRate()
}

func (d *Dispatcher) Start() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started || d.stopping {
		return
	}
	d.started = true
	for _, l := range d.lanes {
		d.startLaneLocked(l)
	}
}

func (d *Dispatcher) startLaneLocked(l *lane) {
	d.lanesWG.Add(1)
	go func() {
		defer d.lanesWG.Done()
		l.run(d.loopCtx)
	}()
}

// Stop stops dispatching, waits for running attempts until ctx ends, then
// aborts the rest. An aborted attempt leaves its job in_flight in the store;
// the next start puts it back in its lane.
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.mu.Lock()
	if d.stopping {
		d.mu.Unlock()
		return nil
	}
	d.stopping = true
	d.mu.Unlock()

	d.stopLoops()
	d.lanesWG.Wait()
	done := make(chan struct{})
	go func() {
		d.attemptsWG.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		d.log.Warn("shutdown timeout: aborting running attempts; their jobs will run again after restart")
		d.abortRuns()
		<-done
	}
	d.abortRuns()
	d.workers.stop()
	return err
}

// removeIfIdle drops l from the registry when nothing arrived for it since it
// decided it was idle. Both sides hold d.mu, so a notify either reaches the
// old lane (which then stays) or creates a new one.
func (d *Dispatcher) removeIfIdle(l *lane) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(l.wake) > 0 || len(l.offers) > 0 || l.pendingSignals() || d.lanes[l.upstream] != l {
		return false
	}
	delete(d.lanes, l.upstream)
	return true
}

func (d *Dispatcher) LaneCount() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.lanes)
}

// LaneStats describes one lane for health and tests.
type LaneStats struct {
	Upstream             domain.UpstreamKey
	RPS                  float64 // current pace
	MaxConcurrent        int
	CeilingRPS           float64 // configured
	CeilingMaxConcurrent int
	InFlight             int
	Buffered             int // work held in memory (windows and retry waits)
	Queues               int // the shared queue and tenant queues with work
	PausedQueues         int // queues waiting out a 429 / rate-limit reset
	Circuit              CircuitStats
	// Mode names what holds the pace now (ModeStatic, ModeSignalled,
	// ModeBudget, ModeAdaptive); ModeReason says why, in words.
	Mode       string
	ModeReason string
}

func (d *Dispatcher) Stats() []LaneStats {
	d.mu.Lock()
	lanes := make([]*lane, 0, len(d.lanes))
	for _, l := range d.lanes {
		lanes = append(lanes, l)
	}
	d.mu.Unlock()
	out := make([]LaneStats, 0, len(lanes))
	for _, l := range lanes {
		out = append(out, l.stats())
	}
	return out
}

// BeginDispatch marks j's dispatch attempt as running, unless j was
// cancelled or is running already; then it reports false and j must not run. Together with
// claimCancel, under one lock, it makes "cancelled" and "dispatched" exclusive.
func (d *Dispatcher) BeginDispatch(j *domain.Job) bool {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	if d.canceled[j.ID].covers(j) {
		return false
	}
	if _, ok := d.executing[j.ID]; ok {
		return false // running already: held by a proxy attempt, or this is a second copy
	}
	d.executing[j.ID] = execInfo{lane: j.ReadyQueue, seq: j.ReadySeq}
	return true
}

// ClaimCancel reserves id for cancellation: from now on no dispatch of it
// starts. It fails if an attempt is already running.
func (d *Dispatcher) ClaimCancel(id domain.JobID) error {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	if _, ok := d.executing[id]; ok {
		return ErrAlreadyDispatched
	}
	d.canceled[id] = cancelMark{at: d.cfg.Clock.Now()}
	return nil
}

// ReleaseCancel undoes claimCancel when the cancellation could not be
// recorded.
func (d *Dispatcher) ReleaseCancel(id domain.JobID) {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	delete(d.canceled, id)
}

// isCanceled reports whether j is a dispatch of a cancelled job.
func (d *Dispatcher) isCanceled(j *domain.Job) bool {
	if j.Phase() != domain.PhaseDispatch {
		return false // its webhook delivery still goes out
	}
	d.execMu.Lock()
	defer d.execMu.Unlock()
	return d.canceled[j.ID].covers(j)
}

// PruneCanceled forgets cancellations older than cancelHold.
func (d *Dispatcher) PruneCanceled(now time.Time) {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	for id, m := range d.canceled {
		if now.Sub(m.at) > cancelHold {
			delete(d.canceled, id)
		}
	}
}

// FinishCanceled records j as cancelled and has its lane drop any copy it
// holds.
func (d *Dispatcher) FinishCanceled(ctx context.Context, j *domain.Job) error {
	if err := d.CommitFinish(ctx, j, domain.StatusFailed, j.Attempts, &domain.Result{Reason: domain.ReasonCanceled}); err != nil {
		return err
	}
	d.dropFromLane(ctx, j)
	return nil
}

// FailWaiting fails j, which waited for dispatch (queued, scheduled, or
// waiting to retry), with reason and without sending it, as a cancellation
// does: from the claim on no attempt of it starts, and its lane drops any
// copy. It returns ErrAlreadyDispatched if an attempt is running, and a
// conflict if the job finished (or started elsewhere) before the claim.
func (d *Dispatcher) FailWaiting(ctx context.Context, j *domain.Job, reason string) error {
	if err := d.ClaimCancel(j.ID); err != nil {
		return err
	}
	// A dispatch that ended before the claim has committed its result
	// (EndDispatch comes after it): read the job again to see it.
	cur, err := d.cfg.Store.Get(ctx, j.ID)
	if err == nil && cur.Status != domain.StatusQueued {
		err = &domain.Error{Code: domain.CodeConflict, Message: "job is no longer waiting (" + string(cur.Status) + ")"}
	}
	if err == nil {
		err = d.CommitFinish(ctx, cur, domain.StatusFailed, cur.Attempts, &domain.Result{Reason: reason})
	}
	if err != nil {
		d.ReleaseCancel(j.ID)
		return err
	}
	d.dropFromLane(ctx, j)
	return nil
}

// dropFromLane has j's lane forget any copy of j it holds. If ctx ends
// first, the lane still drops it when it reaches it (isCanceled).
func (d *Dispatcher) dropFromLane(ctx context.Context, j *domain.Job) {
	d.mu.RLock()
	l := d.lanes[j.Queue.Upstream()]
	d.mu.RUnlock()
	if l != nil {
		select {
		case l.drops <- j.ID:
		case <-l.quit:
		case <-ctx.Done():
		}
	}
}

// EndDispatch marks j's dispatch attempt as over.
func (d *Dispatcher) EndDispatch(id domain.JobID) {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	delete(d.executing, id)
}

// ExecutingAhead counts running dispatch attempts of lane ahead of seq that
// the store still counts as waiting (not recorded as in_flight).
func (d *Dispatcher) ExecutingAhead(lane domain.QueueKey, seq int64) int {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	n := 0
	for _, e := range d.executing {
		if e.lane == lane && e.seq < seq && !e.recorded {
			n++
		}
	}
	return n
}

// recordedInFlight notes that the store has id's running attempt as
// in_flight.
func (d *Dispatcher) recordedInFlight(id domain.JobID) {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	if e, ok := d.executing[id]; ok {
		e.recorded = true
		d.executing[id] = e
	}
}

func (d *Dispatcher) Executing(id domain.JobID) bool {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	_, ok := d.executing[id]
	return ok
}

func (d *Dispatcher) ExecutingSet() map[domain.JobID]bool {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	out := make(map[domain.JobID]bool, len(d.executing))
	for id := range d.executing {
		out[id] = true
	}
	return out
}

func (d *Dispatcher) ExecutingCount() int {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	return len(d.executing)
}

// after returns a channel that fires after dur on the configured clock, and a
// Stop function.
func (d *Dispatcher) after(dur time.Duration) (<-chan time.Time, func()) {
	t := d.cfg.Clock.NewTimer(dur)
	return t.C(), func() { t.Stop() }
}

// SetActive switches u's lane on (this process took its lease; the pace
// continues from st when it was saved) or off (the lease is lost or being
// given up: buffered work is forgotten, running attempts finish), creating
// the lane if needed. It returns false if the dispatcher is stopping.
func (d *Dispatcher) SetActive(u domain.UpstreamKey, on bool, st ports.LaneState) bool {
	d.mu.Lock()
	if d.stopping {
		d.mu.Unlock()
		return false
	}
	var l *lane
	if on {
		l = d.laneLocked(u)
	} else if l = d.lanes[u]; l == nil {
		d.mu.Unlock()
		return true
	}
	d.mu.Unlock()
	fn := l.deactivate
	if on {
		if st.Saved {
			d.modes.Store(u, st.AccountQueues)
		}
		fn = func() { l.activate(st) }
	}
	select {
	case l.ctl <- fn:
	case <-l.quit:
	}
	return true
}

// LaneState is what u's lane learned — its pace and account-queue mode —
// to save with its lease for the next holder.
func (d *Dispatcher) LaneState(u domain.UpstreamKey) ports.LaneState {
	st := ports.LaneState{AccountQueues: d.AccountQueues(u)}
	d.mu.RLock()
	l := d.lanes[u]
	d.mu.RUnlock()
	if l != nil {
		ls := l.stats()
		if ls.RPS > 0 && ls.MaxConcurrent > 0 {
			st.Saved, st.RPS, st.MaxConcurrent = true, ls.RPS, ls.MaxConcurrent
		}
	}
	if _, ok := d.modes.Load(u); ok {
		st.Saved = true
	}
	return st
}

// AccountQueues reports whether upstream u is in account-queue mode (one
// queue per tenant).
func (d *Dispatcher) AccountQueues(u domain.UpstreamKey) bool {
	on, _ := d.modes.Load(u)
	return on == true
}

// SetAccountQueues switches upstream u's account-queue mode, for every
// later job to it.
func (d *Dispatcher) SetAccountQueues(u domain.UpstreamKey, on bool) { d.modes.Store(u, on) }

// HeldElsewhere names the live process dispatching u, when it is not this
// one ("" otherwise, or when nobody holds it).
func (d *Dispatcher) HeldElsewhere(u domain.UpstreamKey) string { return d.owner.HeldElsewhere(u) }

// Holds reports whether this process dispatches u.
func (d *Dispatcher) Holds(u domain.UpstreamKey) bool { return d.owner.Holds(u) }

// Clock is the dispatcher's clock.
func (d *Dispatcher) Clock() ports.Clock { return d.cfg.Clock }

// RequestTimeout bounds one outbound exchange, body included.
func (d *Dispatcher) RequestTimeout() time.Duration { return d.cfg.RequestTimeout }

// MaxResponseBytes is how much of a response body is kept as a result.
func (d *Dispatcher) MaxResponseBytes() int64 { return d.cfg.MaxResponseBytes }

// Clustered reports whether lanes follow an Ownership (cluster mode): then
// other processes read the store, not this one's memory.
func (d *Dispatcher) Clustered() bool { return d.clustered }

// TraceAttempt begins the span of a direct (proxied) first attempt of j's
// dispatch at start and returns the traceparent to send with it and the
// function that ends the span (see ports.Tracer.Attempt).
func (d *Dispatcher) TraceAttempt(j *domain.Job, start time.Time) (string, func(status int, reason string, at time.Time)) {
	return d.cfg.Tracer.Attempt(j, false, 1, start)
}
