package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func ups(names ...string) []domain.UpstreamKey {
	out := make([]domain.UpstreamKey, len(names))
	for i, n := range names {
		out[i] = domain.UpstreamKey("http://" + n + ":80")
	}
	return out
}

func set(us ...domain.UpstreamKey) map[domain.UpstreamKey]bool {
	m := map[domain.UpstreamKey]bool{}
	for _, u := range us {
		m[u] = true
	}
	return m
}

func TestAskSharesLanesFairly(t *testing.T) {
	t.Parallel()
	a, b, c, d := ups("a", "b", "c", "d")[0], ups("b")[0], ups("c")[0], ups("d")[0]
	tests := []struct {
		name      string
		withWork  map[domain.UpstreamKey]int
		held      map[domain.UpstreamKey]bool
		instances map[string][]domain.UpstreamKey
		share     int
	}{
		{"alone", map[domain.UpstreamKey]int{a: 1, b: 1, c: 1}, nil, map[string][]domain.UpstreamKey{"me": nil}, 3},
		{"two processes, three lanes", map[domain.UpstreamKey]int{a: 1, b: 1, c: 1}, nil,
			map[string][]domain.UpstreamKey{"me": nil, "other": nil}, 2},
		{"held lanes without work count", map[domain.UpstreamKey]int{a: 1}, set(b, c, d),
			map[string][]domain.UpstreamKey{"me": {b, c, d}, "other": nil}, 2},
		{"lanes others hold count", map[domain.UpstreamKey]int{a: 1}, nil,
			map[string][]domain.UpstreamKey{"me": nil, "other": {b, c, d}}, 2},
		{"nothing at all", nil, nil, map[string][]domain.UpstreamKey{"me": nil}, 1},
		{"no instance listed yet", map[domain.UpstreamKey]int{a: 1, b: 1}, nil, nil, 2},
	}
	for _, tc := range tests {
		want, share := ask(askInput{Me: "me", WithWork: tc.withWork, Held: tc.held, Instances: tc.instances})
		if share != tc.share {
			t.Errorf("%s: share %d, want %d", tc.name, share, tc.share)
		}
		if len(want) != len(tc.withWork) {
			t.Errorf("%s: want %v, should list every lane with work", tc.name, want)
		}
	}
}

func TestAskOrdersLanesPerProcess(t *testing.T) {
	t.Parallel()
	work := map[domain.UpstreamKey]int{}
	for _, u := range ups("a", "b", "c", "d", "e", "f", "g", "h") {
		work[u] = 1
	}
	one, _ := ask(askInput{Me: "one", WithWork: work})
	again, _ := ask(askInput{Me: "one", WithWork: work})
	two, _ := ask(askInput{Me: "two", WithWork: work})
	if fmt.Sprint(one) != fmt.Sprint(again) {
		t.Fatal("one process's order changed between calls")
	}
	if fmt.Sprint(one) == fmt.Sprint(two) {
		t.Fatal("two processes ask for lanes in the same order: they would race for the same one first")
	}
}

func settleWith(in settleInput) settlement {
	if in.Running == nil {
		in.Running = func(domain.UpstreamKey) int { return 0 }
	}
	if in.HasLane == nil {
		in.HasLane = func(domain.UpstreamKey) bool { return true }
	}
	if in.Now.IsZero() {
		in.Now = t0
	}
	if in.ReleaseWait == 0 {
		in.ReleaseWait = 30 * time.Second
	}
	return settle(in)
}

func TestSettleTakesAndLoses(t *testing.T) {
	t.Parallel()
	u := ups("a", "b", "c")
	s := settleWith(settleInput{Share: 3, WithWork: map[domain.UpstreamKey]int{u[0]: 1, u[1]: 1, u[2]: 1},
		Got: set(u[1], u[2]), Held: set(u[0], u[1])})
	if fmt.Sprint(s.Taken) != fmt.Sprint([]domain.UpstreamKey{u[2]}) || fmt.Sprint(s.Lost) != fmt.Sprint([]domain.UpstreamKey{u[0]}) {
		t.Fatalf("taken %v lost %v", s.Taken, s.Lost)
	}
	if !s.Held[u[1]] || s.Held[u[0]] || s.Held[u[2]] {
		t.Fatalf("held %v: the renewed lane only (taken ones are added as they start)", s.Held)
	}
}

func TestSettleGivesUpBeyondTheShare(t *testing.T) {
	t.Parallel()
	u := ups("a", "b", "c", "d")
	work := map[domain.UpstreamKey]int{u[0]: 3, u[1]: 1, u[2]: 2, u[3]: 1}
	busy := func(x domain.UpstreamKey) int {
		if x == u[1] {
			return 2 // still running attempts
		}
		return 0
	}
	s := settleWith(settleInput{Share: 2, WithWork: work, Got: set(u...), Held: set(u[0], u[1], u[2]), Running: busy})
	// Held 3 + taken 1 - share 2 = give up 2: the ones with the least work
	// (b with 1 queue, then c with 2).
	if fmt.Sprint(s.Extra) != fmt.Sprint([]domain.UpstreamKey{u[1], u[2]}) {
		t.Fatalf("extra %v, want b and c", s.Extra)
	}
	// c has nothing running: released now; b waits for its attempts.
	if fmt.Sprint(s.Release) != fmt.Sprint([]domain.UpstreamKey{u[2]}) {
		t.Fatalf("release %v, want c", s.Release)
	}
	if _, ok := s.Releasing[u[1]]; !ok || s.Held[u[1]] {
		t.Fatalf("b should be releasing, not held: held %v releasing %v", s.Held, s.Releasing)
	}
	// A later sync: b's attempts are done, or it waited long enough.
	later := settleWith(settleInput{Now: t0.Add(time.Second), Share: 2, WithWork: work, Got: set(u[0], u[1], u[3]),
		Held: set(u[0], u[3]), Releasing: s.Releasing})
	if fmt.Sprint(later.Release) != fmt.Sprint([]domain.UpstreamKey{u[1]}) || len(later.Releasing) != 0 {
		t.Fatalf("release %v releasing %v, want b released", later.Release, later.Releasing)
	}
	stuck := settleWith(settleInput{Now: t0.Add(31 * time.Second), Share: 2, WithWork: work, Got: set(u[0], u[1], u[3]),
		Held: set(u[0], u[3]), Releasing: s.Releasing, Running: busy})
	if fmt.Sprint(stuck.Release) != fmt.Sprint([]domain.UpstreamKey{u[1]}) {
		t.Fatalf("after ReleaseWait: release %v, want b even with attempts running", stuck.Release)
	}
}

func TestSettleGivesUpIdleLanes(t *testing.T) {
	t.Parallel()
	u := ups("a", "b")
	noLane := func(x domain.UpstreamKey) bool { return x != u[1] }
	s := settleWith(settleInput{Share: 5, WithWork: map[domain.UpstreamKey]int{u[0]: 1}, Got: set(u...), Held: set(u...),
		HasLane: noLane})
	if fmt.Sprint(s.Release) != fmt.Sprint([]domain.UpstreamKey{u[1]}) || s.Held[u[1]] || !s.Held[u[0]] {
		t.Fatalf("release %v held %v: b has no work and no lane here", s.Release, s.Held)
	}
}

func TestSettleLosesALaneBeingReleased(t *testing.T) {
	t.Parallel()
	u := ups("a")
	s := settleWith(settleInput{Share: 1, Got: set(), Releasing: map[domain.UpstreamKey]time.Time{u[0]: t0}})
	if fmt.Sprint(s.Lost) != fmt.Sprint(u) || len(s.Releasing) != 0 || len(s.Release) != 0 {
		t.Fatalf("lost %v releasing %v release %v", s.Lost, s.Releasing, s.Release)
	}
}
