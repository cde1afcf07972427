package pool

import (
	"container/heap"
	"context"
	"math"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Pools with a shared store (several processes): membership lives in the
// store, so a member may register or heartbeat through any process. The
// process holding a pool's lane is the authority for its members' state —
// reputation, probation, pace, counters — which it folds in from dispatch
// outcomes and saves to the store; every other process mirrors what the
// store says, for GET /pools and /health.

// Shared is the registry in cluster mode: membership lives in the shared
// store, so a member may register or heartbeat through any process.
type Shared struct {
	reg     *Registry
	members ports.MemberStore
	bus     ports.MessageBus
	// holds reports whether this process holds a pool's lane: then it is
	// the authority for that pool's members.
	holds func(poolID string) bool
	every time.Duration
	clock ports.Clock
	log   *zap.Logger
	kick  chan struct{}
}

// NewShared returns reg kept in step with the shared store, synced every
// interval and whenever a process says a pool changed.
func NewShared(reg *Registry, members ports.MemberStore, bus ports.MessageBus, holds func(string) bool,
	every time.Duration, clock ports.Clock, log *zap.Logger) *Shared {
	return &Shared{reg: reg, members: members, bus: bus, holds: holds, every: every, clock: clock, log: log,
		kick: make(chan struct{}, 1)}
}

// Loop syncs pool membership every interval, and at once when kicked,
// until ctx ends.
func (s *Shared) Loop(ctx context.Context) {
	for {
		t := s.clock.NewTimer(s.every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-s.kick:
			t.Stop()
		}
		s.Sync(ctx)
	}
}

// Kick asks for a sync now (another process changed a pool).
func (s *Shared) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Sync merges the store's pool membership into the local registry and
// saves the state of the pools this process is the authority for.
func (s *Shared) Sync(ctx context.Context) {
	rows, err := s.members.Members(ctx, "")
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reading shared pool membership failed", zap.Error(err))
		}
		return
	}
	for _, m := range s.reg.Merge(rows, s.holds) {
		if _, err := s.members.DeleteMember(ctx, m.PoolID, m.MemberID); err != nil {
			s.log.Warn("removing an evicted pool member from the shared store failed", zap.Error(err))
		}
	}
	if states := s.reg.Export(s.holds); len(states) > 0 {
		if err := s.members.SaveMemberStates(ctx, states); err != nil {
			s.log.Warn("saving pool member state failed", zap.Error(err))
		}
	}
}

// Register records a registration or heartbeat in the shared store and has
// every process (this one included) pick it up at once.
func (s *Shared) Register(ctx context.Context, r *domain.MemberRegistration) (bool, error) {
	created, err := s.members.PutMember(ctx, &ports.PoolMember{PoolID: r.PoolID, MemberID: r.MemberID, Address: r.Address,
		CapacityRPS: r.CapacityRPS, HeartbeatInterval: r.HeartbeatInterval})
	if err != nil {
		return false, domain.StoreFailure("register pool member", err)
	}
	s.changed(r.PoolID)
	return created, nil
}

// Leave removes a member from the shared store.
func (s *Shared) Leave(ctx context.Context, poolID, memberID string) error {
	ok, err := s.members.DeleteMember(ctx, poolID, memberID)
	if err != nil {
		return domain.StoreFailure("remove pool member", err)
	}
	if !ok {
		return &domain.Error{Code: domain.CodeNotFound, Message: "no such pool member"}
	}
	s.changed(poolID)
	return nil
}

// Evicted removes members this process evicted ("pool/member") from the
// shared store.
func (s *Shared) Evicted(ctx context.Context, evicted []string) {
	for _, m := range evicted {
		pool, member, _ := strings.Cut(m, "/")
		if _, err := s.members.DeleteMember(ctx, pool, member); err != nil {
			s.log.Warn("removing an evicted pool member from the shared store failed", zap.Error(err))
		}
	}
}

func (s *Shared) changed(poolID string) {
	s.bus.Broadcast(ports.ClusterMessage{Pools: []string{poolID}})
	s.Kick()
}

// Merge folds the store's members into the registry. For pools held here
// (authority): new rows join, a newer LastSeen is a heartbeat, members gone
// from the store have left; rows of members this process evicted since
// their last heartbeat are returned for deletion. Other pools are replaced
// by the store's view.
func (p *Registry) Merge(rows []ports.PoolMember, holds func(string) bool) (stale []ports.PoolMember) {
	byPool := map[string][]ports.PoolMember{}
	for _, r := range rows {
		byPool[r.PoolID] = append(byPool[r.PoolID], r)
	}
	p.mu.Lock()
	var changed []string
	ids := map[string]bool{}
	for id := range byPool {
		ids[id] = true
	}
	for id := range p.byID {
		ids[id] = true
	}
	for id := range ids {
		authority := holds(id)
		pl := p.byID[id]
		if pl == nil {
			pl = &pool{id: id, members: map[string]*member{}}
			p.byID[id] = pl
		}
		seen := map[string]bool{}
		for _, r := range byPool[id] {
			key := id + "/" + r.MemberID
			if at, ok := p.evictedAt[key]; ok && !r.LastSeen.After(at) {
				stale = append(stale, r) // evicted here; the store has not heard yet
				continue
			}
			seen[r.MemberID] = true
			m := pl.members[r.MemberID]
			switch {
			case m == nil:
				m = p.memberFromRow(pl, r, authority)
				pl.members[m.id] = m
				heap.Push(&pl.heap, m)
				changed = append(changed, id)
			case authority && r.LastSeen.After(m.lastSeen):
				p.heartbeatLocked(m, r)
				changed = append(changed, id)
			case !authority:
				mirrorRow(m, r)
			}
		}
		for mid, m := range pl.members {
			if !seen[mid] {
				pl.remove(m) // left (or was evicted) through another process
				changed = append(changed, id)
			}
		}
		if len(pl.members) == 0 {
			delete(p.byID, id)
		}
	}
	p.mu.Unlock()
	for _, id := range dedupe(changed) {
		p.onChange(id)
	}
	return stale
}

// memberFromRow makes a registry member from a store row.
func (p *Registry) memberFromRow(pl *pool, r ports.PoolMember, authority bool) *member {
	m := newMember(r.MemberID, r.Address, r.CapacityRPS, r.HeartbeatInterval, r.LastSeen, pl.minVpos())
	if m.interval <= 0 {
		m.interval = domain.DefaultHeartbeatInterval
	}
	if r.Reputation > 0 {
		m.reputation, m.probation = r.Reputation, r.Probation
		m.picks, m.successes, m.failures = r.Picks, r.Successes, r.Failures
	} else if pr, ok := p.probation[pl.id+"/"+r.MemberID]; ok && authority && p.now().Before(pr.until) {
		m.reputation, m.probation = pr.rep, pr.rep // back soon after a failure eviction
	}
	if !authority {
		mirrorRow(m, r)
	}
	return m
}

// heartbeatLocked applies a heartbeat seen in the store (see register).
func (p *Registry) heartbeatLocked(m *member, r ports.PoolMember) {
	m.address, m.lastSeen = r.Address, r.LastSeen
	if r.HeartbeatInterval > 0 {
		m.interval = r.HeartbeatInterval
	}
	if m.declared != r.CapacityRPS {
		m.setCapacity(r.CapacityRPS)
	}
	ceiling := 1.0
	if m.probation > 0 {
		ceiling = max(m.reputation, m.probation)
	}
	m.reputation = math.Min(ceiling, m.reputation*repHeartbeat)
}

// mirrorRow copies the authority's saved state (a pool held elsewhere).
func mirrorRow(m *member, r ports.PoolMember) {
	m.address, m.declared, m.lastSeen = r.Address, r.CapacityRPS, r.LastSeen
	if r.HeartbeatInterval > 0 {
		m.interval = r.HeartbeatInterval
	}
	if r.Reputation > 0 {
		m.reputation, m.probation = r.Reputation, r.Probation
	}
	m.picks, m.successes, m.failures, m.inFlight = r.Picks, r.Successes, r.Failures, r.InFlight
	rps := r.EffectiveRPS
	if rps <= 0 {
		rps = r.CapacityRPS
	}
	m.setCapacity(r.CapacityRPS)
	m.pace.Restore(math.Min(r.CapacityRPS, rps/math.Max(m.reputation, minWeight)), memberConcurrency(r.CapacityRPS))
}

// Export returns the state of the members of pools this process is the
// authority for.
func (p *Registry) Export(holds func(string) bool) []ports.PoolMember {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ports.PoolMember
	for id, pl := range p.byID {
		if !holds(id) {
			continue
		}
		for _, m := range pl.members {
			out = append(out, ports.PoolMember{PoolID: id, MemberID: m.id, Address: m.address, CapacityRPS: m.declared,
				HeartbeatInterval: m.interval, LastSeen: m.lastSeen, Reputation: m.reputation, Probation: m.probation,
				EffectiveRPS: m.weight(now), InFlight: m.inFlight, Paused: now.Before(m.pausedUntil),
				Picks: m.picks, Successes: m.successes, Failures: m.failures})
		}
	}
	return out
}

func dedupe(ss []string) []string {
	seen := map[string]bool{}
	out := ss[:0]
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
