package pacing_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

// t0 is the fixed base of every simulated timeline.
var t0 = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestNewLimiterRateAndInterval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rate     float64
		wantRate float64
		interval time.Duration
	}{
		{1, 1, time.Second},
		{2, 2, 500 * time.Millisecond},
		{0.5, 0.5, 2 * time.Second},
		{3, 3, 333333333 * time.Nanosecond},
		{10, 10, 100 * time.Millisecond},
		{2000, 2000, 500 * time.Microsecond},
		{1e12, 1e12, 1}, // sub-nanosecond interval is clamped to 1ns
		// Invalid rates become 1.
		{0, 1, time.Second},
		{-1, 1, time.Second},
		{-0.0001, 1, time.Second},
		{math.NaN(), 1, time.Second},
		{math.Inf(1), 1, time.Second},
		{math.Inf(-1), 1, time.Second},
	}
	for _, tc := range tests {
		l := pacing.NewLimiter(tc.rate)
		if l.Rate() != tc.wantRate || l.Interval() != tc.interval {
			t.Errorf("NewLimiter(%v): Rate=%v Interval=%v, want %v and %v", tc.rate, l.Rate(), l.Interval(), tc.wantRate, tc.interval)
		}
	}
}

// TestLimiterTinyRate guards against the interval overflowing: a positive
// rate so low that 1/rate does not fit in a Duration must pace (practically)
// forever, never collapse to a 1ns interval.
func TestLimiterTinyRate(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{1e-9, 1e-10, 1e-300, math.SmallestNonzeroFloat64} {
		l := pacing.NewLimiter(rate)
		if l.Rate() != rate {
			t.Errorf("NewLimiter(%g).Rate() = %g", rate, l.Rate())
		}
		if l.Interval() < 277*time.Hour {
			t.Errorf("NewLimiter(%g).Interval() = %v, want a huge interval", rate, l.Interval())
		}
		if w := l.Take(t0); w != 0 {
			t.Errorf("rate %g: first Take = %v", rate, w)
		}
		if w := l.Take(at(time.Hour)); w < 276*time.Hour {
			t.Errorf("rate %g: Take an hour later = %v, want to wait (practically) forever", rate, w)
		}
		// Switching back to a normal rate recovers.
		l.SetRate(10)
		if l.Interval() != 100*time.Millisecond {
			t.Errorf("rate %g: after SetRate(10) Interval = %v", rate, l.Interval())
		}
		if w := l.Take(at(time.Hour)); w != 0 {
			t.Errorf("rate %g: after SetRate(10) Take = %v, want 0", rate, w)
		}
	}
}

func TestLimiterSetRateInvalidBecomesOne(t *testing.T) {
	t.Parallel()
	for _, bad := range []float64{0, -5, math.NaN(), math.Inf(1), math.Inf(-1)} {
		l := pacing.NewLimiter(50)
		l.SetRate(bad)
		if l.Rate() != 1 || l.Interval() != time.Second {
			t.Errorf("SetRate(%v): Rate=%v Interval=%v, want 1 and 1s", bad, l.Rate(), l.Interval())
		}
	}
}

func TestLimiterFirstTakeAllowed(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{0.5, 1, 10, 2000} {
		l := pacing.NewLimiter(rate)
		if w := l.Wait(t0); w != 0 {
			t.Errorf("rate %v: fresh Wait = %v, want 0", rate, w)
		}
		if w := l.Take(t0); w != 0 {
			t.Errorf("rate %v: first Take = %v, want 0", rate, w)
		}
		if w := l.Take(t0); w != l.Interval() {
			t.Errorf("rate %v: immediate second Take = %v, want %v", rate, w, l.Interval())
		}
	}
}

func TestLimiterSpacing(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{0.5, 1, 3, 10, 2000} {
		l := pacing.NewLimiter(rate)
		iv := l.Interval()
		for i := range 50 {
			start := at(time.Duration(i) * iv)
			if i > 0 {
				if w := l.Take(start.Add(-time.Nanosecond)); w != time.Nanosecond {
					t.Fatalf("rate %v event %d: Take 1ns early = %v, want 1ns", rate, i, w)
				}
			}
			if w := l.Take(start); w != 0 {
				t.Fatalf("rate %v event %d: Take on the grid = %v, want 0", rate, i, w)
			}
		}
	}
}

func TestLimiterEarlyTakeDoesNotConsume(t *testing.T) {
	t.Parallel()
	l := pacing.NewLimiter(10) // 100ms
	if w := l.Take(t0); w != 0 {
		t.Fatalf("first Take = %v", w)
	}
	for range 5 {
		if w := l.Take(at(40 * time.Millisecond)); w != 60*time.Millisecond {
			t.Fatalf("early Take = %v, want 60ms", w)
		}
	}
	if w := l.Wait(at(40 * time.Millisecond)); w != 60*time.Millisecond {
		t.Fatalf("Wait = %v, want 60ms", w)
	}
	if w := l.Take(at(100 * time.Millisecond)); w != 0 {
		t.Fatalf("Take on time = %v, want 0 (early attempts must not consume)", w)
	}
	if w := l.Take(at(100 * time.Millisecond)); w != 100*time.Millisecond {
		t.Fatalf("Take right after = %v, want 100ms", w)
	}
}

func TestLimiterWaitDoesNotConsume(t *testing.T) {
	t.Parallel()
	l := pacing.NewLimiter(10)
	for range 3 {
		if w := l.Wait(t0); w != 0 {
			t.Fatalf("Wait = %v, want 0", w)
		}
	}
	if w := l.Take(t0); w != 0 {
		t.Fatalf("Take after Waits = %v, want 0", w)
	}
	if w := l.Wait(at(100 * time.Millisecond)); w != 0 {
		t.Fatalf("Wait at the slot = %v, want 0", w)
	}
	if w := l.Wait(at(100 * time.Millisecond)); w != 0 {
		t.Fatalf("second Wait at the slot = %v, want 0", w)
	}
	if w := l.Take(at(100 * time.Millisecond)); w != 0 {
		t.Fatalf("Take at the slot = %v, want 0", w)
	}
}

// simulate runs a caller that calls Take at now, starts the event when it is
// allowed, and otherwise sleeps for the returned wait plus late() (a timer
// that fires late). It returns how many events started before end.
func simulate(l *pacing.Limiter, end time.Duration, late func() time.Duration) (n int) {
	now := t0
	for now.Before(at(end)) {
		if w := l.Take(now); w > 0 {
			now = now.Add(w + late())
			continue
		}
		n++
	}
	return n
}

func TestLimiterCatchesUpOnLateWakeups(t *testing.T) {
	t.Parallel()
	const run = 10 * time.Second
	tests := []struct {
		name string
		rate float64
		late time.Duration
	}{
		{"2000rps 300us late", 2000, 300 * time.Microsecond},
		{"2000rps 1ms late (twice the interval)", 2000, time.Millisecond},
		{"2000rps late by exactly CatchUp", 2000, pacing.CatchUp},
		{"1000rps 1.5ms late", 1000, 1500 * time.Microsecond},
		{"100rps 2ms late", 100, 2 * time.Millisecond},
		{"10rps 1ms late", 10, time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := pacing.NewLimiter(tc.rate)
			got := simulate(l, run, func() time.Duration { return tc.late })
			want := tc.rate * run.Seconds()
			if math.Abs(float64(got)-want) > want*0.01 {
				t.Fatalf("%d events in %v, want %v ±1%%", got, run, want)
			}
		})
	}
}

func TestLimiterCatchesUpOnRandomLateness(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	l := pacing.NewLimiter(2000)
	got := simulate(l, 10*time.Second, func() time.Duration {
		return time.Duration(rng.Int64N(int64(1500 * time.Microsecond)))
	})
	if want := 20000.0; math.Abs(float64(got)-want) > want*0.01 {
		t.Fatalf("%d events, want 20000 ±1%%", got)
	}
}

func TestLimiterLatenessBeyondWindowLosesThroughput(t *testing.T) {
	t.Parallel()
	// A caller always 7ms late at 2000 rps is beyond the forgiven window
	// (CatchUp plus the jitter share): the grid restarts each time, so it
	// gets one event per 7.5ms, not 2000/s.
	l := pacing.NewLimiter(2000)
	got := simulate(l, 10*time.Second, func() time.Duration { return 7 * time.Millisecond })
	if want := int(10 * time.Second / (7500 * time.Microsecond)); got < want-1 || got > want+1 {
		t.Fatalf("%d events, want about %d", got, want)
	}
}

// TestLimiterNeverExceedsGrid checks the burst bound: by any time T, at most
// floor((T-t0)/interval)+1 events have started, whatever the wake-up pattern.
func TestLimiterNeverExceedsGrid(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	for _, rate := range []float64{3, 100, 2000} {
		l := pacing.NewLimiter(rate)
		iv := l.Interval()
		now, n := t0, 0
		for range 200000 {
			if l.Take(now) == 0 {
				n++
				if limit := int(now.Sub(t0)/iv) + 1; n > limit {
					t.Fatalf("rate %v: %d events by %v, grid allows %d", rate, n, now.Sub(t0), limit)
				}
			}
			// Mostly short hops, occasionally a long idle gap.
			step := time.Duration(rng.Int64N(int64(2 * iv)))
			if rng.IntN(50) == 0 {
				step = time.Duration(rng.Int64N(int64(20 * iv)))
			}
			now = now.Add(step)
		}
		if n == 0 {
			t.Fatalf("rate %v: no events", rate)
		}
	}
}

func TestLimiterCatchUpWindowBoundary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		rate   float64
		window time.Duration // Forgiven(): the jitter share of an interval plus CatchUp
	}{
		{"slow rate", 10, 10*time.Millisecond + pacing.CatchUp},
		{"fast rate", 2000, 50*time.Microsecond + pacing.CatchUp},
		{"rate where interval equals CatchUp", 500, 200*time.Microsecond + pacing.CatchUp},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Late by exactly the window: the lateness is made up, so the
			// caller may start again at once (the grid is kept).
			l := pacing.NewLimiter(tc.rate)
			iv := l.Interval()
			l.Take(t0)
			late := at(iv + tc.window)
			if w := l.Take(late); w != 0 {
				t.Fatalf("Take late by the window = %v, want 0", w)
			}
			if w, want := l.Take(late), max(iv-tc.window, 0); w != want {
				t.Fatalf("catch-up Take = %v, want %v (grid kept)", w, want)
			}

			// Late by a nanosecond more: the grid restarts at now, no burst.
			l = pacing.NewLimiter(tc.rate)
			l.Take(t0)
			late = at(iv + tc.window + time.Nanosecond)
			if w := l.Take(late); w != 0 {
				t.Fatalf("Take late beyond the window = %v, want 0", w)
			}
			if w := l.Take(late); w != iv {
				t.Fatalf("Take after restart = %v, want a full interval %v", w, iv)
			}
		})
	}
}

// TestLimiterMinimumGap checks that catching up never squeezes two starts
// closer than interval - Forgiven(), whatever the lateness.
func TestLimiterMinimumGap(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 5))
	for _, rate := range []float64{2, 50, 400} {
		l := pacing.NewLimiter(rate)
		iv := l.Interval()
		now, last := t0, time.Time{}
		for range 20000 {
			if w := l.Take(now); w > 0 {
				now = now.Add(w + time.Duration(rng.Int64N(int64(iv))))
				continue
			}
			if !last.IsZero() {
				if gap := now.Sub(last); gap < iv-l.Forgiven() {
					t.Fatalf("rate %v: gap %v < interval %v - Forgiven %v", rate, gap, iv, l.Forgiven())
				}
			}
			last = now
		}
	}
}

func TestLimiterIdleGapRestartsGrid(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{1, 10, 2000} {
		l := pacing.NewLimiter(rate)
		iv := l.Interval()
		for i := range 5 {
			if w := l.Take(at(time.Duration(i) * iv)); w != 0 {
				t.Fatalf("rate %v: warm-up event %d refused (%v)", rate, i, w)
			}
		}
		resume := at(time.Hour)
		if w := l.Take(resume); w != 0 {
			t.Fatalf("rate %v: first event after idle = %v, want 0", rate, w)
		}
		// An idle lane must not have saved up a burst.
		if w := l.Take(resume); w != iv {
			t.Fatalf("rate %v: second event after idle = %v, want %v", rate, w, iv)
		}
		if w := l.Take(resume.Add(iv)); w != 0 {
			t.Fatalf("rate %v: event one interval after resume = %v, want 0", rate, w)
		}
	}
}

func TestLimiterSetRateLowerAppliesToNextEvent(t *testing.T) {
	t.Parallel()
	l := pacing.NewLimiter(10) // 100ms
	l.Take(t0)
	l.SetRate(2) // 500ms
	if l.Rate() != 2 || l.Interval() != 500*time.Millisecond {
		t.Fatalf("Rate=%v Interval=%v", l.Rate(), l.Interval())
	}
	if w := l.Take(at(100 * time.Millisecond)); w != 400*time.Millisecond {
		t.Fatalf("Take at old slot = %v, want 400ms", w)
	}
	if w := l.Take(at(500*time.Millisecond - time.Nanosecond)); w != time.Nanosecond {
		t.Fatalf("Take just before new slot = %v, want 1ns", w)
	}
	if w := l.Take(at(500 * time.Millisecond)); w != 0 {
		t.Fatalf("Take at new slot = %v, want 0", w)
	}
	if w := l.Take(at(500 * time.Millisecond)); w != 500*time.Millisecond {
		t.Fatalf("following wait = %v, want 500ms", w)
	}
}

func TestLimiterSetRateHigherShortensPendingWait(t *testing.T) {
	t.Parallel()
	l := pacing.NewLimiter(1) // 1s
	l.Take(t0)
	if w := l.Wait(at(10 * time.Millisecond)); w != 990*time.Millisecond {
		t.Fatalf("Wait before SetRate = %v, want 990ms", w)
	}
	l.SetRate(10) // 100ms
	if w := l.Wait(at(10 * time.Millisecond)); w != 90*time.Millisecond {
		t.Fatalf("Wait after SetRate = %v, want 90ms", w)
	}
	if w := l.Take(at(100 * time.Millisecond)); w != 0 {
		t.Fatalf("Take at new slot = %v, want 0", w)
	}
	if w := l.Take(at(100 * time.Millisecond)); w != 100*time.Millisecond {
		t.Fatalf("following wait = %v, want 100ms", w)
	}
}

func TestLimiterSetRateHigherWhenSlotAlreadyDue(t *testing.T) {
	t.Parallel()
	// Raising the rate after the previous event's new interval has already
	// elapsed makes the next event due at once.
	l := pacing.NewLimiter(1)
	l.Take(t0)
	l.SetRate(100) // 10ms
	if w := l.Take(at(50 * time.Millisecond)); w != 0 {
		t.Fatalf("Take = %v, want 0", w)
	}
}

func TestLimiterSetRateBeforeFirstTake(t *testing.T) {
	t.Parallel()
	l := pacing.NewLimiter(1)
	l.SetRate(4)
	if w := l.Take(t0); w != 0 {
		t.Fatalf("first Take after SetRate = %v, want 0", w)
	}
	if w := l.Take(t0); w != 250*time.Millisecond {
		t.Fatalf("second Take = %v, want 250ms", w)
	}
}

func TestLimiterSetRateSameRateKeepsSlot(t *testing.T) {
	t.Parallel()
	l := pacing.NewLimiter(10)
	l.Take(t0)
	l.SetRate(10)
	if w := l.Wait(t0); w != 100*time.Millisecond {
		t.Fatalf("Wait = %v, want 100ms", w)
	}
}

func TestLimiterDelay(t *testing.T) {
	t.Parallel()
	l := pacing.NewLimiter(10) // 100ms
	l.Take(t0)
	l.Delay(at(2 * time.Second))
	if w := l.Take(at(100 * time.Millisecond)); w != 1900*time.Millisecond {
		t.Fatalf("Take at the old slot after Delay = %v, want 1.9s", w)
	}
	if w := l.Take(at(2 * time.Second)); w != 0 {
		t.Fatalf("Take at the delayed slot = %v, want 0", w)
	}
	if w := l.Take(at(2 * time.Second)); w != 100*time.Millisecond {
		t.Fatalf("Take after the delayed slot = %v, want 100ms (normal spacing resumes)", w)
	}
}

func TestLimiterDelayNeverEarlier(t *testing.T) {
	t.Parallel()
	l := pacing.NewLimiter(1) // 1s
	l.Take(t0)
	l.Delay(at(200 * time.Millisecond)) // before the next slot: no effect
	if w := l.Wait(at(100 * time.Millisecond)); w != 900*time.Millisecond {
		t.Fatalf("Wait after an earlier Delay = %v, want 900ms", w)
	}
	l.Delay(at(5 * time.Second))
	l.Delay(at(3 * time.Second)) // a shorter later Delay must not undo the longer one
	if w := l.Wait(at(time.Second)); w != 4*time.Second {
		t.Fatalf("Wait = %v, want 4s", w)
	}
}

func TestLimiterDelayOnFreshLimiter(t *testing.T) {
	t.Parallel()
	l := pacing.NewLimiter(10)
	l.Delay(at(time.Second))
	if w := l.Take(t0); w != time.Second {
		t.Fatalf("Take before the delay = %v, want 1s", w)
	}
	if w := l.Take(at(time.Second)); w != 0 {
		t.Fatalf("Take at the delay = %v, want 0", w)
	}

	// A delay already in the past does not block.
	l = pacing.NewLimiter(10)
	l.Delay(at(-time.Minute))
	if w := l.Take(t0); w != 0 {
		t.Fatalf("Take after a past delay = %v, want 0", w)
	}
	if w := l.Take(t0); w != 100*time.Millisecond {
		t.Fatalf("second Take after a past delay = %v, want 100ms (no burst)", w)
	}
}

func TestLimiterDelaySurvivesRateChanges(t *testing.T) {
	t.Parallel()
	l := pacing.NewLimiter(1)
	l.Take(t0)
	l.Delay(at(10 * time.Second))
	l.SetRate(100) // a faster pace must not cut the upstream's "retry after" short
	if w := l.Wait(t0); w != 10*time.Second {
		t.Fatalf("Wait after Delay then SetRate = %v, want 10s", w)
	}
}

// TestLimiterKeepsRateUnderJitter simulates the lane: it sleeps for the
// limiter's wait plus Jitter, and wakes a little late on top. The average rate
// must stay exact — jitter delays single starts, not the grid.
func TestLimiterKeepsRateUnderJitter(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 9))
	for _, rate := range []float64{2, 20, 200, 2000} {
		l := pacing.NewLimiter(rate)
		now, n := t0, 0
		end := at(time.Duration(2000/rate*float64(time.Second)) + time.Second)
		for now.Before(end) {
			if w := l.Take(now); w > 0 {
				now = now.Add(w + pacing.Jitter(l.Interval(), rng.Float64) + time.Duration(rng.Int64N(int64(300*time.Microsecond))))
				continue
			}
			n++
		}
		want := rate * end.Sub(t0).Seconds()
		if math.Abs(float64(n)-want) > want*0.01+1 {
			t.Errorf("rate %v: %d events, want %.0f ±1%%", rate, n, want)
		}
	}
}
