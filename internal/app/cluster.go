package app

import (
	"context"
	"hash/fnv"
	"math"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// ClusterConfig turns on and tunes cluster mode: several processes sharing
// one store, each lane dispatched by one process at a time.
type ClusterConfig struct {
	// Peers are the roles the shared store plays (lane leases, messages
	// between the processes, shared pool members). Unset: this process is
	// the only one on its store.
	Peers ports.Cluster

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

func (c ClusterConfig) withDefaults() ClusterConfig {
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

// clusterState is this process's view of the lanes it holds.
type clusterState struct {
	c   ports.Cluster // every role set
	cfg ClusterConfig
	log *zap.Logger

	// kick asks for a lease sync now: work arrived for a lane nobody holds.
	kick chan struct{}

	mu        sync.Mutex
	held      map[domain.UpstreamKey]bool      // leases held and dispatching
	releasing map[domain.UpstreamKey]time.Time // given up, waiting for running attempts; still renewed
	lastOK    time.Time                        // start of the last successful sync
	instances []ports.Instance
	syncs     int
}

func newClusterState(c ports.Cluster, cfg ClusterConfig, log *zap.Logger) *clusterState {
	return &clusterState{c: c, cfg: cfg.withDefaults(), log: log.Named("cluster"), kick: make(chan struct{}, 1),
		held: map[domain.UpstreamKey]bool{}, releasing: map[domain.UpstreamKey]time.Time{}}
}

// fresh reports whether this process's leases are certainly still valid at
// now: a lease lasts LeaseTTL from (at least) the start of the last
// successful sync, less a margin for clock drift and scheduling. A lane whose
// lease is not fresh starts no attempt.
func (cs *clusterState) fresh(now time.Time) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return !cs.lastOK.IsZero() && now.Before(cs.lastOK.Add(cs.cfg.LeaseTTL-cs.cfg.SyncInterval/2))
}

func (cs *clusterState) holds(u domain.UpstreamKey) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.held[u]
}

// holds reports whether this process dispatches upstream u: always for a
// store it owns alone, otherwise only while it holds u's lease.
func (d *dispatcher) holds(u domain.UpstreamKey) bool {
	return d.cluster == nil || d.cluster.holds(u)
}

// heldElsewhere names the live process holding u's lease, if it is not
// this one ("" otherwise, or when nobody holds it).
func (d *dispatcher) heldElsewhere(u domain.UpstreamKey) string {
	if d.cluster == nil || d.cluster.holds(u) {
		return ""
	}
	d.cluster.mu.Lock()
	defer d.cluster.mu.Unlock()
	for _, in := range d.cluster.instances {
		for _, l := range in.Lanes {
			if l == u && in.ID != d.cluster.c.Leases.InstanceID() {
				return in.ID
			}
		}
	}
	return ""
}

// publish tells local subscribers about ev and, with a shared store, the
// other processes (without the result, which they load from the store).
func (d *dispatcher) publish(ev domain.Event) {
	d.broker.Publish(ev)
	if d.cluster != nil {
		ev.Result = nil
		d.cluster.c.Bus.Broadcast(ports.ClusterMessage{Events: []domain.Event{ev}})
	}
}

// workElsewhere tells the holder of j's lane (another process) about work
// it may not have seen.
func (d *dispatcher) workElsewhere(j *domain.Job) {
	if d.heldElsewhere(j.ReadyQueue.Upstream()) == "" {
		// Nobody dispatches this lane yet: take it now rather than at the
		// next periodic sync.
		select {
		case d.cluster.kick <- struct{}{}:
		default:
		}
	}
	d.cluster.c.Bus.Broadcast(ports.ClusterMessage{Work: []ports.WorkNotice{{Queue: j.ReadyQueue, ReadySeq: j.ReadySeq}}})
}

// leaseLoop syncs leases every SyncInterval, and at once when kicked.
func (s *Service) leaseLoop(ctx context.Context) {
	cs := s.d.cluster
	for {
		c, stop := s.d.after(cs.cfg.SyncInterval)
		select {
		case <-ctx.Done():
			stop()
			return
		case <-c:
		case <-cs.kick:
			stop()
		}
		s.syncLeases(ctx)
		// Kicks come with every job for a lane nobody holds; a sync costs a
		// few queries, so take at most ten a second.
		c, stop = s.d.after(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			stop()
			return
		case <-c:
		}
	}
}

// setActive switches u's lane on (with the saved state) or off, creating it
// if needed. It returns false if the dispatcher is stopping.
func (d *dispatcher) setActive(u domain.UpstreamKey, on bool, st ports.LaneState) bool {
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
		fn = func() { l.activate(st) }
	}
	select {
	case l.ctl <- fn:
	case <-l.quit:
	}
	return true
}

// laneState is what u's lane learned, to save with its lease.
func (s *Service) laneState(u domain.UpstreamKey) ports.LaneState {
	st := ports.LaneState{AccountQueues: s.AccountQueues(u)}
	s.d.mu.RLock()
	l := s.d.lanes[u]
	s.d.mu.RUnlock()
	if l != nil {
		ls := l.stats()
		if ls.RPS > 0 && ls.MaxConcurrent > 0 {
			st.Saved, st.RPS, st.MaxConcurrent = true, ls.RPS, ls.MaxConcurrent
		}
	}
	if _, ok := s.modes.Load(u); ok {
		st.Saved = true
	}
	return st
}

// syncLeases renews this process's lane leases, takes free lanes with work
// up to a fair share, gives up lanes beyond it, and fences itself off
// (stops dispatching everything) when it cannot reach the store for longer
// than a lease lasts.
func (s *Service) syncLeases(ctx context.Context) {
	cs := s.d.cluster
	start := s.cfg.Clock.Now()
	lanes, err := s.cfg.Store.ReadyQueues(ctx)
	if err != nil {
		s.leaseSyncFailed(start, err)
		return
	}
	byUp := map[domain.UpstreamKey][]domain.QueueKey{}
	for _, l := range lanes {
		byUp[l.Upstream()] = append(byUp[l.Upstream()], l)
	}
	instances, err := cs.c.Leases.Instances(ctx)
	if err != nil {
		s.leaseSyncFailed(start, err)
		return
	}

	cs.mu.Lock()
	var held []ports.LaneLease
	heldSet := map[domain.UpstreamKey]bool{}
	for u := range cs.held {
		heldSet[u] = true
	}
	for u := range cs.releasing {
		heldSet[u] = true
	}
	cs.mu.Unlock()
	for u := range heldSet {
		held = append(held, ports.LaneLease{Upstream: u, State: s.laneState(u)})
	}
	// Fair share: the lanes with work (or held) spread over the live
	// processes. Each process tries lanes in its own order, so they do not
	// all race for the same one first.
	all := map[domain.UpstreamKey]bool{}
	for u := range byUp {
		all[u] = true
	}
	for u := range heldSet {
		all[u] = true
	}
	owned := 0
	for _, in := range instances {
		owned += len(in.Lanes)
	}
	all2 := max(len(all), owned)
	share := max(1, int(math.Ceil(float64(all2)/float64(max(len(instances), 1)))))
	want := make([]domain.UpstreamKey, 0, len(byUp))
	for u := range byUp {
		want = append(want, u)
	}
	me := cs.c.Leases.InstanceID()
	sort.Slice(want, func(i, j int) bool { return spread(me, want[i]) < spread(me, want[j]) })

	res, err := cs.c.Leases.SyncLeases(ctx, &ports.SyncLeasesParams{Want: want, Held: held, Max: share, TTL: cs.cfg.LeaseTTL})
	if err != nil {
		s.leaseSyncFailed(start, err)
		return
	}
	now := s.cfg.Clock.Now()
	got := map[domain.UpstreamKey]ports.LaneState{}
	for _, l := range res {
		got[l.Upstream] = l.State
	}

	cs.mu.Lock()
	cs.lastOK, cs.instances = start, instances
	cs.syncs++
	rewind := cs.syncs%cs.cfg.RewindEvery == 0
	var taken, lost []domain.UpstreamKey
	for u := range got {
		if !cs.held[u] && cs.releasing[u].IsZero() {
			taken = append(taken, u)
		}
	}
	for u := range heldSet {
		if _, ok := got[u]; !ok {
			lost = append(lost, u)
			delete(cs.held, u)
			delete(cs.releasing, u)
		}
	}
	// Beyond the fair share: give up the lanes with the least waiting work.
	var extra []domain.UpstreamKey
	if n := len(cs.held) + len(taken) - share; n > 0 {
		cands := make([]domain.UpstreamKey, 0, len(cs.held))
		for u := range cs.held {
			cands = append(cands, u)
		}
		sort.Slice(cands, func(i, j int) bool { return len(byUp[cands[i]]) < len(byUp[cands[j]]) })
		extra = cands[:min(n, len(cands))]
		for _, u := range extra {
			delete(cs.held, u)
			cs.releasing[u] = now
		}
	}
	// Held lanes with nothing to do and no local lane are given up too.
	var idle []domain.UpstreamKey
	for u := range cs.held {
		if len(byUp[u]) == 0 && !s.d.hasLane(u) {
			idle = append(idle, u)
			delete(cs.held, u)
		}
	}
	// Lanes being given up are released once their attempts are done.
	var release []ports.LaneLease
	for u, since := range cs.releasing {
		if s.d.running(u) == 0 || now.Sub(since) > cs.cfg.ReleaseWait {
			release = append(release, ports.LaneLease{Upstream: u, State: s.laneState(u)})
			delete(cs.releasing, u)
		}
	}
	for _, u := range idle {
		release = append(release, ports.LaneLease{Upstream: u, State: s.laneState(u)})
	}
	cs.mu.Unlock()

	for _, u := range lost {
		s.log.Warn("lane lease lost: another process dispatches it now", zap.String("lane", string(u)))
		s.d.setActive(u, false, ports.LaneState{})
	}
	for _, u := range extra {
		s.log.Info("giving up a lane to balance load", zap.String("lane", string(u)))
		s.d.setActive(u, false, ports.LaneState{})
	}
	if len(release) > 0 {
		if err := cs.c.Leases.ReleaseLeases(ctx, release); err != nil {
			s.log.Warn("releasing lane leases failed; they expire by themselves", zap.Error(err))
		}
	}
	for _, u := range taken {
		s.takeLane(ctx, u, got[u], byUp[u])
	}
	if rewind {
		for u := range got {
			if !cs.holds(u) {
				continue
			}
			// A process that died holding work in flight is only known dead
			// once its liveness lease lapses, which may be after we took its
			// lanes: look again now and then.
			if n, err := cs.c.Leases.RecoverLane(ctx, u); err == nil && n > 0 {
				s.log.Info("recovered in-flight work of a process that died", zap.String("lane", string(u)), zap.Int("jobs", n))
			}
			for _, l := range byUp[u] {
				s.d.notify(l, true)
			}
		}
	}
}

// takeLane starts dispatching a lane whose lease this process just took:
// work a dead process left in flight goes back to the queue, the saved pace
// and account-queue mode are restored, and every queue is read from the
// start.
func (s *Service) takeLane(ctx context.Context, u domain.UpstreamKey, st ports.LaneState, lanes []domain.QueueKey) {
	cs := s.d.cluster
	n, err := cs.c.Leases.RecoverLane(ctx, u)
	if err != nil {
		s.log.Warn("recovering a taken-over lane's in-flight work failed; the stale sweep will", zap.String("lane", string(u)), zap.Error(err))
	}
	if st.Saved {
		s.modes.Store(u, st.AccountQueues)
	}
	cs.mu.Lock()
	cs.held[u] = true
	cs.mu.Unlock()
	if !s.d.setActive(u, true, st) {
		return
	}
	for _, l := range lanes {
		s.d.notify(l, true)
	}
	s.log.Info("lane lease taken", zap.String("lane", string(u)), zap.Int("in_flight_recovered", n),
		zap.Bool("pace_restored", st.Saved), zap.Float64("rps", st.RPS))
}

func (s *Service) leaseSyncFailed(start time.Time, err error) {
	cs := s.d.cluster
	cs.mu.Lock()
	fenced := !cs.lastOK.IsZero() && start.Sub(cs.lastOK) > cs.cfg.LeaseTTL-cs.cfg.SyncInterval/2
	var drop []domain.UpstreamKey
	if fenced {
		for u := range cs.held {
			drop = append(drop, u)
		}
		clear(cs.held)
		clear(cs.releasing)
	}
	cs.mu.Unlock()
	s.log.Warn("lane lease sync failed", zap.Error(err), zap.Bool("fenced", fenced))
	for _, u := range drop {
		// Our leases may have expired: stop before another process starts.
		s.d.setActive(u, false, ports.LaneState{})
	}
}

// releaseAllLeases gives every lane up at shutdown, so other processes take
// over at once instead of a lease later.
func (s *Service) releaseAllLeases(ctx context.Context) {
	cs := s.d.cluster
	cs.mu.Lock()
	var rel []ports.LaneLease
	for u := range cs.held {
		rel = append(rel, ports.LaneLease{Upstream: u})
	}
	for u := range cs.releasing {
		rel = append(rel, ports.LaneLease{Upstream: u})
	}
	clear(cs.held)
	clear(cs.releasing)
	cs.mu.Unlock()
	for i := range rel {
		rel[i].State = s.laneState(rel[i].Upstream)
	}
	if len(rel) > 0 {
		if err := cs.c.Leases.ReleaseLeases(ctx, rel); err != nil {
			s.log.Warn("releasing lane leases at shutdown failed; they expire by themselves", zap.Error(err))
		}
	}
}

// spread orders lanes differently for each process.
func spread(instance string, u domain.UpstreamKey) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(instance))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(u))
	return h.Sum64()
}

// onClusterMessage handles what other processes broadcast: work for lanes
// this process holds, job events for local subscribers, pool changes.
func (s *Service) onClusterMessage(ctx context.Context, m ports.ClusterMessage) {
	for _, w := range m.Work {
		if s.d.holds(w.Queue.Upstream()) {
			s.d.notifyFrom(w.Queue, w.ReadySeq-1)
		}
	}
	for _, ev := range m.Events {
		if !s.broker.HasSubscribers(ev.JobID) {
			continue
		}
		if ev.Type.Terminal() && ev.Result == nil {
			if j, err := s.cfg.Store.Get(ctx, ev.JobID); err == nil {
				ev.Result = j.Result
			}
		}
		s.broker.deliver(ev)
	}
	if len(m.Pools) > 0 {
		select {
		case s.poolKick <- struct{}{}:
		default:
		}
	}
}

// ClusterHealth is the multi-instance section of /health.
type ClusterHealth struct {
	InstanceID string          `json:"instance_id"`
	Lanes      []string        `json:"lanes"` // lanes this instance dispatches
	Instances  []InstanceLanes `json:"instances"`
}

// InstanceLanes is one live instance and the lanes it dispatches.
type InstanceLanes struct {
	ID    string   `json:"id"`
	Lanes []string `json:"lanes"`
}

func (s *Service) clusterHealth() *ClusterHealth {
	cs := s.d.cluster
	cs.mu.Lock()
	defer cs.mu.Unlock()
	h := &ClusterHealth{InstanceID: cs.c.Leases.InstanceID(), Lanes: []string{}, Instances: []InstanceLanes{}}
	for u := range cs.held {
		h.Lanes = append(h.Lanes, string(u))
	}
	sort.Strings(h.Lanes)
	for _, in := range cs.instances {
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
