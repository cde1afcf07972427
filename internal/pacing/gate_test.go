package pacing_test

import (
	"testing"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

func TestNewGateLimitFloor(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want int }{
		{1, 1}, {3, 3}, {1000, 1000}, {0, 1}, {-1, 1}, {-100, 1},
	}
	for _, tc := range tests {
		g := pacing.NewGate(tc.in)
		if g.Limit() != tc.want {
			t.Errorf("NewGate(%d).Limit() = %d, want %d", tc.in, g.Limit(), tc.want)
		}
		if g.Running() != 0 || !g.Open() {
			t.Errorf("NewGate(%d): Running=%d Open=%v, want 0 and open", tc.in, g.Running(), g.Open())
		}
	}
}

func TestGateAcquireUpToLimit(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{1, 2, 5} {
		g := pacing.NewGate(limit)
		for i := range limit {
			if !g.Open() {
				t.Fatalf("limit %d: gate closed after %d acquires", limit, i)
			}
			if !g.Acquire() {
				t.Fatalf("limit %d: Acquire %d refused", limit, i+1)
			}
			if g.Running() != i+1 {
				t.Fatalf("limit %d: Running = %d, want %d", limit, g.Running(), i+1)
			}
		}
		if g.Open() {
			t.Fatalf("limit %d: gate open when full", limit)
		}
		if g.Acquire() {
			t.Fatalf("limit %d: Acquire beyond the limit succeeded", limit)
		}
		if g.Running() != limit {
			t.Fatalf("limit %d: refused Acquire changed Running to %d", limit, g.Running())
		}
		g.Release()
		if !g.Open() || g.Running() != limit-1 {
			t.Fatalf("limit %d: after Release Open=%v Running=%d", limit, g.Open(), g.Running())
		}
		if !g.Acquire() {
			t.Fatalf("limit %d: Acquire after Release refused", limit)
		}
		if g.Acquire() {
			t.Fatalf("limit %d: Acquire beyond the limit after Release succeeded", limit)
		}
	}
}

func TestGateReleaseWhenEmpty(t *testing.T) {
	t.Parallel()
	g := pacing.NewGate(2)
	g.Release()
	g.Release()
	if g.Running() != 0 {
		t.Fatalf("Running = %d after Release on an empty gate, want 0", g.Running())
	}
	// A spurious Release must not create extra capacity.
	g.Acquire()
	g.Acquire()
	if g.Acquire() {
		t.Fatal("extra Acquire succeeded after spurious Releases")
	}
}

func TestGateSetLimitLowerBelowRunning(t *testing.T) {
	t.Parallel()
	g := pacing.NewGate(5)
	for range 5 {
		g.Acquire()
	}
	g.SetLimit(2)
	if g.Limit() != 2 {
		t.Fatalf("Limit = %d, want 2", g.Limit())
	}
	if g.Running() != 5 {
		t.Fatalf("SetLimit changed Running to %d; running events must finish", g.Running())
	}
	// Blocks until the count drops under the new limit.
	for _, running := range []int{5, 4, 3, 2} {
		if g.Running() != running {
			t.Fatalf("Running = %d, want %d", g.Running(), running)
		}
		if g.Open() || g.Acquire() {
			t.Fatalf("gate admitted an event with %d running and limit 2", running)
		}
		g.Release()
	}
	if g.Running() != 1 || !g.Open() {
		t.Fatalf("Running=%d Open=%v, want 1 and open", g.Running(), g.Open())
	}
	if !g.Acquire() {
		t.Fatal("Acquire refused with 1 running and limit 2")
	}
	if g.Acquire() {
		t.Fatal("Acquire succeeded with 2 running and limit 2")
	}
}

func TestGateSetLimitHigher(t *testing.T) {
	t.Parallel()
	g := pacing.NewGate(1)
	g.Acquire()
	if g.Acquire() {
		t.Fatal("second Acquire at limit 1 succeeded")
	}
	g.SetLimit(3)
	if !g.Acquire() || !g.Acquire() {
		t.Fatal("Acquire refused after raising the limit to 3")
	}
	if g.Acquire() {
		t.Fatal("fourth Acquire at limit 3 succeeded")
	}
}

func TestGateSetLimitFloor(t *testing.T) {
	t.Parallel()
	for _, bad := range []int{0, -1, -50} {
		g := pacing.NewGate(4)
		g.SetLimit(bad)
		if g.Limit() != 1 {
			t.Errorf("SetLimit(%d): Limit = %d, want 1", bad, g.Limit())
		}
		if !g.Acquire() {
			t.Errorf("SetLimit(%d): gate admits nothing", bad)
		}
		if g.Acquire() {
			t.Errorf("SetLimit(%d): gate admits more than one", bad)
		}
	}
}
