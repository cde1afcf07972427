// Package pool is the registry of pool members: who they are, how much they
// can take, how much they are trusted (reputation), and which one takes the
// next job (weighted virtual-time round robin). With a store shared by
// several processes, membership lives in the store (Shared).
package pool

import (
	"container/heap"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/pacing"
)

// Reputation constants (BEHAVIOR.md §9.1).
const (
	repFailure         = 0.5  // a failure halves a member's share
	repSuccess         = 1.5  // a success restores it (capped at 1)
	repHeartbeat       = 1.1  // a heartbeat restores it slowly (capped at 1)
	repFloor           = 0.05 // at or below: "at the floor"
	floorEvictAfter    = 12 * time.Second
	heartbeatMisses    = 3 // missed intervals before eviction
	minWeight          = 0.001
	probationFor       = 5 * time.Minute // after a failure eviction
	probationRep       = 0.25            // reputation a recently evicted member comes back with; halved per repeat
	memberConcurrencyX = 1.0             // default max in flight per member: ceil(capacity × this), at least 1
)

// Registry is the registry of pool members: who they are, how much they can
// take, how much they are trusted, and which one takes the next job.
//
// Selection is weighted virtual-time round robin: members sit in a heap keyed
// by a virtual position; a pick takes the member with the smallest position
// and advances it by 1/weight, so over time each member gets picks in
// proportion to its weight — declared capacity × reputation, lowered further
// by the member's own pacing signals and by its rate-limit quota (weight).
// The pool's lane runs at the sum of the weights, so each member receives
// about its own effective rate.
//
// A member whose answers report a rate-limit budget (X-RateLimit-*,
// RateLimit, x-ratelimit-*) has its own pacing.BudgetPacer: it is not
// picked while its budget says wait (spacing, or only the reserve left),
// and its weight follows what it has left.
//
// All methods are safe for concurrent use.
type Registry struct {
	now      func() time.Time
	onChange func(poolID string) // a pool gained capacity: wake its lane

	mu        sync.Mutex
	byID      map[string]*pool
	probation map[string]probation // "pool/member" → its probation after a failure eviction
	// evictedAt remembers evictions (of any kind) until a shared store has
	// forgotten the member too: "pool/member" → when.
	evictedAt map[string]time.Time
}

// probation is how a member evicted for failing is let back in: with a
// reduced reputation, which heartbeats do not raise until it succeeds once.
// Each failure eviction during probation halves the reputation it comes
// back with, so a member that is alive but broken gets ever less traffic
// instead of a fixed share every eviction cycle.
type probation struct {
	until time.Time
	rep   float64
}

type pool struct {
	id      string
	members map[string]*member
	heap    memberHeap
}

type member struct {
	id, address string
	declared    float64
	interval    time.Duration
	reputation  float64
	lastSeen    time.Time // last heartbeat
	floorSince  time.Time // zero unless at the floor with no success since
	probation   float64   // > 0: on probation; heartbeats raise reputation at most to this until a success
	vpos        float64
	index       int // in the heap
	pace        *pacing.Pace
	budget      *pacing.BudgetPacer // the member's rate-limit window
	step        float64             // the last pick's advance of vpos, for Unpick
	pausedUntil time.Time
	inFlight    int
	picks       int64
	successes   int64
	failures    int64
}

// New returns an empty registry. onChange is called (without locks held)
// when a pool gains capacity: a member joined or freed a slot.
func New(now func() time.Time, onChange func(string)) *Registry {
	return &Registry{now: now, onChange: onChange, byID: map[string]*pool{}, probation: map[string]probation{}, evictedAt: map[string]time.Time{}}
}

func (m *member) maxConcurrent() int { return m.pace.MaxConcurrent() }

// weight is the member's effective rate: its own pace (declared capacity,
// lowered by its signals), never above what its rate-limit budget allows
// now ((left − reserve) ÷ time to the reset), times its reputation. While
// quotas are what bound the members, they get picks in proportion to the
// quota each has left (per unit of time to its reset); a member with more
// quota than it can use at its pace runs at its pace. (Scaling capacity by
// the share of the window left instead would starve every member towards
// the end of its window, when little is left but little time remains.) A
// member reporting no budget is bound by its pace alone.
func (m *member) weight(now time.Time) float64 {
	pace := math.Min(m.declared, m.pace.RPS())
	return max(math.Min(pace, m.budget.Rate(now))*m.reputation, minWeight)
}

// newMember returns a member at full reputation with its pace and budget
// at the declared capacity.
func newMember(id, address string, capacity float64, interval time.Duration, lastSeen time.Time, vpos float64) *member {
	return &member{id: id, address: address, declared: capacity, interval: interval, reputation: 1, lastSeen: lastSeen,
		vpos: vpos, pace: pacing.NewPace(pacing.PaceConfig{RPS: capacity, MaxConcurrent: memberConcurrency(capacity)}),
		budget: pacing.NewBudgetPacer(capacity)}
}

// setCapacity changes the member's declared capacity: its pace's and its
// budget's ceilings follow.
func (m *member) setCapacity(capacity float64) {
	m.declared = capacity
	m.pace.SetCeiling(capacity, memberConcurrency(capacity))
	m.budget.SetCeiling(capacity)
}

// Register adds a member or, for a known one, records a heartbeat: address,
// Capacity and interval are overwritten, reputation ×1.1. It reports whether
// the member is new.
func (p *Registry) Register(r *domain.MemberRegistration) bool {
	now := p.now()
	p.mu.Lock()
	pl := p.byID[r.PoolID]
	if pl == nil {
		pl = &pool{id: r.PoolID, members: map[string]*member{}}
		p.byID[r.PoolID] = pl
	}
	m, known := pl.members[r.MemberID]
	if known {
		m.address, m.interval, m.lastSeen = r.Address, r.HeartbeatInterval, now
		if m.declared != r.CapacityRPS {
			m.setCapacity(r.CapacityRPS)
		}
		ceiling := 1.0
		if m.probation > 0 {
			ceiling = max(m.reputation, m.probation) // alive is not the same as working
		}
		m.reputation = math.Min(ceiling, m.reputation*repHeartbeat)
	} else {
		m = newMember(r.MemberID, r.Address, r.CapacityRPS, r.HeartbeatInterval, now, pl.minVpos())
		if pr, ok := p.probation[r.PoolID+"/"+r.MemberID]; ok && now.Before(pr.until) {
			// Evicted for failing not long ago: trusted again gradually, so a
			// member that is alive but broken cannot take a full share back
			// just by re-registering.
			m.reputation, m.probation = pr.rep, pr.rep
		}
		pl.members[m.id] = m
		heap.Push(&pl.heap, m)
	}
	p.mu.Unlock()
	p.onChange(r.PoolID)
	return !known
}

func memberConcurrency(capacity float64) int {
	return max(1, int(math.Ceil(capacity*memberConcurrencyX)))
}

// Leave removes a member (graceful leave). ErrNotFound if it is not there.
func (p *Registry) Leave(poolID, memberID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.byID[poolID]
	if pl == nil || pl.members[memberID] == nil {
		return &domain.Error{Code: domain.CodeNotFound, Message: "no such pool member"}
	}
	pl.remove(pl.members[memberID])
	if len(pl.members) == 0 {
		delete(p.byID, poolID)
	}
	return nil
}

func (pl *pool) remove(m *member) {
	delete(pl.members, m.id)
	heap.Remove(&pl.heap, m.index)
}

func (pl *pool) minVpos() float64 {
	if len(pl.heap) == 0 {
		return 0
	}
	return pl.heap[0].vpos
}

// Capacity returns the pool's live ceiling: the sum of its members'
// effective rates and concurrency limits (paused members excluded), and how
// many members it has.
func (p *Registry) Capacity(poolID string) (rps float64, maxConcurrent, members int) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.byID[poolID]
	if pl == nil {
		return 0, 0, 0
	}
	for _, m := range pl.members {
		if now.Before(m.pausedUntil) {
			continue
		}
		rps += m.weight(now)
		maxConcurrent += m.maxConcurrent()
	}
	return rps, maxConcurrent, len(pl.members)
}

// Pick chooses the member for the next job: the smallest virtual position
// among members that are not paused, have a free slot and whose rate-limit
// budget lets a request start, preferring anyone but avoid (the member a
// retry just failed on). ok is false when nobody can take a job now; wait
// then says when a pause or a budget's wait ends (0: on a completion or a
// registration).
func (p *Registry) Pick(poolID, avoid string) (id, address string, rate float64, wait time.Duration, ok bool) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.byID[poolID]
	if pl == nil || len(pl.heap) == 0 {
		return "", "", 0, 0, false
	}
	var skipped []*member
	var chosen, avoided *member
	for len(pl.heap) > 0 {
		m := heap.Pop(&pl.heap).(*member)
		skipped = append(skipped, m)
		switch {
		case now.Before(m.pausedUntil):
			if w := m.pausedUntil.Sub(now); wait == 0 || w < wait {
				wait = w
			}
			continue
		case m.inFlight >= m.maxConcurrent():
			continue
		}
		if w, ok := m.budget.Wait(now); !ok {
			if w > 0 && (wait == 0 || w < wait) {
				wait = w
			}
			continue
		}
		switch {
		case m.id == avoid:
			avoided = m
			continue
		}
		chosen = m
		break
	}
	if chosen == nil {
		chosen = avoided // the only one available: better than waiting
	}
	for _, m := range skipped {
		heap.Push(&pl.heap, m)
	}
	if chosen == nil {
		return "", "", 0, wait, false
	}
	w := chosen.weight(now)
	chosen.step = 1 / w
	chosen.vpos += chosen.step
	heap.Fix(&pl.heap, chosen.index)
	chosen.inFlight++
	chosen.picks++
	chosen.budget.Start(now)
	return chosen.id, chosen.address, w, 0, true
}

// Unpick undoes a pick whose job could not start after all (the pool's
// limiter said wait).
func (p *Registry) Unpick(poolID, memberID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.byID[poolID]
	if pl == nil {
		return
	}
	if m := pl.members[memberID]; m != nil {
		m.inFlight = max(m.inFlight-1, 0)
		m.picks--
		m.vpos -= m.step
		m.step = 0
		m.budget.Cancel()
		heap.Fix(&pl.heap, m.index)
	}
}

// BudgetReason describes the members whose rate-limit budget holds them
// below their own pace: how many, and the tightest in words ("" when
// none).
func (p *Registry) BudgetReason(poolID string) string {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.byID[poolID]
	if pl == nil {
		return ""
	}
	var tight pacing.BudgetState
	tightID, held := "", 0
	for _, m := range pl.members {
		st := m.budget.State(now)
		if !st.Active || (!st.Holding && st.RPS >= math.Min(m.declared, m.pace.RPS())) {
			continue
		}
		held++
		if tightID == "" || st.RPS < tight.RPS || st.RPS == tight.RPS && m.id < tightID {
			tight, tightID = st, m.id
		}
	}
	if held == 0 {
		return ""
	}
	return fmt.Sprintf("%s; member %s the tightest of %d of %d members on a budget", tight.Reason(), tightID, held, len(pl.members))
}

// Outcome is what an attempt on a member found out.
type Outcome struct {
	Failed   bool // transport error or 5xx: a reliability signal
	Status   int
	Signals  pacing.Signals
	Observed bool
	DeferTo  time.Time // a 429 asked the member's share to wait until then
}

// Record releases the member's slot and folds the outcome into its
// reputation and pace (BEHAVIOR.md §9.3–§9.4): a transport error or 5xx
// halves the reputation; any other answer, 429 included, is a success.
func (p *Registry) Record(poolID, memberID string, o Outcome) {
	now := p.now()
	p.mu.Lock()
	pl := p.byID[poolID]
	var m *member
	if pl != nil {
		m = pl.members[memberID]
	}
	if m == nil {
		p.mu.Unlock()
		return // it left meanwhile
	}
	m.inFlight = max(m.inFlight-1, 0)
	m.budget.Finish(now, o.Signals.Budget, o.Observed)
	if o.Observed {
		m.pace.Observe(o.Signals)
		if o.Signals.ResetIn > 0 {
			m.pausedUntil = later(m.pausedUntil, now.Add(o.Signals.ResetIn))
		}
		if o.Status == 503 && o.Signals.RetryAfter > 0 {
			m.pausedUntil = later(m.pausedUntil, now.Add(o.Signals.RetryAfter))
		}
	}
	if !o.DeferTo.IsZero() {
		m.pausedUntil = later(m.pausedUntil, o.DeferTo)
	}
	if o.Failed {
		m.failures++
		m.reputation *= repFailure
		if m.reputation <= repFloor {
			if m.floorSince.IsZero() {
				m.floorSince = now
			} else if now.Sub(m.floorSince) >= floorEvictAfter {
				p.evictLocked(pl, m, true)
			}
		} else {
			m.floorSince = time.Time{}
		}
	} else {
		m.successes++
		m.reputation = math.Min(1, m.reputation*repSuccess)
		m.floorSince, m.probation = time.Time{}, 0
	}
	p.mu.Unlock()
	p.onChange(poolID) // a slot is free
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (p *Registry) evictLocked(pl *pool, m *member, failing bool) {
	pl.remove(m)
	p.evictedAt[pl.id+"/"+m.id] = p.now()
	if failing {
		key := pl.id + "/" + m.id
		rep := probationRep
		if prev, ok := p.probation[key]; ok && p.now().Before(prev.until) {
			rep = max(prev.rep*repFailure, repFloor*2)
		}
		p.probation[key] = probation{until: p.now().Add(probationFor), rep: rep}
	}
}

// Sweep evicts members that missed three heartbeats in a row, and members
// that have sat at the reputation floor for floorEvictAfter without a single
// success (the original needed yet another failure to notice, so an idle
// broken member lingered forever). It returns the evictions.
// With a shared store, only pools whose lane this process holds are swept
// (holds); the others' state is the holder's.
func (p *Registry) Sweep(holds func(domain.UpstreamKey) bool) []string {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var evicted []string
	for _, pl := range p.byID {
		if !holds(domain.PoolUpstream(pl.id)) {
			continue
		}
		for _, m := range pl.members {
			switch {
			case now.Sub(m.lastSeen) > heartbeatMisses*m.interval:
				p.evictLocked(pl, m, false)
			case !m.floorSince.IsZero() && now.Sub(m.floorSince) >= floorEvictAfter:
				p.evictLocked(pl, m, true)
			default:
				continue
			}
			evicted = append(evicted, pl.id+"/"+m.id)
		}
		if len(pl.members) == 0 {
			delete(p.byID, pl.id)
		}
	}
	for k, pr := range p.probation {
		if now.After(pr.until) {
			delete(p.probation, k)
		}
	}
	for k, at := range p.evictedAt {
		if now.Sub(at) > probationFor {
			delete(p.evictedAt, k)
		}
	}
	return evicted
}

// MemberHealth describes one pool member (GET /pools, /health).
type MemberHealth struct {
	ID             string  `json:"id"`
	Address        string  `json:"address,omitempty"` // left out of /health without the pool token
	DeclaredRPS    float64 `json:"declared_rps"`
	Reputation     float64 `json:"reputation"`
	EffectiveRPS   float64 `json:"effective_rps"`
	MaxConcurrent  int     `json:"max_concurrent"`
	InFlight       int     `json:"in_flight"`
	Paused         bool    `json:"paused"`
	HeartbeatAgeMS int64   `json:"heartbeat_age_ms"`
	Picks          int64   `json:"picks"`
	Successes      int64   `json:"successes"`
	Failures       int64   `json:"failures"`
	// Budget is the member's rate-limit window in words ("budget: 37 of
	// 100 left, resets in 6.2s (github)"), when its answers report one.
	Budget string `json:"budget,omitempty"`
}

// Health describes one pool.
type Health struct {
	Members          []MemberHealth `json:"members"`
	TotalCapacityRPS float64        `json:"total_capacity_rps"` // Σ effective rates: the pool's live ceiling
}

func (p *Registry) Snapshot() map[string]Health {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Health, len(p.byID))
	for id, pl := range p.byID {
		ph := Health{Members: []MemberHealth{}}
		for _, m := range pl.members {
			paused := now.Before(m.pausedUntil)
			mh := MemberHealth{ID: m.id, Address: domain.RedactURL(m.address), DeclaredRPS: m.declared,
				Reputation: math.Round(m.reputation*1e4) / 1e4, EffectiveRPS: math.Round(m.weight(now)*100) / 100,
				MaxConcurrent: m.maxConcurrent(), InFlight: m.inFlight, Paused: paused,
				HeartbeatAgeMS: now.Sub(m.lastSeen).Milliseconds(), Picks: m.picks, Successes: m.successes, Failures: m.failures}
			mh.Budget = m.budget.State(now).Reason()
			if !paused {
				ph.TotalCapacityRPS += m.weight(now)
			}
			ph.Members = append(ph.Members, mh)
		}
		ph.TotalCapacityRPS = math.Round(ph.TotalCapacityRPS*100) / 100
		sort.Slice(ph.Members, func(i, j int) bool { return ph.Members[i].ID < ph.Members[j].ID })
		out[id] = ph
	}
	return out
}

// memberHeap orders members by virtual position.
type memberHeap []*member

func (h memberHeap) Len() int { return len(h) }
func (h memberHeap) Less(i, j int) bool {
	if h[i].vpos != h[j].vpos {
		return h[i].vpos < h[j].vpos
	}
	return h[i].id < h[j].id // deterministic ties
}
func (h memberHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *memberHeap) Push(x any) {
	m := x.(*member)
	m.index = len(*h)
	*h = append(*h, m)
}
func (h *memberHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	m.index = -1
	return m
}
