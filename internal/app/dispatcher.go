package app

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// dispatcher owns the lanes: it creates them on first use, starts and stops
// them, and collects idle ones. Lanes learn about new work only through
// notify; they read the work itself from the store.
type dispatcher struct {
	cfg    Config
	log    *zap.Logger
	broker *Broker

	mu       sync.Mutex
	lanes    map[domain.LaneKey]*lane
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
	executing map[domain.JobID]struct{}
}

func newDispatcher(cfg Config, broker *Broker) *dispatcher {
	d := &dispatcher{
		cfg:       cfg,
		log:       cfg.Logger.Named("dispatch"),
		broker:    broker,
		lanes:     make(map[domain.LaneKey]*lane),
		executing: make(map[domain.JobID]struct{}),
		workers:   newWorkers(30 * time.Second),
	}
	d.loopCtx, d.stopLoops = context.WithCancel(context.Background())
	d.runCtx, d.abortRuns = context.WithCancel(context.Background())
	return d
}

// notify tells the lane that the store may hold new queued jobs for it,
// creating the lane if needed. rewind makes the lane re-read the store from
// the start, for jobs put back to queued behind its cursor.
func (d *dispatcher) notify(key domain.LaneKey, rewind bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return // the job is durable; the next start recovers it
	}
	l := d.laneLocked(key)
	if rewind {
		l.rewind.Store(true)
	}
	l.poke()
}

// offer hands a just-committed job to its lane, creating the lane if needed.
// If the lane's buffer is full the job is left for the lane to read from the
// store.
func (d *dispatcher) offer(j *domain.Job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return
	}
	l := d.laneLocked(j.ReadyLane)
	select {
	case l.offers <- j:
	default:
		l.lowerFloor(j.ReadySeq)
		l.poke()
	}
}

func (d *dispatcher) laneLocked(key domain.LaneKey) *lane {
	l := d.lanes[key]
	if l == nil {
		l = newLane(d, key)
		d.lanes[key] = l
		if d.started {
			d.startLaneLocked(l)
		}
	}
	return l
}

func (d *dispatcher) start() {
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

func (d *dispatcher) startLaneLocked(l *lane) {
	d.lanesWG.Add(1)
	go func() {
		defer d.lanesWG.Done()
		l.run(d.loopCtx)
	}()
}

// stop stops dispatching, waits for running attempts until ctx ends, then
// aborts the rest. An aborted attempt leaves its job in_flight in the store;
// the next start puts it back in its lane.
func (d *dispatcher) stop(ctx context.Context) error {
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
func (d *dispatcher) removeIfIdle(l *lane) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(l.wake) > 0 || len(l.offers) > 0 || d.lanes[l.key] != l {
		return false
	}
	delete(d.lanes, l.key)
	return true
}

func (d *dispatcher) laneCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.lanes)
}

// LaneStats describes one lane for health and tests.
type LaneStats struct {
	Key           domain.LaneKey
	RPS           float64
	MaxConcurrent int
	InFlight      int
	Window        int
}

func (d *dispatcher) laneStats() []LaneStats {
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

func (d *dispatcher) markExecuting(id domain.JobID, on bool) {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	if on {
		d.executing[id] = struct{}{}
	} else {
		delete(d.executing, id)
	}
}

func (d *dispatcher) isExecuting(id domain.JobID) bool {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	_, ok := d.executing[id]
	return ok
}

func (d *dispatcher) executingSet() map[domain.JobID]bool {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	out := make(map[domain.JobID]bool, len(d.executing))
	for id := range d.executing {
		out[id] = true
	}
	return out
}

func (d *dispatcher) executingCount() int {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	return len(d.executing)
}

// after returns a channel that fires after dur on the configured clock, and a
// stop function.
func (d *dispatcher) after(dur time.Duration) (<-chan time.Time, func()) {
	t := d.cfg.Clock.NewTimer(dur)
	return t.C(), func() { t.Stop() }
}
