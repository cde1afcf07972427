package app_test

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// capacityUpstream is a destination with a fixed capacity and no pacing
// signals: up to capacity requests at once it answers in base; past it a
// request queues and takes base × running ÷ capacity (running counted as it
// arrives, itself included); past 2 × capacity it answers 503 at once. It
// holds its requests on the test's clock (sleep), so latency is exact.
type capacityUpstream struct {
	*upstream
	base     time.Duration
	capacity atomic.Int64
	running  atomic.Int64
	mu       sync.Mutex
	served   []served // by arrival
}

// served is one request as capacityUpstream saw it arrive.
type served struct {
	at      time.Time
	running int64 // requests being served then, itself included
	status  int
}

func newCapacityUpstream(t *testing.T, base time.Duration, capacity int) *capacityUpstream {
	c := &capacityUpstream{base: base}
	c.capacity.Store(int64(capacity))
	c.upstream = newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		n := c.running.Add(1)
		defer c.running.Add(-1)
		capacity := c.capacity.Load()
		s := served{at: now(t), running: n, status: http.StatusOK}
		switch {
		case n > 2*capacity:
			s.status = http.StatusServiceUnavailable
		case n > capacity:
			sleep(t, r.Context(), c.base*time.Duration(n)/time.Duration(capacity))
		default:
			sleep(t, r.Context(), c.base)
		}
		c.mu.Lock()
		c.served = append(c.served, s)
		c.mu.Unlock()
		w.WriteHeader(s.status)
	})
	return c
}

// since returns what arrived at or after from.
func (c *capacityUpstream) since(from time.Time) []served {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []served
	for _, s := range c.served {
		if !s.at.Before(from) {
			out = append(out, s)
		}
	}
	return out
}

// laneConcurrency is the one lane's concurrency limit as the health report
// shows it.
func laneConcurrency(t *testing.T, b *bundle) int {
	t.Helper()
	l := b.svc.Health(t.Context()).Lanes
	if len(l) != 1 {
		t.Fatalf("lanes %+v, want one", l)
	}
	return l[0].MaxConcurrent
}

// An adaptive lane in front of a destination of capacity 40, configured
// with max_concurrent 256 and sending no signals, settles its concurrency
// near 40: no 503s once settled, every request answered in under twice the
// unloaded latency; when the capacity halves, the lane follows within 10 s.
func TestAdaptiveLaneSettlesNearTheDestinationsCapacity(t *testing.T) {
	const capacity, base = 40, 200 * time.Millisecond
	up := newCapacityUpstream(t, base, capacity)
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up.upstream): {RPS: 100000, MaxConcurrent: 256, Adaptive: true}}
		c.Retry = app.RetryPolicy{Attempts: 1}
	})
	// A backlog for 14 s at the destination's maximum of 200/s, then 12 s
	// at half that.
	for i := range 4000 {
		b.enqueue(t, req(fmt.Sprint("a", i), up.URL))
	}
	elapse(t, 10*time.Second)
	settledAt := now(t)
	var lo, hi int = 1 << 30, 0
	for range 16 {
		elapse(t, 250*time.Millisecond)
		c := laneConcurrency(t, b)
		lo, hi = min(lo, c), max(hi, c)
	}
	t.Logf("settled between %d and %d; %d requests in 4 s", lo, hi, len(up.since(settledAt)))
	if lo < capacity*8/10 || hi > capacity*12/10 {
		t.Fatalf("lane concurrency between %d and %d once settled, want within 20%% of the capacity %d", lo, hi, capacity)
	}
	got := up.since(settledAt)
	if len(got) == 0 {
		t.Fatal("no requests once settled")
	}
	for _, s := range got {
		if s.status != http.StatusOK {
			t.Fatalf("a %d at %v once settled (%d running)", s.status, s.at.Sub(testT0), s.running)
		}
		if s.running > capacity*12/10 {
			t.Fatalf("%d requests running at %v once settled, want at most %d", s.running, s.at.Sub(testT0), capacity*12/10)
		}
	}
	// Throughput once settled: at least 90 % of the destination's maximum.
	if rate := float64(len(got)) / 4; rate < 0.9*capacity/base.Seconds() {
		t.Fatalf("%.0f requests/s once settled, want at least 90%% of %.0f", rate, capacity/base.Seconds())
	}

	// The capacity halves: within 10 s the lane follows.
	up.capacity.Store(capacity / 2)
	elapse(t, 10*time.Second)
	lo, hi = 1<<30, 0
	for range 8 {
		elapse(t, 250*time.Millisecond)
		c := laneConcurrency(t, b)
		lo, hi = min(lo, c), max(hi, c)
	}
	t.Logf("after the halving, between %d and %d", lo, hi)
	if lo < capacity/2*8/10 || hi > capacity/2*12/10 {
		t.Fatalf("lane concurrency between %d and %d 10 s after the capacity halved, want within 20%% of %d", lo, hi, capacity/2)
	}
}

// Without adaptive: true the lane keeps its configured concurrency, however
// slow the destination gets.
func TestStaticLaneKeepsItsConfiguredConcurrency(t *testing.T) {
	up := newCapacityUpstream(t, 100*time.Millisecond, 4)
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up.upstream): {RPS: 100000, MaxConcurrent: 6}}
		c.Retry = app.RetryPolicy{Attempts: 1}
	})
	for i := range 120 {
		b.enqueue(t, req(fmt.Sprint("s", i), up.URL))
	}
	elapse(t, 3*time.Second)
	if c := laneConcurrency(t, b); c != 6 {
		t.Fatalf("static lane concurrency %d, want its configured 6", c)
	}
	if m := up.maxConc.Load(); m != 6 {
		t.Fatalf("static lane ran %d at once, want 6", m)
	}
}
