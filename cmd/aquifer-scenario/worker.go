package main

import (
	"fmt"
	"math"
	"net/http"
	"time"
)

// behavior is how a simulated worker reacts to traffic (BEHAVIOR.md §27.4).
type behavior string

const (
	stable     behavior = "stable"     // healthy; advertises a lower rate when pushed past 1.4× capacity
	dynamic    behavior = "dynamic"    // advertises a wandering rate and answers 429 above 1.5× it
	flapping   behavior = "flapping"   // answers 500 during seconds 5–10
	recovering behavior = "recovering" // 500 for the first 5 s, then slow, then full capacity
	fragile    behavior = "fragile"    // its advertised rate falls as its overload score rises
)

// Overload model constants (BEHAVIOR.md §27.4).
const (
	overloadDecay   = 0.65 // per elapsed whole second
	overloadZero    = 0.1  // below this the score is 0
	overloadSlow    = 3.0  // advertise half capacity, ≥ 100 ms
	overloadFailing = 5.0  // 500, ≥ 150 ms
	overloadCrash   = 8.0  // 500 and a crash window until s+2, ≥ 250 ms
	crashWindow     = 2    // seconds after the one that crashed
)

// workerSpec is one logical worker of the fake backend.
type workerSpec struct {
	index    int // 1-based
	behavior behavior
	capacity float64 // rps it declares and can take
}

func (w workerSpec) memberID() string { return fmt.Sprintf("worker-%02d", w.index) }

// sensitivity is how much each request beyond capacity adds to the
// overload score.
func (w workerSpec) sensitivity() float64 {
	switch w.behavior {
	case fragile:
		return 1.4
	case dynamic:
		return 1.0
	case flapping, recovering:
		return 1.2
	default:
		return 0.7
	}
}

// population returns the workers of a scenario (BEHAVIOR.md §27.3).
func population(scenario string, n int) []workerSpec {
	ws := make([]workerSpec, n)
	for i := 1; i <= n; i++ {
		w := workerSpec{index: i, behavior: stable, capacity: 5}
		switch scenario {
		case "weighted":
			w.capacity = float64(1 + i%5)
		case "flapping":
			if i == n {
				w.behavior = flapping
			}
		case "backpressure":
			if i%3 == 0 {
				w.behavior = dynamic
			}
		case "recovering":
			if i == n {
				w.behavior = recovering
			}
		case "mixed":
			switch {
			case i == n:
				w.behavior = recovering
			case i == n-1:
				w.behavior = flapping
			case i%4 == 0:
				w.behavior = dynamic
			}
		case "harsh":
			switch {
			case i == n:
				w.behavior, w.capacity = recovering, 3
			case i == n-1:
				w.behavior, w.capacity = flapping, 3
			case i%3 == 0:
				w.behavior, w.capacity = fragile, 3
			case i%4 == 0:
				w.behavior, w.capacity = dynamic, 4
			default:
				w.capacity = 4
			}
		}
		ws[i-1] = w
	}
	return ws
}

// decayOverload returns score after elapsed whole seconds of decay: ×0.65
// per second, and 0 once it falls below 0.1.
func decayOverload(score float64, elapsed int) float64 {
	if elapsed <= 0 {
		return score
	}
	score *= math.Pow(overloadDecay, float64(elapsed))
	if score < overloadZero {
		return 0
	}
	return score
}

// workerState is what a worker remembers between requests.
type workerState struct {
	second     int // second of the last request (0: none yet)
	count      int // requests in that second, the last one included
	overload   float64
	crashUntil int // last second of the current crash window (0: none)
}

// reply is how a worker answers one request.
type reply struct {
	status     int
	advertised float64 // X-Aqueduct-Rps; 0: not sent
	delay      time.Duration
	crashed    bool // answered from a crash window (new or ongoing)
	// failing: the worker was already failing when the request arrived — a
	// crash window, an overload score at the failing level, or a scheduled
	// failure period — so it answered 500 whatever this request added. A
	// balancer that had noticed would not have sent it.
	failing bool
}

// scheduledFailure reports whether the behavior itself fails in second s.
func scheduledFailure(b behavior, s int) bool {
	switch b {
	case flapping:
		return s >= 5 && s <= 10
	case recovering:
		return s <= 5
	}
	return false
}

// handle answers one request arriving in second s (1-based), updating the
// state. jitter is the dynamic worker's random offset in {−2..2}; the caller
// draws it so that this function stays deterministic.
func (st *workerState) handle(w workerSpec, s, jitter int) reply {
	if s != st.second {
		if st.second > 0 && s > st.second {
			st.overload = decayOverload(st.overload, s-st.second)
		}
		st.second, st.count = s, 0
	}
	crashing := st.crashUntil > 0 && s <= st.crashUntil
	r := reply{status: http.StatusOK,
		failing: crashing || st.overload >= overloadFailing || scheduledFailure(w.behavior, s)}

	st.count++
	c := st.count
	capacity := math.Floor(w.capacity)
	if float64(c) > capacity {
		st.overload += (float64(c) - capacity) * w.sensitivity()
	}

	switch w.behavior {
	case stable:
		if float64(c) > math.Floor(1.4*w.capacity) {
			r.advertised = math.Max(1, 0.7*w.capacity)
		}
	case dynamic:
		r.advertised = math.Max(1, w.capacity+float64(jitter))
		if float64(c) > math.Floor(1.5*r.advertised) {
			r.status = http.StatusTooManyRequests
		}
	case flapping:
		if scheduledFailure(flapping, s) {
			r.status, r.advertised = http.StatusInternalServerError, 1
		}
	case recovering:
		switch {
		case s <= 5:
			r.status, r.advertised = http.StatusInternalServerError, 1
		case s <= 10:
			r.advertised = 2
		default:
			r.advertised = w.capacity
		}
	case fragile:
		r.advertised = math.Max(1, w.capacity-st.overload/2)
	}

	switch {
	case crashing:
		r.status, r.advertised, r.crashed = http.StatusInternalServerError, 1, true
		r.delay = max(r.delay, 250*time.Millisecond)
	case st.overload >= overloadCrash:
		r.status, r.advertised, r.crashed = http.StatusInternalServerError, 1, true
		st.crashUntil = s + crashWindow
		r.delay = max(r.delay, 250*time.Millisecond)
	case st.overload >= overloadFailing:
		r.status, r.advertised = http.StatusInternalServerError, 1
		r.delay = max(r.delay, 150*time.Millisecond)
	case st.overload >= overloadSlow:
		r.advertised = math.Max(1, w.capacity/2)
		r.delay = max(r.delay, 100*time.Millisecond)
	}
	if float64(c) > math.Floor(2*w.capacity) {
		r.delay = max(r.delay, 75*time.Millisecond)
	}
	return r
}
