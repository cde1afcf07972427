package pool

import (
	"math"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/clocktest"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/pacing"
)

// newClock is the pool model's clock: it moves only when the test
// advances it.
func newClock() *clocktest.Clock { return clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) }

func reg(id string, rps float64) *domain.MemberRegistration {
	return &domain.MemberRegistration{PoolID: "p", MemberID: id, Address: "http://" + id + ".test/x", CapacityRPS: rps,
		HeartbeatInterval: 10 * time.Second}
}

func newTestPools(clock *clocktest.Clock) (*Registry, *[]string) {
	var woken []string
	p := New(clock.Now, func(id string) { woken = append(woken, id) })
	return p, &woken
}

// pickN picks n times, releasing each pick as a success with no signals,
// and counts picks per member.
func pickN(t *testing.T, p *Registry, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for range n {
		id, _, _, _, ok := p.Pick("p", "")
		if !ok {
			t.Fatal("pick failed")
		}
		counts[id]++
		p.mu.Lock()
		p.byID["p"].members[id].inFlight-- // release without touching reputation
		p.mu.Unlock()
	}
	return counts
}

func TestPoolSelectionIsProportionalToCapacity(t *testing.T) {
	t.Parallel()
	p, _ := newTestPools(newClock())
	p.Register(reg("big", 100))
	p.Register(reg("small", 25))
	counts := pickN(t, p, 2000)
	ratio := float64(counts["big"]) / float64(counts["small"])
	if math.Abs(ratio-4) > 0.4 { // ±10 %
		t.Fatalf("picks %v: ratio %.2f, want 4 ±10%%", counts, ratio)
	}
}

func TestPoolSelectionFollowsReputationAndMemberPace(t *testing.T) {
	t.Parallel()
	p, _ := newTestPools(newClock())
	for _, id := range []string{"a", "b", "c"} {
		p.Register(reg(id, 20))
	}
	// b fails once (×0.5); c says it can take only 5 rps.
	p.Record("p", "b", Outcome{Failed: true})
	p.Record("p", "c", Outcome{Observed: true, Status: 200, Signals: pacing.Signals{RPS: 5}})
	p.mu.Lock()
	for _, m := range p.byID["p"].members {
		m.inFlight = 0
	}
	p.mu.Unlock()
	counts := pickN(t, p, 2000)
	// weights 20 : 10 : 5
	for id, want := range map[string]float64{"a": 2000 * 20 / 35.0, "b": 2000 * 10 / 35.0, "c": 2000 * 5 / 35.0} {
		if got := float64(counts[id]); math.Abs(got-want) > want*0.1 {
			t.Errorf("member %s: %v picks, want %.0f ±10%% (all: %v)", id, got, want, counts)
		}
	}
	rps, _, _ := p.Capacity("p")
	if math.Abs(rps-35) > 0.01 {
		t.Fatalf("pool capacity %.2f, want 35 (the sum of effective rates)", rps)
	}
}

func TestNewMemberCompetesImmediately(t *testing.T) {
	t.Parallel()
	p, _ := newTestPools(newClock())
	p.Register(reg("old", 10))
	pickN(t, p, 500) // old's virtual position is far ahead
	p.Register(reg("new", 10))
	counts := pickN(t, p, 200)
	if counts["new"] < 80 || counts["new"] > 120 {
		t.Fatalf("a newcomer got %d of 200 picks; it starts at the pool's minimum position, so ~100", counts["new"])
	}
}

func TestReputationArithmetic(t *testing.T) {
	t.Parallel()
	clock := newClock()
	p, _ := newTestPools(clock)
	p.Register(reg("m", 10))
	rep := func() float64 { return p.Snapshot()["p"].Members[0].Reputation }
	p.Record("p", "m", Outcome{Failed: true})
	p.Record("p", "m", Outcome{Failed: true})
	if rep() != 0.25 {
		t.Fatalf("two failures: %v, want 0.25", rep())
	}
	p.Record("p", "m", Outcome{Status: 200, Observed: true})
	if rep() != 0.375 {
		t.Fatalf("then a success: %v, want 0.375 (×1.5)", rep())
	}
	p.Register(reg("m", 10)) // heartbeat
	if got := rep(); math.Abs(got-0.4125) > 1e-9 {
		t.Fatalf("then a heartbeat: %v, want 0.4125 (×1.1)", got)
	}
	for range 5 {
		p.Record("p", "m", Outcome{Status: 429, Observed: true}) // 429 is a success for reputation
	}
	if rep() != 1 {
		t.Fatalf("successes cap at 1, got %v", rep())
	}
}

func TestFloorEvictionNeedsSustainedFailureWithoutSuccess(t *testing.T) {
	t.Parallel()
	clock := newClock()
	p, _ := newTestPools(clock)
	p.Register(reg("bad", 10))
	p.Register(reg("good", 10))
	for range 5 { // 1/32 ≤ 0.05: at the floor, timer starts
		p.Record("p", "bad", Outcome{Failed: true})
	}
	clock.Advance(11 * time.Second)
	p.Record("p", "bad", Outcome{Failed: true})
	if len(p.Snapshot()["p"].Members) != 2 {
		t.Fatal("evicted before 12 s at the floor")
	}
	// A success resets the floor timer even while the reputation stays low.
	p.Record("p", "bad", Outcome{Status: 200, Observed: true})
	p.Record("p", "bad", Outcome{Failed: true})
	p.Record("p", "bad", Outcome{Failed: true})
	clock.Advance(11 * time.Second)
	if p.Sweep(holdAll); len(p.Snapshot()["p"].Members) != 2 {
		t.Fatal("the success did not reset the floor timer")
	}
	clock.Advance(2 * time.Second)
	// 13 s at the floor with no success: the sweep evicts it even though it
	// receives no traffic (the original needed one more failure to notice).
	evicted := p.Sweep(holdAll)
	if len(evicted) != 1 || evicted[0] != "p/bad" || len(p.Snapshot()["p"].Members) != 1 {
		t.Fatalf("sweep evicted %v; members %v", evicted, p.Snapshot()["p"].Members)
	}
	// Re-registering soon after a failure eviction comes back on probation.
	p.Register(reg("bad", 10))
	for _, m := range p.Snapshot()["p"].Members {
		if m.ID == "bad" && m.Reputation != probationRep {
			t.Fatalf("re-registered failing member at reputation %v, want probation %v", m.Reputation, probationRep)
		}
	}
}

// TestProbationTightensForARepeatOffender follows a member that keeps
// heartbeating but always fails: each failure eviction brings it back with
// half the previous probation reputation, and heartbeats alone never raise it
// above that until it succeeds.
func TestProbationTightensForARepeatOffender(t *testing.T) {
	t.Parallel()
	clock := newClock()
	p, _ := newTestPools(clock)
	p.Register(reg("good", 10))
	rep := func() float64 {
		for _, m := range p.Snapshot()["p"].Members {
			if m.ID == "bad" {
				return m.Reputation
			}
		}
		return -1
	}
	evict := func() {
		t.Helper()
		for range 8 {
			p.Record("p", "bad", Outcome{Failed: true})
		}
		clock.Advance(13 * time.Second)
		p.Register(reg("good", 10))
		if ev := p.Sweep(holdAll); len(ev) != 1 {
			t.Fatalf("sweep evicted %v, want p/bad", ev)
		}
	}
	p.Register(reg("bad", 10))
	evict()
	for i, want := range []float64{0.25, 0.125, 0.1, 0.1} {
		p.Register(reg("bad", 10))
		if got := rep(); got != want {
			t.Fatalf("return %d: reputation %v, want %v", i+1, got, want)
		}
		for range 20 {
			p.Register(reg("bad", 10)) // heartbeats: alive, not proven working
		}
		if got := rep(); got != want {
			t.Fatalf("return %d: heartbeats raised reputation on probation to %v (want %v)", i+1, got, want)
		}
		evict()
	}
	// A success ends probation: heartbeats restore it again.
	p.Register(reg("bad", 10))
	p.Record("p", "bad", Outcome{Status: 200, Observed: true})
	for range 30 {
		p.Register(reg("bad", 10))
	}
	if got := rep(); got != 1 {
		t.Fatalf("after a success and heartbeats: reputation %v, want 1", got)
	}
}

func TestFailureEvictionOnFailureAfterWindow(t *testing.T) {
	t.Parallel()
	clock := newClock()
	p, _ := newTestPools(clock)
	p.Register(reg("bad", 10))
	for range 5 {
		p.Record("p", "bad", Outcome{Failed: true})
	}
	clock.Advance(12 * time.Second)
	p.Record("p", "bad", Outcome{Failed: true})
	if _, ok := p.Snapshot()["p"]; ok && len(p.Snapshot()["p"].Members) != 0 {
		t.Fatal("a failure after 12 s at the floor must evict")
	}
}

func TestHeartbeatEviction(t *testing.T) {
	t.Parallel()
	clock := newClock()
	p, _ := newTestPools(clock)
	p.Register(reg("quiet", 10)) // interval 10 s
	p.Register(reg("alive", 10))
	clock.Advance(25 * time.Second)
	p.Register(reg("alive", 10))
	if ev := p.Sweep(holdAll); len(ev) != 0 {
		t.Fatalf("evicted %v after 2.5 intervals", ev)
	}
	clock.Advance(6 * time.Second) // quiet: 31 s > 3 × 10 s
	if ev := p.Sweep(holdAll); len(ev) != 1 || ev[0] != "p/quiet" {
		t.Fatalf("sweep evicted %v, want p/quiet", ev)
	}
	// Re-registering after a heartbeat eviction is a fresh member at 1.0.
	p.Register(reg("quiet", 10))
	for _, m := range p.Snapshot()["p"].Members {
		if m.ID == "quiet" && m.Reputation != 1 {
			t.Fatalf("rejoined at %v", m.Reputation)
		}
	}
}

func TestPickAvoidsTheMemberThatFailedAndSkipsPausedOnes(t *testing.T) {
	t.Parallel()
	clock := newClock()
	p, _ := newTestPools(clock)
	p.Register(reg("a", 10))
	p.Register(reg("b", 10))
	for range 20 {
		id, _, _, _, ok := p.Pick("p", "a")
		if !ok || id != "b" {
			t.Fatalf("pick avoiding a = %q, %v", id, ok)
		}
		p.Record("p", id, Outcome{Status: 200, Observed: true})
	}
	// A 429 pauses b; a takes everything until the pause ends.
	p.Record("p", "b", Outcome{Status: 429, Observed: true, DeferTo: clock.Now().Add(time.Second)})
	p.mu.Lock()
	p.byID["p"].members["b"].inFlight = 0
	p.mu.Unlock()
	for range 5 {
		id, _, _, _, _ := p.Pick("p", "")
		if id != "a" {
			t.Fatalf("picked %q while b is paused", id)
		}
		p.Record("p", id, Outcome{Status: 200, Observed: true})
	}
	if rps, _, _ := p.Capacity("p"); rps != 10 {
		t.Fatalf("capacity with b paused = %v, want 10", rps)
	}
	// Only the avoided member is available: better it than waiting.
	id, _, _, _, ok := p.Pick("p", "a")
	if !ok || id != "a" {
		t.Fatalf("pick with only the avoided member free = %q, %v", id, ok)
	}
	p.Record("p", "a", Outcome{Status: 200, Observed: true})
	// Everyone paused: no pick, and the wait until the first pause ends.
	p.Record("p", "a", Outcome{Status: 429, Observed: true, DeferTo: clock.Now().Add(300 * time.Millisecond)})
	if _, _, _, wait, ok := p.Pick("p", ""); ok || wait != 300*time.Millisecond {
		t.Fatalf("pick with all paused = ok %v wait %v", ok, wait)
	}
}

func TestMemberConcurrencyLimit(t *testing.T) {
	t.Parallel()
	p, _ := newTestPools(newClock())
	p.Register(reg("one", 2)) // at most 2 in flight
	for range 2 {
		if _, _, _, _, ok := p.Pick("p", ""); !ok {
			t.Fatal("pick within the limit failed")
		}
	}
	if _, _, _, _, ok := p.Pick("p", ""); ok {
		t.Fatal("a third concurrent pick of a 2 rps member")
	}
	p.Record("p", "one", Outcome{Status: 200, Observed: true})
	if _, _, _, _, ok := p.Pick("p", ""); !ok {
		t.Fatal("no pick after a slot freed")
	}
}

func TestRegisterWakesThePoolAndLeaveRemoves(t *testing.T) {
	t.Parallel()
	p, woken := newTestPools(newClock())
	if !p.Register(reg("m", 10)) || p.Register(reg("m", 10)) {
		t.Fatal("register should report new then known")
	}
	if len(*woken) != 2 || (*woken)[0] != "p" {
		t.Fatalf("woken %v", *woken)
	}
	if err := p.Leave("p", "m"); err != nil {
		t.Fatal(err)
	}
	if err := p.Leave("p", "m"); domain.CodeOf(err) != domain.CodeNotFound {
		t.Fatalf("second leave = %v", err)
	}
	if _, _, _, _, ok := p.Pick("p", ""); ok {
		t.Fatal("picked from an empty pool")
	}
}

func holdAll(domain.UpstreamKey) bool { return true }
