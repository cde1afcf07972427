// Package lease lets several processes share one store as one service:
// each lane (upstream) is dispatched by exactly one process at a time, the
// holder of its lease, so the upstream's pace is global. Leases are synced
// every SyncInterval: held ones renewed, free ones with work taken up to a
// fair share, the rest given up; a process that cannot reach the store for
// longer than a lease lasts stops dispatching (fences itself).
//
// The decisions are a pure plan (plan.go); Leases applies them: it talks to
// the store's LeaseStore and MessageBus and switches the dispatcher's lanes
// through the small Lanes interface it declares. Leases is the dispatcher's
// Ownership in cluster mode.
package lease

import (
	"context"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Config tunes lane leases.
type Config struct {
	// LeaseTTL is how long a lane lease lasts without renewal: the longest a
	// dead process's lanes stay without a dispatcher. Default 3s.
	LeaseTTL time.Duration
	// SyncInterval is how often leases are renewed and free lanes taken.
	// Default 1s (must be well under LeaseTTL).
	SyncInterval time.Duration
	// RewindEvery re-reads held lanes from the start every this many syncs,
	// a safety net for work notices that were lost. Default 5.
	RewindEvery int
	// ReleaseWait bounds how long a lane given up for rebalancing waits for
	// its running attempts before its lease is released anyway. Default 30s.
	ReleaseWait time.Duration
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 3 * time.Second
	}
	if c.SyncInterval <= 0 {
		c.SyncInterval = time.Second
	}
	if c.RewindEvery <= 0 {
		c.RewindEvery = 5
	}
	if c.ReleaseWait <= 0 {
		c.ReleaseWait = 30 * time.Second
	}
	return c
}

// Lanes is the dispatcher as leases drive it (dispatch.Dispatcher).
type Lanes interface {
	// SetActive switches u's lane on (with the state its previous holder
	// saved) or off; false if the dispatcher is stopping.
	SetActive(u domain.UpstreamKey, on bool, st ports.LaneState) bool
	// LaneState is what u's lane learned, to save with its lease.
	LaneState(u domain.UpstreamKey) ports.LaneState
	// Running is how many attempts u's lane has running.
	Running(u domain.UpstreamKey) int
	// HasLane reports whether u has a lane in this process.
	HasLane(u domain.UpstreamKey) bool
	// Notify tells the lane of q's upstream that the store may hold work
	// for q it has not read (rewind: from the start).
	Notify(q domain.QueueKey, rewind bool)
}

// Leases holds this process's lane leases.
type Leases struct {
	cfg   Config
	store ports.LeaseStore
	bus   ports.MessageBus
	jobs  ports.JobStore // ReadyQueues: which lanes have work
	clock ports.Clock
	log   *zap.Logger
	lanes Lanes

	// kick asks for a sync now: work arrived for a lane nobody holds.
	kick chan struct{}

	mu        sync.Mutex
	held      map[domain.UpstreamKey]bool      // leases held and dispatching
	releasing map[domain.UpstreamKey]time.Time // given up, waiting for running attempts; still renewed
	lastOK    time.Time                        // start of the last successful sync
	instances []ports.Instance
	syncs     int
}

// New returns the leases of a process; Bind gives them the lanes they
// drive (the dispatcher is built with the Leases as its Ownership).
func New(cfg Config, store ports.LeaseStore, bus ports.MessageBus, jobs ports.JobStore, clock ports.Clock, log *zap.Logger) *Leases {
	return &Leases{cfg: cfg.WithDefaults(), store: store, bus: bus, jobs: jobs, clock: clock, log: log.Named("cluster"),
		kick: make(chan struct{}, 1), held: map[domain.UpstreamKey]bool{}, releasing: map[domain.UpstreamKey]time.Time{}}
}

// Bind sets the lanes the leases switch on and off. Call it once, before
// Sync or Loop.
func (l *Leases) Bind(lanes Lanes) { l.lanes = lanes }

// Holds implements dispatch.Ownership.
func (l *Leases) Holds(u domain.UpstreamKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[u]
}

// Fresh implements dispatch.Ownership: this process's leases are certainly
// still valid at now — a lease lasts LeaseTTL from (at least) the start of
// the last successful sync, less a margin for clock drift and scheduling.
func (l *Leases) Fresh(now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.lastOK.IsZero() && now.Before(l.lastOK.Add(l.cfg.LeaseTTL-l.cfg.SyncInterval/2)), l.cfg.SyncInterval / 2
}

// HeldElsewhere implements dispatch.Ownership.
func (l *Leases) HeldElsewhere(u domain.UpstreamKey) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[u] {
		return ""
	}
	for _, in := range l.instances {
		for _, x := range in.Lanes {
			if x == u && in.ID != l.store.InstanceID() {
				return in.ID
			}
		}
	}
	return ""
}

// WorkElsewhere implements dispatch.Ownership: the holder of j's lane hears
// of it; a lane nobody holds is taken now rather than at the next sync.
func (l *Leases) WorkElsewhere(j *domain.Job) {
	if l.HeldElsewhere(j.ReadyQueue.Upstream()) == "" {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	l.bus.Broadcast(ports.ClusterMessage{Work: []ports.WorkNotice{{Queue: j.ReadyQueue, ReadySeq: j.ReadySeq}}})
}

// Loop syncs leases every SyncInterval, and at once when kicked (at most
// ten times a second), until ctx ends.
func (l *Leases) Loop(ctx context.Context) {
	for {
		t := l.clock.NewTimer(l.cfg.SyncInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-l.kick:
			t.Stop()
		}
		l.Sync(ctx)
		// Kicks come with every job for a lane nobody holds; a sync costs a
		// few queries, so take at most ten a second.
		t = l.clock.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// Sync renews this process's lane leases, takes free lanes with work up to
// a fair share, gives up lanes beyond it, and fences itself off (stops
// dispatching everything) when it cannot reach the store for longer than a
// lease lasts.
func (l *Leases) Sync(ctx context.Context) {
	start := l.clock.Now()
	queues, err := l.jobs.ReadyQueues(ctx)
	if err != nil {
		l.syncFailed(start, err)
		return
	}
	byUp := map[domain.UpstreamKey][]domain.QueueKey{}
	withWork := map[domain.UpstreamKey]int{}
	for _, q := range queues {
		byUp[q.Upstream()] = append(byUp[q.Upstream()], q)
		withWork[q.Upstream()]++
	}
	instances, err := l.store.Instances(ctx)
	if err != nil {
		l.syncFailed(start, err)
		return
	}
	l.mu.Lock()
	heldBefore, releasingBefore := clone(l.held), cloneTimes(l.releasing)
	l.mu.Unlock()
	all := clone(heldBefore)
	for u := range releasingBefore {
		all[u] = true
	}
	byInstance := map[string][]domain.UpstreamKey{}
	for _, in := range instances {
		byInstance[in.ID] = in.Lanes
	}
	want, share := ask(askInput{Me: l.store.InstanceID(), WithWork: withWork, Held: all, Instances: byInstance})
	renew := make([]ports.LaneLease, 0, len(all))
	for u := range all {
		renew = append(renew, ports.LaneLease{Upstream: u, State: l.lanes.LaneState(u)})
	}
	res, err := l.store.SyncLeases(ctx, &ports.SyncLeasesParams{Want: want, Held: renew, Max: share, TTL: l.cfg.LeaseTTL})
	if err != nil {
		l.syncFailed(start, err)
		return
	}
	got := map[domain.UpstreamKey]bool{}
	states := map[domain.UpstreamKey]ports.LaneState{}
	for _, x := range res {
		got[x.Upstream], states[x.Upstream] = true, x.State
	}
	plan := settle(settleInput{Now: l.clock.Now(), Share: share, WithWork: withWork, Got: got, Held: heldBefore,
		Releasing: releasingBefore, Running: l.lanes.Running, HasLane: l.lanes.HasLane, ReleaseWait: l.cfg.ReleaseWait})

	l.mu.Lock()
	l.lastOK, l.instances = start, instances
	l.syncs++
	rewind := l.syncs%l.cfg.RewindEvery == 0
	l.held, l.releasing = plan.Held, plan.Releasing
	l.mu.Unlock()

	for _, u := range plan.Lost {
		l.log.Warn("lane lease lost: another process dispatches it now", zap.String("lane", string(u)))
		l.lanes.SetActive(u, false, ports.LaneState{})
	}
	for _, u := range plan.Extra {
		l.log.Info("giving up a lane to balance load", zap.String("lane", string(u)))
		l.lanes.SetActive(u, false, ports.LaneState{})
	}
	if len(plan.Release) > 0 {
		rel := make([]ports.LaneLease, len(plan.Release))
		for i, u := range plan.Release {
			rel[i] = ports.LaneLease{Upstream: u, State: l.lanes.LaneState(u)}
		}
		if err := l.store.ReleaseLeases(ctx, rel); err != nil {
			l.log.Warn("releasing lane leases failed; they expire by themselves", zap.Error(err))
		}
	}
	for _, u := range plan.Taken {
		l.take(ctx, u, states[u], byUp[u])
	}
	if rewind {
		for u := range got {
			if !l.Holds(u) {
				continue
			}
			// A process that died holding work in flight is only known dead
			// once its liveness lease lapses, which may be after we took its
			// lanes: look again now and then.
			if n, err := l.store.RecoverLane(ctx, u); err == nil && n > 0 {
				l.log.Info("recovered in-flight work of a process that died", zap.String("lane", string(u)), zap.Int("jobs", n))
			}
			for _, q := range byUp[u] {
				l.lanes.Notify(q, true)
			}
		}
	}
}

// take starts dispatching a lane whose lease this process just took: work a
// dead process left in flight goes back to the queue, the saved pace and
// account-queue mode are restored, and every queue is read from the start.
func (l *Leases) take(ctx context.Context, u domain.UpstreamKey, st ports.LaneState, queues []domain.QueueKey) {
	n, err := l.store.RecoverLane(ctx, u)
	if err != nil {
		l.log.Warn("recovering a taken-over lane's in-flight work failed; the stale sweep will", zap.String("lane", string(u)), zap.Error(err))
	}
	l.mu.Lock()
	l.held[u] = true
	l.mu.Unlock()
	if !l.lanes.SetActive(u, true, st) {
		return
	}
	for _, q := range queues {
		l.lanes.Notify(q, true)
	}
	l.log.Info("lane lease taken", zap.String("lane", string(u)), zap.Int("in_flight_recovered", n),
		zap.Bool("pace_restored", st.Saved), zap.Float64("rps", st.RPS))
}

func (l *Leases) syncFailed(start time.Time, err error) {
	l.mu.Lock()
	fenced := !l.lastOK.IsZero() && start.Sub(l.lastOK) > l.cfg.LeaseTTL-l.cfg.SyncInterval/2
	var drop []domain.UpstreamKey
	if fenced {
		for u := range l.held {
			drop = append(drop, u)
		}
		clear(l.held)
		clear(l.releasing)
	}
	l.mu.Unlock()
	l.log.Warn("lane lease sync failed", zap.Error(err), zap.Bool("fenced", fenced))
	for _, u := range drop {
		// Our leases may have expired: stop before another process starts.
		l.lanes.SetActive(u, false, ports.LaneState{})
	}
}

// ReleaseAll gives every lane up at shutdown, so other processes take over
// at once instead of a lease later.
func (l *Leases) ReleaseAll(ctx context.Context) {
	l.mu.Lock()
	var rel []ports.LaneLease
	for u := range l.held {
		rel = append(rel, ports.LaneLease{Upstream: u})
	}
	for u := range l.releasing {
		rel = append(rel, ports.LaneLease{Upstream: u})
	}
	clear(l.held)
	clear(l.releasing)
	l.mu.Unlock()
	for i := range rel {
		rel[i].State = l.lanes.LaneState(rel[i].Upstream)
	}
	if len(rel) > 0 {
		if err := l.store.ReleaseLeases(ctx, rel); err != nil {
			l.log.Warn("releasing lane leases at shutdown failed; they expire by themselves", zap.Error(err))
		}
	}
}

// InstanceID is this process's name among those sharing the store.
func (l *Leases) InstanceID() string { return l.store.InstanceID() }

// Health is the multi-instance section of /health.
type Health struct {
	InstanceID string          `json:"instance_id"`
	Lanes      []string        `json:"lanes"` // lanes this instance dispatches
	Instances  []InstanceLanes `json:"instances"`
}

// InstanceLanes is one live instance and the lanes it dispatches.
type InstanceLanes struct {
	ID    string   `json:"id"`
	Lanes []string `json:"lanes"`
}

// Health describes the leases as the last sync saw them.
func (l *Leases) Health() *Health {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := &Health{InstanceID: l.store.InstanceID(), Lanes: []string{}, Instances: []InstanceLanes{}}
	for u := range l.held {
		h.Lanes = append(h.Lanes, string(u))
	}
	sort.Strings(h.Lanes)
	for _, in := range l.instances {
		il := InstanceLanes{ID: in.ID, Lanes: []string{}}
		for _, u := range in.Lanes {
			il.Lanes = append(il.Lanes, string(u))
		}
		sort.Strings(il.Lanes)
		h.Instances = append(h.Instances, il)
	}
	sort.Slice(h.Instances, func(i, j int) bool { return h.Instances[i].ID < h.Instances[j].ID })
	return h
}

func clone(m map[domain.UpstreamKey]bool) map[domain.UpstreamKey]bool {
	out := make(map[domain.UpstreamKey]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneTimes(m map[domain.UpstreamKey]time.Time) map[domain.UpstreamKey]time.Time {
	out := make(map[domain.UpstreamKey]time.Time, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
