package main

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestDecayOverload(t *testing.T) {
	cases := []struct {
		score   float64
		elapsed int
		want    float64
	}{
		{10, 0, 10},
		{10, 1, 6.5},
		{10, 2, 4.225},
		{10, 5, 10 * math.Pow(0.65, 5)},
		{0.15, 1, 0}, // 0.0975 < 0.1
		{0.2, 1, 0.13},
		{0, 3, 0},
		{10, -1, 10}, // time never runs backwards for a worker
	}
	for _, c := range cases {
		if got := decayOverload(c.score, c.elapsed); !near(got, c.want) {
			t.Errorf("decayOverload(%v, %d) = %v, want %v", c.score, c.elapsed, got, c.want)
		}
	}
}

func TestPopulation(t *testing.T) {
	type wb struct {
		b behavior
		c float64
	}
	check := func(scenario string, n int, want []wb) {
		t.Helper()
		got := population(scenario, n)
		if len(got) != n {
			t.Fatalf("%s: %d workers", scenario, len(got))
		}
		for i, w := range got {
			if w.index != i+1 || w.behavior != want[i].b || w.capacity != want[i].c {
				t.Errorf("%s w%d = %s/%v, want %s/%v", scenario, i+1, w.behavior, w.capacity, want[i].b, want[i].c)
			}
		}
	}
	s5 := wb{stable, 5}
	check("steady", 3, []wb{s5, s5, s5})
	check("weighted", 6, []wb{{stable, 2}, {stable, 3}, {stable, 4}, {stable, 5}, {stable, 1}, {stable, 2}})
	check("flapping", 3, []wb{s5, s5, {flapping, 5}})
	check("backpressure", 6, []wb{s5, s5, {dynamic, 5}, s5, s5, {dynamic, 5}})
	check("recovering", 2, []wb{s5, {recovering, 5}})
	check("mixed", 10, []wb{s5, s5, s5, {dynamic, 5}, s5, s5, s5, {dynamic, 5}, {flapping, 5}, {recovering, 5}})
	check("harsh", 10, []wb{{stable, 4}, {stable, 4}, {fragile, 3}, {dynamic, 4}, {stable, 4}, {fragile, 3},
		{stable, 4}, {dynamic, 4}, {flapping, 3}, {recovering, 3}})
	// With one worker, "worker N" wins over every other rule.
	check("mixed", 1, []wb{{recovering, 5}})
	if got := population("steady", 12)[11].memberID(); got != "worker-12" {
		t.Errorf("member id %q", got)
	}
	if got := population("steady", 1)[0].memberID(); got != "worker-01" {
		t.Errorf("member id %q", got)
	}
}

// serveSecond sends n requests in second s and returns the replies.
func serveSecond(st *workerState, w workerSpec, s, n, jitter int) []reply {
	out := make([]reply, n)
	for i := range out {
		out[i] = st.handle(w, s, jitter)
	}
	return out
}

func TestStableWorker(t *testing.T) {
	w := workerSpec{index: 1, behavior: stable, capacity: 5}
	var st workerState
	r := serveSecond(&st, w, 1, 8, 0)
	for i := range 5 { // within capacity: nothing advertised, no overload
		if r[i] != (reply{status: 200}) {
			t.Fatalf("request %d: %+v", i+1, r[i])
		}
	}
	// 6th: overload 0.7; 7th: 2.1 (7 = ⌊1.4×5⌋, not above it: no advert yet).
	if r[5] != (reply{status: 200}) || r[6] != (reply{status: 200}) {
		t.Fatalf("6th/7th: %+v %+v", r[5], r[6])
	}
	// 8th: above ⌊1.4×5⌋ → advertise 3.5, but overload is now 4.2 ≥ 3 →
	// half capacity and at least 100 ms.
	if want := (reply{status: 200, advertised: 2.5, delay: 100 * time.Millisecond}); r[7] != want {
		t.Fatalf("8th: %+v, want %+v", r[7], want)
	}
	if !near(st.overload, 4.2) || st.count != 8 || st.second != 1 {
		t.Fatalf("state %+v", st)
	}
	// Next second: decayed to 2.73, count restarts.
	if r := st.handle(w, 2, 0); r != (reply{status: 200}) || !near(st.overload, 4.2*0.65) || st.count != 1 {
		t.Fatalf("second 2: %+v, state %+v", r, st)
	}
}

func TestStableAdvertisesSeventyPercentAboveOnePointFourCapacity(t *testing.T) {
	// A count already at ⌊1.4×5⌋ and no overload yet (preset state): the
	// 8th request adds 3 × 0.7 = 2.1, below 3, and advertises 0.7 × 5.
	w := workerSpec{index: 1, behavior: stable, capacity: 5}
	st := workerState{second: 1, count: 7}
	if r := st.handle(w, 1, 0); r != (reply{status: 200, advertised: 3.5}) || !near(st.overload, 2.1) {
		t.Fatalf("%+v, state %+v", r, st)
	}
	// Capacity 1: 0.7 is raised to the minimum of 1.
	st = workerState{second: 1, count: 1}
	if r := st.handle(workerSpec{behavior: stable, capacity: 1}, 1, 0); r.advertised != 1 {
		t.Fatalf("%+v", r)
	}
}

func TestDynamicWorker(t *testing.T) {
	w := workerSpec{index: 3, behavior: dynamic, capacity: 4}
	var st workerState
	// jitter −2 → advertise 2; 429 once c > ⌊3⌋.
	r := serveSecond(&st, w, 1, 4, -2)
	for i := range 3 {
		if r[i].status != 200 || r[i].advertised != 2 {
			t.Fatalf("request %d: %+v", i+1, r[i])
		}
	}
	if r[3].status != http.StatusTooManyRequests || r[3].advertised != 2 {
		t.Fatalf("4th: %+v", r[3])
	}
	// Capacity 1 with jitter −2 still advertises 1.
	var st2 workerState
	if r := st2.handle(workerSpec{behavior: dynamic, capacity: 1}, 1, -2); r.advertised != 1 {
		t.Fatalf("%+v", r)
	}
	// jitter +2 → 6.
	if r := st.handle(w, 2, 2); r.advertised != 6 || r.status != 200 {
		t.Fatalf("%+v", r)
	}
}

func TestFlappingWorker(t *testing.T) {
	w := workerSpec{index: 9, behavior: flapping, capacity: 5}
	var st workerState
	for s := 1; s <= 12; s++ {
		r := st.handle(w, s, 0)
		failing := s >= 5 && s <= 10
		want := reply{status: 200}
		if failing {
			want = reply{status: 500, advertised: 1, failing: true}
		}
		if r != want {
			t.Fatalf("second %d: %+v, want %+v", s, r, want)
		}
	}
}

func TestRecoveringWorker(t *testing.T) {
	w := workerSpec{index: 10, behavior: recovering, capacity: 3}
	var st workerState
	for s := 1; s <= 12; s++ {
		r := st.handle(w, s, 0)
		var want reply
		switch {
		case s <= 5:
			want = reply{status: 500, advertised: 1, failing: true}
		case s <= 10:
			want = reply{status: 200, advertised: 2}
		default:
			want = reply{status: 200, advertised: 3}
		}
		if r != want {
			t.Fatalf("second %d: %+v, want %+v", s, r, want)
		}
	}
}

func TestFragileWorker(t *testing.T) {
	w := workerSpec{index: 3, behavior: fragile, capacity: 3}
	var st workerState
	r := serveSecond(&st, w, 1, 4, 0)
	for i := range 3 {
		if r[i] != (reply{status: 200, advertised: 3}) {
			t.Fatalf("request %d: %+v", i+1, r[i])
		}
	}
	// 4th: overload 1.4 → advertise 3 − 0.7.
	if !near(r[3].advertised, 2.3) || r[3].status != 200 || !near(st.overload, 1.4) {
		t.Fatalf("4th: %+v overload %v", r[3], st.overload)
	}
	// 5th: overload 1.4 + 2.8 = 4.2 ≥ 3 → half capacity, 100 ms.
	if r := st.handle(w, 1, 0); r.advertised != 1.5 || r.delay != 100*time.Millisecond || r.status != 200 {
		t.Fatalf("5th: %+v", r)
	}
	// 6th: 4.2 + 4.2 = 8.4 ≥ 8 → crash.
	if r := st.handle(w, 1, 0); r.status != 500 || !r.crashed || r.advertised != 1 || r.delay != 250*time.Millisecond || st.crashUntil != 3 {
		t.Fatalf("6th: %+v, state %+v", r, st)
	}
}

func TestOverloadLevelsAndCrashWindow(t *testing.T) {
	w := workerSpec{index: 1, behavior: stable, capacity: 5}

	// Score 5 before a request within capacity: 500, 150 ms, already failing.
	st := workerState{second: 1, overload: 5}
	if r := st.handle(w, 1, 0); r != (reply{status: 500, advertised: 1, delay: 150 * time.Millisecond, failing: true}) {
		t.Fatalf("overload 5: %+v", r)
	}
	// Score 4.9, and the 6th request of the second adds 0.7 → 5.6: 500, but
	// the worker was not failing when it arrived.
	st = workerState{second: 1, count: 5, overload: 4.9}
	if r := st.handle(w, 1, 0); r.status != 500 || r.failing || r.delay != 150*time.Millisecond {
		t.Fatalf("pushed to 5: %+v", r)
	}

	// Crash at second 4 (4.5 + 5 × 0.7 = 8): window through second 6.
	st = workerState{second: 4, count: 9, overload: 4.5}
	r := st.handle(w, 4, 0)
	if r != (reply{status: 500, advertised: 1, delay: 250 * time.Millisecond, crashed: true}) || st.crashUntil != 6 {
		t.Fatalf("crash: %+v, state %+v", r, st)
	}
	// Seconds 5 and 6: in the window whatever the score.
	for s := 5; s <= 6; s++ {
		st.overload = 0
		if r := st.handle(w, s, 0); r != (reply{status: 500, advertised: 1, delay: 250 * time.Millisecond, crashed: true, failing: true}) {
			t.Fatalf("second %d: %+v", s, r)
		}
	}
	// Second 7: out of the window; score decayed to 0.
	if r := st.handle(w, 7, 0); r != (reply{status: 200}) {
		t.Fatalf("second 7: %+v, state %+v", r, st)
	}

	// Far above twice capacity with a score below 3: at least 75 ms.
	w1 := workerSpec{index: 1, behavior: stable, capacity: 1}
	st = workerState{second: 1, count: 2}
	if r := st.handle(w1, 1, 0); r != (reply{status: 200, advertised: 1, delay: 75 * time.Millisecond}) || !near(st.overload, 1.4) {
		t.Fatalf("above 2× capacity: %+v, state %+v", r, st)
	}
}

func TestSensitivity(t *testing.T) {
	want := map[behavior]float64{fragile: 1.4, dynamic: 1.0, flapping: 1.2, recovering: 1.2, stable: 0.7}
	for b, s := range want {
		if got := (workerSpec{behavior: b}).sensitivity(); got != s {
			t.Errorf("%s: %v, want %v", b, got, s)
		}
	}
}
