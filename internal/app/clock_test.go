package app_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/clocktest"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Every test in this package runs on its own fake clock (clocktest),
// shared by everything the test builds with its t — the service, its
// store, the test's upstreams (which record arrivals on it) and waitFor,
// which moves it with a clocktest.Driver: to the next armed timer, once
// the work in flight is done. Timing is asserted on that clock, exactly.
// A test that must run on the real clock says so with wallClock, first
// thing, and a comment at its top ("wall clock: …").
//
// Tests on the fake clock do not call t.Parallel: the driver judges that
// the work in flight is done by the whole process being idle, which a
// neighbour test would hide. (Wall-clock tests may: they run after the
// others.)

// testT0 is where every test's clock starts (a whole second: reset
// headers in whole seconds land exactly).
var testT0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

type testClock struct {
	clk *clocktest.Clock // nil on the wall clock
	drv *clocktest.Driver

	mu    sync.Mutex
	gates []*clocktest.Gate
}

var clocks sync.Map // *testing.T → *testClock

// clockOf returns t's clock, making it on first use.
func clockOf(t *testing.T) *testClock {
	if c, ok := clocks.Load(t); ok {
		return c.(*testClock)
	}
	clk := clocktest.New(testT0)
	c, loaded := clocks.LoadOrStore(t, &testClock{clk: clk, drv: clocktest.NewDriver(t, clk)})
	if !loaded {
		t.Cleanup(func() { clocks.Delete(t) })
	}
	return c.(*testClock)
}

// wallClock runs t on the real clock. It must come before anything that
// uses t's clock.
func wallClock(t *testing.T) {
	t.Helper()
	if _, loaded := clocks.LoadOrStore(t, &testClock{}); loaded {
		t.Fatal("wallClock must come before the test's clock is used")
	}
	t.Cleanup(func() { clocks.Delete(t) })
}

func (c *testClock) fake() bool { return c.clk != nil }

// clock is the ports.Clock a service under test runs on.
func (c *testClock) clock() ports.Clock {
	if c.clk == nil {
		return ports.SystemClock{}
	}
	return c.clk
}

func (c *testClock) now() time.Time {
	if c.clk == nil {
		return time.Now()
	}
	return c.clk.Now()
}

// doer wraps d so that the driver waits for the requests it sends.
func (c *testClock) doer(d ports.Doer) ports.Doer {
	if c.clk == nil {
		return d
	}
	return c.clk.Doer(d)
}

// now is the time on t's clock.
func now(t *testing.T) time.Time { return clockOf(t).now() }

// newStore is an in-memory store whose expiry follows t's clock.
func newStore(t *testing.T) *memory.Store { return memory.New(clockOf(t).now) }

// waitFor waits until cond holds: on a fake clock by moving it (a timer at
// a time, each once the work in flight is done), on the wall clock by
// polling. Either way it gives up after 10 s of real time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if c := clockOf(t); c.fake() {
		c.drv.Until(what, cond)
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// elapse lets d pass on t's fake clock, firing every timer on the way.
func elapse(t *testing.T, d time.Duration) {
	t.Helper()
	c := clockOf(t)
	if !c.fake() {
		t.Fatal("elapse needs the fake clock")
	}
	c.drv.For(d)
}

// settle waits until the work in flight is done, without moving t's clock.
func settle(t *testing.T) {
	t.Helper()
	if c := clockOf(t); c.fake() {
		c.drv.Settle()
	}
}

// since is how long t's fake clock has run.
func since(t *testing.T) time.Duration { return now(t).Sub(testT0) }

// sleep holds a handler for d of t's clock (or until the request ends).
func sleep(t *testing.T, ctx context.Context, d time.Duration) {
	if c := clockOf(t); c.fake() {
		_ = c.clk.Sleep(ctx, d)
		return
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// newGate returns a gate for t's handlers to wait at: on the fake clock the
// wait does not hold the clock back. The gate opens at the end of the test
// at the latest, so no handler is left waiting.
func newGate(t *testing.T) *clocktest.Gate {
	c := clockOf(t)
	g := clocktest.NewGate(c.clk)
	c.mu.Lock()
	c.gates = append(c.gates, g)
	c.mu.Unlock()
	t.Cleanup(g.Open)
	return g
}

// openGates opens every gate of the test.
func (c *testClock) openGates() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range c.gates {
		g.Open()
	}
}

// stopService stops svc at the end of a test. Every gate of the test opens
// first (no handler is left waiting), and on a fake clock the clock moves
// while running attempts finish: they may be waiting for it.
func stopService(t *testing.T, svc interface{ Stop(context.Context) error }) {
	t.Helper()
	c := clockOf(t)
	c.openGates()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !c.fake() {
		if err := svc.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		return
	}
	errc := make(chan error, 1)
	go func() { errc <- svc.Stop(ctx) }()
	if err := recv(t, "the service to stop", errc); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// recv waits for a value on ch.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	var v T
	waitFor(t, what, func() bool {
		select {
		case v = <-ch:
			return true
		default:
			return false
		}
	})
	return v
}
