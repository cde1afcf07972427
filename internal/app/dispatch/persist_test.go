package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/clocktest"
	"github.com/aquiferhq/aquifer/internal/domain"
)

var t0 = time.Unix(1_700_000_000, 0)

// waiting waits until persist is waiting on clock (one timer armed) or has
// returned, and returns the wait it asked for (0 when it returned).
func waiting(t *testing.T, drv *clocktest.Driver, done <-chan error, what string) time.Duration {
	t.Helper()
	clock := drv.Clock()
	drv.Until(what, func() bool { return clock.Pending() == 1 || len(done) > 0 })
	if len(done) > 0 {
		return 0
	}
	next, _ := clock.Next()
	return next.Sub(clock.Now())
}

var errConnTerminated = domain.Unavailable("job store write failed",
	errors.New("FATAL: terminating connection due to administrator command (SQLSTATE 57P01)"))

// A write that fails is tried again after 50 ms, doubling to 5 s, until it
// commits.
func TestPersistRetriesWithBoundedBackoffUntilCommitted(t *testing.T) {
	clock := clocktest.New(t0)
	drv := clocktest.NewDriver(t, clock)
	const failures = 9
	var tries atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- persist(t.Context(), clock, zap.NewNop(), "job result", "j1", func(context.Context) error {
			if tries.Add(1) <= failures {
				return errConnTerminated
			}
			return nil
		})
	}()
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		d := waiting(t, drv, done, fmt.Sprintf("wait %d", i+1))
		if d == 0 {
			t.Fatalf("persist returned %v after %d tries, want %d", <-done, tries.Load(), failures+1)
		}
		if d != w {
			t.Fatalf("wait %d: %v, want %v", i+1, d, w)
		}
		clock.Advance(d)
	}
	if d := waiting(t, drv, done, "persist to return"); d != 0 {
		t.Fatalf("persist waits %v more after the write committed", d)
	}
	if err := <-done; err != nil {
		t.Fatalf("persist = %v, want nil once the write commits", err)
	}
	if tries.Load() != failures+1 {
		t.Fatalf("%d tries, want %d", tries.Load(), failures+1)
	}
	if clock.Since() != 16350*time.Millisecond {
		t.Fatalf("persist took %v of the clock's time, want the sum of its waits (16.35s)", clock.Since())
	}
}

// A job that vanished, or a closed store, ends the tries at once.
func TestPersistStopsOnNotFoundAndClosed(t *testing.T) {
	for _, want := range []error{domain.ErrNotFound, domain.ErrClosed} {
		clock := clocktest.New(t0)
		tries := 0
		err := persist(t.Context(), clock, zap.NewNop(), "retry", "j1", func(context.Context) error {
			tries++
			return want
		})
		if !errors.Is(err, want) || tries != 1 || clock.Pending() != 0 {
			t.Fatalf("persist = %v after %d tries and %d waits, want %v after one try and none", err, tries, clock.Pending(), want)
		}
	}
}

// Stopping ends the waiting: persist gives up with the write's error, and
// the write's context is not cancelled by the stop.
func TestPersistGivesUpWhenStopping(t *testing.T) {
	clock := clocktest.New(t0)
	drv := clocktest.NewDriver(t, clock)
	stop, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	var writeCtxErr error
	go func() {
		done <- persist(stop, clock, zap.NewNop(), "webhook delivery", "j1", func(ctx context.Context) error {
			writeCtxErr = ctx.Err()
			return errConnTerminated
		})
	}()
	if d := waiting(t, drv, done, "the wait after the first failure"); d != persistBackoff {
		t.Fatalf("waiting %v after the first failure, want %v", d, persistBackoff)
	}
	cancel()
	drv.Until("persist to give up", func() bool { return len(done) > 0 })
	if err := <-done; !errors.Is(err, errConnTerminated) {
		t.Fatalf("persist = %v, want the write's error", err)
	}
	if writeCtxErr != nil {
		t.Fatalf("the write ran with a cancelled context: %v", writeCtxErr)
	}
	if clock.Pending() != 0 || clock.Since() != 0 {
		t.Fatalf("after stop: %d timers armed, clock moved %v", clock.Pending(), clock.Since())
	}
	// Already stopping: one try, no wait.
	tries := 0
	err := persist(stop, clock, zap.NewNop(), "retry", "j2", func(context.Context) error { tries++; return errConnTerminated })
	if err == nil || tries != 1 || clock.Pending() != 0 {
		t.Fatalf("stopped persist: err %v, %d tries, %d waits", err, tries, clock.Pending())
	}
}
