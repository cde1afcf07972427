package dispatch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// stepClock is a fake ports.Clock: time moves only when the test advances
// it, and every timer made is announced on made so the test can see the
// wait asked for.
type stepClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*stepTimer
	made   chan time.Duration
}

func newStepClock() *stepClock {
	return &stepClock{now: time.Unix(1_700_000_000, 0), made: make(chan time.Duration, 64)}
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) NewTimer(d time.Duration) ports.Timer {
	c.mu.Lock()
	t := &stepTimer{c: c, ch: make(chan time.Time, 1), at: c.now.Add(d), armed: true}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	c.made <- d
	return t
}

// advance moves time on by d and fires the timers that came due.
func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if t.armed && !t.at.After(c.now) {
			t.armed = false
			t.ch <- c.now
		}
	}
}

type stepTimer struct {
	c     *stepClock
	ch    chan time.Time
	at    time.Time
	armed bool
}

func (t *stepTimer) C() <-chan time.Time { return t.ch }

func (t *stepTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.armed = false
	return was
}

func (t *stepTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.at, t.armed = t.c.now.Add(d), true
	return was
}

var errConnTerminated = domain.Unavailable("job store write failed",
	errors.New("FATAL: terminating connection due to administrator command (SQLSTATE 57P01)"))

// A write that fails is tried again after 50 ms, doubling to 5 s, until it
// commits.
func TestPersistRetriesWithBoundedBackoffUntilCommitted(t *testing.T) {
	t.Parallel()
	clock := newStepClock()
	const failures = 9
	tries := 0
	done := make(chan error, 1)
	go func() {
		done <- persist(t.Context(), clock, zap.NewNop(), "job result", "j1", func(context.Context) error {
			tries++
			if tries <= failures {
				return errConnTerminated
			}
			return nil
		})
	}()
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		select {
		case d := <-clock.made:
			if d != w {
				t.Fatalf("wait %d: %v, want %v", i+1, d, w)
			}
			select {
			case err := <-done:
				t.Fatalf("persist returned %v before its wait %d was over", err, i+1)
			default:
			}
			clock.advance(d)
		case err := <-done:
			t.Fatalf("persist returned %v after %d tries, want %d", err, tries, failures+1)
		case <-time.After(10 * time.Second):
			t.Fatalf("no wait %d", i+1)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("persist = %v, want nil once the write commits", err)
	}
	if tries != failures+1 {
		t.Fatalf("%d tries, want %d", tries, failures+1)
	}
}

// A job that vanished, or a closed store, ends the tries at once.
func TestPersistStopsOnNotFoundAndClosed(t *testing.T) {
	t.Parallel()
	for _, want := range []error{domain.ErrNotFound, domain.ErrClosed} {
		clock := newStepClock()
		tries := 0
		err := persist(t.Context(), clock, zap.NewNop(), "retry", "j1", func(context.Context) error {
			tries++
			return want
		})
		if !errors.Is(err, want) || tries != 1 || len(clock.made) != 0 {
			t.Fatalf("persist = %v after %d tries and %d waits, want %v after one try and none", err, tries, len(clock.made), want)
		}
	}
}

// Stopping ends the waiting: persist gives up with the write's error, and
// the write's context is not cancelled by the stop.
func TestPersistGivesUpWhenStopping(t *testing.T) {
	t.Parallel()
	clock := newStepClock()
	stop, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	var writeCtxErr error
	go func() {
		done <- persist(stop, clock, zap.NewNop(), "webhook delivery", "j1", func(ctx context.Context) error {
			writeCtxErr = ctx.Err()
			return errConnTerminated
		})
	}()
	<-clock.made // waiting after the first failure
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, errConnTerminated) {
			t.Fatalf("persist = %v, want the write's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("persist kept waiting after stop")
	}
	if writeCtxErr != nil {
		t.Fatalf("the write ran with a cancelled context: %v", writeCtxErr)
	}
	// Already stopping: one try, no wait.
	tries := 0
	err := persist(stop, clock, zap.NewNop(), "retry", "j2", func(context.Context) error { tries++; return errConnTerminated })
	if err == nil || tries != 1 || len(clock.made) != 0 {
		t.Fatalf("stopped persist: err %v, %d tries, %d waits", err, tries, len(clock.made))
	}
}
