package pool

import (
	"math"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

// reportBudget has member id answer one pick with a budget of remaining of
// limit, resetting in resetIn.
func reportBudget(t *testing.T, p *Registry, id string, limit, remaining float64, resetIn time.Duration) {
	t.Helper()
	p.mu.Lock()
	p.byID["p"].members[id].inFlight++
	p.byID["p"].members[id].budget.Start(p.now())
	p.mu.Unlock()
	p.Record("p", id, Outcome{Observed: true, Status: 200,
		Signals: pacing.Signals{Budget: pacing.Budget{Limit: limit, Remaining: remaining, ResetIn: resetIn, Source: "github"}}})
}

// TestPoolPicksFollowQuotaLeft: two members of equal capacity, one with
// 900 requests left to spend in its window and one with 100 (each above a
// reserve of 50 of 1000), windows resetting together, get picks 9 : 1, and
// the pool's capacity is what their budgets allow.
func TestPoolPicksFollowQuotaLeft(t *testing.T) {
	t.Parallel()
	clock := newClock()
	p, _ := newTestPools(clock)
	p.Register(reg("a", 100))
	p.Register(reg("b", 100))
	reportBudget(t, p, "a", 1000, 950, 1000*time.Second) // 900 above the reserve
	reportBudget(t, p, "b", 1000, 150, 1000*time.Second) // 100 above it
	rps, _, _ := p.Capacity("p")
	if math.Abs(rps-1) > 1e-6 { // 900/1000 s + 100/1000 s
		t.Fatalf("pool capacity %v rps, want 1 (what the budgets allow)", rps)
	}
	for _, m := range p.Snapshot()["p"].Members {
		if want := map[string]float64{"a": 0.9, "b": 0.1}[m.ID]; m.EffectiveRPS != want {
			t.Errorf("member %s: effective rate %v, want %v", m.ID, m.EffectiveRPS, want)
		}
	}
	counts := map[string]int{}
	for n := 0; n < 400; {
		id, _, _, wait, ok := p.Pick("p", "")
		if !ok {
			if wait <= 0 {
				t.Fatal("nobody can take a job, and no wait")
			}
			clock.Advance(wait)
			continue
		}
		counts[id]++
		n++
		p.Record("p", id, Outcome{Observed: true, Status: 200}) // answers without a budget leave the window as it was
	}
	if ratio := float64(counts["a"]) / float64(counts["b"]); math.Abs(ratio-9) > 0.9 {
		t.Fatalf("picks %v: ratio %.2f, want 9 ±10%%", counts, ratio)
	}
	snap := p.Snapshot()["p"]
	for _, m := range snap.Members {
		if m.Budget == "" {
			t.Errorf("member %s: no budget in its health", m.ID)
		}
	}
}

// TestPoolSkipsAMemberAtItsReserve: a member with only its reserve left is
// not picked until its reset; alone, the pool says how long to wait.
func TestPoolSkipsAMemberAtItsReserve(t *testing.T) {
	t.Parallel()
	clock := newClock()
	p, _ := newTestPools(clock)
	p.Register(reg("low", 100))
	p.Register(reg("ok", 100))
	reportBudget(t, p, "low", 100, 5, 30*time.Second) // 5 of 100: the reserve
	for range 20 {
		id, _, _, _, ok := p.Pick("p", "")
		if !ok || id != "ok" {
			t.Fatalf("picked %q (ok %v), want the member with quota", id, ok)
		}
		p.Record("p", id, Outcome{Observed: true, Status: 200})
	}
	if got, want := p.BudgetReason("p"), "budget: 5 of 100 left, resets in 30.0s (github); member low the tightest of 1 of 2 members on a budget"; got != want {
		t.Errorf("budget reason %q, want %q", got, want)
	}
	p.Leave("p", "ok")
	if _, _, _, wait, ok := p.Pick("p", ""); ok || wait != 30*time.Second {
		t.Fatalf("pick ok %v wait %v, want a wait until the reset (30s)", ok, wait)
	}
	clock.Advance(30 * time.Second)
	if id, _, _, _, ok := p.Pick("p", ""); !ok || id != "low" {
		t.Fatalf("after the reset: picked %q ok %v, want low (probing its new window)", id, ok)
	}
}

// TestUnpickReturnsTheBudget: a pick undone leaves the member's budget and
// position as they were.
func TestUnpickReturnsTheBudget(t *testing.T) {
	t.Parallel()
	clock := newClock()
	p, _ := newTestPools(clock)
	p.Register(reg("a", 100))
	reportBudget(t, p, "a", 1000, 500, time.Hour)
	p.mu.Lock()
	before := p.byID["p"].members["a"].budget.State(clock.Now())
	vpos := p.byID["p"].members["a"].vpos
	p.mu.Unlock()
	if _, _, _, _, ok := p.Pick("p", ""); !ok {
		t.Fatal("pick failed")
	}
	p.Unpick("p", "a")
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.byID["p"].members["a"]
	if after := m.budget.State(clock.Now()); after != before || m.vpos != vpos {
		t.Fatalf("after unpick: budget %+v vpos %v, want %+v and %v", after, m.vpos, before, vpos)
	}
}
