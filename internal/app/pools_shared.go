package app

import (
	"container/heap"
	"context"
	"math"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/pacing"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Pools with a shared store (several processes): membership lives in the
// store, so a member may register or heartbeat through any process. The
// process holding a pool's lane is the authority for its members' state —
// reputation, probation, pace, counters — which it folds in from dispatch
// outcomes and saves to the store; every other process mirrors what the
// store says, for GET /pools and /health.

// poolSyncLoop syncs pool membership every SyncInterval, and at once when
// another process says a pool changed.
func (s *Service) poolSyncLoop(ctx context.Context) {
	for {
		c, stop := s.d.after(s.cfg.Cluster.SyncInterval)
		select {
		case <-ctx.Done():
			stop()
			return
		case <-c:
		case <-s.poolKick:
			stop()
		}
		s.syncPools(ctx)
	}
}

// syncPools merges the store's pool membership into the local registry and
// saves the state of the pools this process is the authority for.
func (s *Service) syncPools(ctx context.Context) {
	cs := s.d.cluster
	rows, err := cs.c.Members.Members(ctx, "")
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reading shared pool membership failed", zap.Error(err))
		}
		return
	}
	holds := func(poolID string) bool { return s.d.holds(domain.PoolUpstream(poolID)) }
	stale := s.pools.merge(rows, holds)
	for _, m := range stale {
		if _, err := cs.c.Members.DeleteMember(ctx, m.PoolID, m.MemberID); err != nil {
			s.log.Warn("removing an evicted pool member from the shared store failed", zap.Error(err))
		}
	}
	if states := s.pools.export(holds); len(states) > 0 {
		if err := cs.c.Members.SaveMemberStates(ctx, states); err != nil {
			s.log.Warn("saving pool member state failed", zap.Error(err))
		}
	}
}

// merge folds the store's members into the registry. For pools held here
// (authority): new rows join, a newer LastSeen is a heartbeat, members gone
// from the store have left; rows of members this process evicted since
// their last heartbeat are returned for deletion. Other pools are replaced
// by the store's view.
func (p *pools) merge(rows []ports.PoolMember, holds func(string) bool) (stale []ports.PoolMember) {
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
func (p *pools) memberFromRow(pl *pool, r ports.PoolMember, authority bool) *member {
	m := &member{id: r.MemberID, address: r.Address, declared: r.CapacityRPS, interval: r.HeartbeatInterval,
		reputation: 1, lastSeen: r.LastSeen, vpos: pl.minVpos(),
		pace: pacing.NewPace(pacing.PaceConfig{RPS: r.CapacityRPS, MaxConcurrent: memberConcurrency(r.CapacityRPS)})}
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
func (p *pools) heartbeatLocked(m *member, r ports.PoolMember) {
	m.address, m.lastSeen = r.Address, r.LastSeen
	if r.HeartbeatInterval > 0 {
		m.interval = r.HeartbeatInterval
	}
	if m.declared != r.CapacityRPS {
		m.declared = r.CapacityRPS
		m.pace.SetCeiling(r.CapacityRPS, memberConcurrency(r.CapacityRPS))
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
	m.pace.SetCeiling(r.CapacityRPS, memberConcurrency(r.CapacityRPS))
	m.pace.Restore(math.Min(r.CapacityRPS, rps/math.Max(m.reputation, minWeight)), memberConcurrency(r.CapacityRPS))
}

// export returns the state of the members of pools this process is the
// authority for.
func (p *pools) export(holds func(string) bool) []ports.PoolMember {
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
				EffectiveRPS: m.weight(), InFlight: m.inFlight, Paused: now.Before(m.pausedUntil),
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

// registerShared records a registration or heartbeat in the shared store
// and has every process (this one included) pick it up at once.
func (s *Service) registerShared(ctx context.Context, r *domain.MemberRegistration) (bool, error) {
	cs := s.d.cluster
	created, err := cs.c.Members.PutMember(ctx, &ports.PoolMember{PoolID: r.PoolID, MemberID: r.MemberID, Address: r.Address,
		CapacityRPS: r.CapacityRPS, HeartbeatInterval: r.HeartbeatInterval})
	if err != nil {
		return false, storeErr("register pool member", err)
	}
	s.poolsChanged(r.PoolID)
	return created, nil
}

// leaveShared removes a member from the shared store.
func (s *Service) leaveShared(ctx context.Context, poolID, memberID string) error {
	ok, err := s.d.cluster.c.Members.DeleteMember(ctx, poolID, memberID)
	if err != nil {
		return storeErr("remove pool member", err)
	}
	if !ok {
		return &domain.Error{Code: domain.CodeNotFound, Message: "no such pool member"}
	}
	s.poolsChanged(poolID)
	return nil
}

func (s *Service) poolsChanged(poolID string) {
	s.d.cluster.c.Bus.Broadcast(ports.ClusterMessage{Pools: []string{poolID}})
	select {
	case s.poolKick <- struct{}{}:
	default:
	}
}
