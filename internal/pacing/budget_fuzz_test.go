package pacing_test

import (
	"math"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

// FuzzParseBudget: whatever the headers, a budget is either absent (the
// zero value) or sane — remaining a number >= 0, a reset in (0, MaxPause],
// a limit of 0 or at least remaining — and an exhausted family
// (ParseRateLimit) always shows as a budget with nothing left.
func FuzzParseBudget(f *testing.F) {
	f.Add("X-RateLimit-Limit: 100\nX-RateLimit-Remaining: 37\nX-RateLimit-Reset: 1700000060", int64(1_700_000_000))
	f.Add("RateLimit: \"a\";r=0, \"b\";r=5;t=2\nRateLimit-Policy: \"a\";q=10;w=30", int64(0))
	f.Add("RateLimit: limit=10, remaining=0, reset=20\nx-ratelimit-remaining-requests: 3\nx-ratelimit-reset-requests: 1m", int64(0))
	f.Fuzz(func(t *testing.T, raw string, nowUnix int64) {
		now := time.Unix(nowUnix, 0)
		h := parseHeaderBlock(raw)
		b := pacing.ParseBudget(h, now)
		if !b.Known() {
			if b != (pacing.Budget{}) {
				t.Fatalf("unknown budget with values: %+v", b)
			}
		} else {
			if !(b.Remaining >= 0) || math.IsInf(b.Remaining, 0) {
				t.Fatalf("Remaining = %v", b.Remaining)
			}
			if b.ResetIn <= 0 || b.ResetIn > pacing.MaxPause {
				t.Fatalf("ResetIn = %v", b.ResetIn)
			}
			if b.Limit != 0 && !(b.Limit >= b.Remaining) {
				t.Fatalf("Limit %v below Remaining %v", b.Limit, b.Remaining)
			}
		}
		if _, _, exhausted := pacing.ParseRateLimit(h, now); exhausted && (!b.Known() || b.Remaining != 0) {
			t.Fatalf("an exhausted family, yet budget %+v", b)
		}
	})
}

// FuzzBudgetPacer drives a pacer with arbitrary starts, answers and time
// steps against a destination that counts each request as it arrives and
// reports its window when it answers: the pacer never panics, its rate
// stays in [0, ceiling], a wait is never negative, and once it has heard of
// the window it never starts a request with nothing left.
func FuzzBudgetPacer(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 0, 3, 1, 1, 2, 2})
	f.Add([]byte{0, 1, 0, 1, 0, 1, 3, 3, 3, 0, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 254, 0, 0, 1, 1, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const ceiling = 50
		b := pacing.NewBudgetPacer(ceiling)
		now := time.Unix(1_700_000_000, 0)
		w := &window{limit: 20, period: 2 * time.Second, start: now}
		// The first request and its answer: from here on the pacer knows.
		b.Start(now)
		w.hit(now)
		b.Finish(now, w.report(now), true)
		running := 0 // started, not answered
		for _, op := range ops {
			if r := b.Rate(now); !(r >= 0 && r <= ceiling) {
				t.Fatalf("rate %v", r)
			}
			wait, ok := b.Wait(now)
			if wait < 0 {
				t.Fatalf("wait %v", wait)
			}
			switch op % 4 {
			case 0: // start one if allowed
				if ok {
					b.Start(now)
					w.hit(now)
					running++
				}
			case 1: // an answer comes back
				if running > 0 {
					b.Finish(now, w.report(now), true)
					running--
				}
			case 2: // time passes
				now = now.Add(time.Duration(op) * 10 * time.Millisecond)
			case 3: // a request fails without an answer
				if running > 0 {
					b.Finish(now, pacing.Budget{}, false)
					running--
				}
			}
			if w.over != 0 {
				t.Fatalf("a request found the window exhausted (ops %v)", ops)
			}
		}
	})
}
