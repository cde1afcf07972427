package pacing_test

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

// window is a simulated destination with a fixed-window budget: limit
// requests per period, counted when a request arrives, windows starting at
// t0 + k×period.
type window struct {
	limit  int
	period time.Duration
	start  time.Time
	used   int
	// over counts requests that arrived with nothing left (a 429).
	over int
}

// hit takes one request arriving at now and returns the budget an answer
// sent at once reports.
func (w *window) hit(now time.Time) pacing.Budget {
	w.roll(now)
	if w.used >= w.limit {
		w.over++
	} else {
		w.used++
	}
	return w.report(now)
}

// report is the budget an answer sent at now reports.
func (w *window) report(now time.Time) pacing.Budget {
	w.roll(now)
	return pacing.Budget{Limit: float64(w.limit), Remaining: float64(w.limit - w.used),
		ResetIn: w.start.Add(w.period).Sub(now), Source: pacing.SourceGitHub}
}

// roll starts the windows that began by now.
func (w *window) roll(now time.Time) {
	for !now.Before(w.start.Add(w.period)) {
		w.start, w.used = w.start.Add(w.period), 0
	}
}

// drive runs a pacer with unlimited work against w for d, starting each
// request as soon as the pacer allows and answering it after rtt. It
// returns how many requests started.
func drive(t *testing.T, b *pacing.BudgetPacer, w *window, now time.Time, d, rtt time.Duration, conc int) int {
	t.Helper()
	end := now.Add(d)
	type flight struct {
		at  time.Time
		bud pacing.Budget
	}
	var running []flight
	started := 0
	for now.Before(end) {
		// Answers due now come back first.
		kept := running[:0]
		for _, f := range running {
			if !f.at.After(now) {
				b.Finish(now, f.bud, true)
			} else {
				kept = append(kept, f)
			}
		}
		running = kept
		wait, ok := b.Wait(now)
		if ok && len(running) < conc {
			if r := b.Rate(now); r > 10 {
				t.Fatalf("at %v: rate %v above the ceiling", now, r)
			}
			b.Start(now)
			started++
			running = append(running, flight{at: now.Add(rtt), bud: w.hit(now)})
			continue
		}
		// Next event: an answer, or the pacer's wait.
		step := time.Duration(math.MaxInt64)
		for _, f := range running {
			step = min(step, f.at.Sub(now))
		}
		if wait > 0 {
			step = min(step, wait)
		}
		if step == time.Duration(math.MaxInt64) {
			t.Fatalf("at %v: nothing running and the pacer waits for nothing", now)
		}
		now = now.Add(step)
	}
	return started
}

var t0b = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBudgetPacerSpreadsTheWindowAndNeverExhaustsIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rtt  time.Duration
		conc int
	}{{"instant answers", 0, 1}, {"50ms answers, 4 in flight", 50 * time.Millisecond, 4}, {"400ms answers, 8 in flight", 400 * time.Millisecond, 8}} {
		w := &window{limit: 100, period: 10 * time.Second, start: t0b}
		b := pacing.NewBudgetPacer(10) // the ceiling alone would spend 100 in 10 s, with no room for error
		started := drive(t, b, w, t0b, 100*time.Second, tc.rtt, tc.conc)
		if w.over != 0 {
			t.Errorf("%s: %d requests found the budget exhausted", tc.name, w.over)
		}
		// Ten windows of 100: at least 90 % used.
		if started < 900 {
			t.Errorf("%s: %d requests in ten windows of 100, want >= 900", tc.name, started)
		}
	}
}

func TestBudgetPacerRateIsRemainingOverTimeLeft(t *testing.T) {
	t.Parallel()
	b := pacing.NewBudgetPacer(100)
	if r := b.Rate(t0b); r != 100 {
		t.Fatalf("no budget seen: rate %v, want the ceiling 100", r)
	}
	b.Start(t0b)
	b.Finish(t0b, pacing.Budget{Limit: 100, Remaining: 45, ResetIn: 10 * time.Second, Source: "ietf"}, true)
	// (45 − 5 reserved) ÷ 10 s.
	if r := b.Rate(t0b); math.Abs(r-4) > 1e-9 {
		t.Fatalf("rate %v, want 4", r)
	}
	st := b.State(t0b)
	if !st.Active || st.Left != 45 || st.Limit != 100 || st.Source != "ietf" || st.Holding {
		t.Fatalf("state %+v", st)
	}
	if got, want := st.Reason(), "budget: 45 of 100 left, resets in 10.0s (ietf)"; got != want {
		t.Fatalf("reason %q, want %q", got, want)
	}
	// Plenty left, little time: the ceiling caps it.
	b.Start(t0b)
	b.Finish(t0b, pacing.Budget{Limit: 100, Remaining: 100, ResetIn: 500 * time.Millisecond, Source: "ietf"}, true)
	if r := b.Rate(t0b); r != 100 {
		t.Fatalf("rate %v, want the ceiling", r)
	}
}

func TestBudgetPacerHoldsTheReserveUntilTheReset(t *testing.T) {
	t.Parallel()
	b := pacing.NewBudgetPacer(1000)
	b.Start(t0b)
	b.Finish(t0b, pacing.Budget{Limit: 20, Remaining: 3, ResetIn: 2 * time.Second, Source: "github"}, true)
	now := t0b
	n := 0
	for {
		wait, ok := b.Wait(now)
		if !ok {
			if wait <= 0 {
				t.Fatalf("held with no wait")
			}
			if now.Add(wait).Equal(t0b.Add(2 * time.Second)) {
				break // held until the reset
			}
			now = now.Add(wait)
			continue
		}
		b.Start(now)
		b.Finish(now, pacing.Budget{}, false) // no answer: nothing learned, still counted
		n++
	}
	// 3 left, 1 reserved (5 % of 20 rounds up to 1).
	if n != 2 {
		t.Fatalf("started %d, want 2", n)
	}
	if st := b.State(now); !st.Holding || st.RPS != 0 {
		t.Fatalf("state %+v, want holding", st)
	}
}

func TestBudgetPacerProbesANewWindow(t *testing.T) {
	t.Parallel()
	b := pacing.NewBudgetPacer(50)
	b.Start(t0b)
	b.Finish(t0b, pacing.Budget{Limit: 10, Remaining: 1, ResetIn: time.Second, Source: "openai"}, true)
	after := t0b.Add(time.Second)
	if _, ok := b.Wait(after); !ok {
		t.Fatal("the probe of the new window may not start")
	}
	b.Start(after)
	if wait, ok := b.Wait(after); ok || wait != 0 {
		t.Fatalf("a second request during the probe: wait %v ok %v, want to wait for the probe", wait, ok)
	}
	// The answer starts the new window.
	b.Finish(after, pacing.Budget{Limit: 10, Remaining: 9, ResetIn: time.Second, Source: "openai"}, true)
	if st := b.State(after); !st.Active || st.Left != 9 {
		t.Fatalf("state %+v, want the new window", st)
	}
	// A probe answered without a budget: the destination stopped reporting one.
	later := after.Add(time.Second)
	b.Start(later)
	b.Finish(later, pacing.Budget{}, true)
	if st := b.State(later); st.Active || st.RPS != 50 {
		t.Fatalf("state %+v, want off at the ceiling", st)
	}
	if _, ok := b.Wait(later); !ok {
		t.Fatal("off, yet holding")
	}
}

func TestBudgetPacerCountsRequestsInFlight(t *testing.T) {
	t.Parallel()
	b := pacing.NewBudgetPacer(1000)
	for range 4 {
		b.Start(t0b)
	}
	// One answer, three still out: they may not be counted in 50 yet.
	b.Finish(t0b, pacing.Budget{Limit: 100, Remaining: 50, ResetIn: 10 * time.Second, Source: "github"}, true)
	if st := b.State(t0b); st.Left != 47 {
		t.Fatalf("left %v, want 50 − 3 in flight", st.Left)
	}
	// A stale answer reporting more does not raise it; a jump beyond what
	// could be left is a new window.
	b.Finish(t0b, pacing.Budget{Limit: 100, Remaining: 50, ResetIn: 10 * time.Second, Source: "github"}, true)
	if st := b.State(t0b); st.Left != 47 {
		t.Fatalf("left %v after a stale answer, want 47", st.Left)
	}
	b.Finish(t0b, pacing.Budget{Limit: 100, Remaining: 99, ResetIn: 10 * time.Second, Source: "github"}, true)
	if st := b.State(t0b); st.Left != 98 {
		t.Fatalf("left %v after a new window, want 99 − 1 still in flight", st.Left)
	}
}

func TestBudgetPacerCancelUndoesAStart(t *testing.T) {
	t.Parallel()
	b := pacing.NewBudgetPacer(1000)
	b.Start(t0b)
	b.Finish(t0b, pacing.Budget{Limit: 100, Remaining: 50, ResetIn: 10 * time.Second, Source: "github"}, true)
	before := b.State(t0b)
	b.Start(t0b)
	if _, ok := b.Wait(t0b); ok {
		t.Fatal("no spacing after a start")
	}
	b.Cancel()
	if after := b.State(t0b); after != before {
		t.Fatalf("after cancel %+v, want %+v", after, before)
	}
	if _, ok := b.Wait(t0b); !ok {
		t.Fatal("cancel left the spacing in place")
	}
}

func TestParseBudget(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	tests := []struct {
		name string
		h    http.Header
		want pacing.Budget
	}{
		{"github", h("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "37", "X-RateLimit-Reset", "1700000060"),
			pacing.Budget{Limit: 5000, Remaining: 37, ResetIn: time.Minute, Source: "github"}},
		{"openai", h("X-Ratelimit-Limit-Requests", "60", "X-Ratelimit-Remaining-Requests", "59", "X-Ratelimit-Reset-Requests", "1s"),
			pacing.Budget{Limit: 60, Remaining: 59, ResetIn: time.Second, Source: "openai"}},
		{"ietf fields", h("RateLimit-Limit", "100", "RateLimit-Remaining", "40", "RateLimit-Reset", "5"),
			pacing.Budget{Limit: 100, Remaining: 40, ResetIn: 5 * time.Second, Source: "ietf"}},
		{"ietf dictionary", h("RateLimit", "limit=100, remaining=40, reset=5"),
			pacing.Budget{Limit: 100, Remaining: 40, ResetIn: 5 * time.Second, Source: "ietf"}},
		{"ietf items: the tightest wins, q and w from the policy", h("RateLimit", `"hour";r=900;t=1800, "minute";r=5`,
			"RateLimit-Policy", `"hour";q=1000;w=3600, "minute";q=60;w=60`),
			pacing.Budget{Limit: 60, Remaining: 5, ResetIn: time.Minute, Source: "ietf"}},
		{"no reset", h("X-RateLimit-Remaining", "10"), pacing.Budget{}},
		{"reset passed", h("X-RateLimit-Remaining", "10", "X-RateLimit-Reset", "1699999999"), pacing.Budget{}},
		{"negative remaining", h("RateLimit-Remaining", "-1", "RateLimit-Reset", "5"), pacing.Budget{}},
		{"limit below remaining is dropped", h("RateLimit-Limit", "10", "RateLimit-Remaining", "40", "RateLimit-Reset", "5"),
			pacing.Budget{Remaining: 40, ResetIn: 5 * time.Second, Source: "ietf"}},
	}
	for _, tc := range tests {
		if got := pacing.ParseBudget(tc.h, now); got != tc.want {
			t.Errorf("%s: ParseBudget = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
