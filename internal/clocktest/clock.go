// Package clocktest is a settable ports.Clock for tests: time stands still
// until the test advances it, and timers fire when it passes their deadline.
// Tests of timing (pacing, backoff, probes, leases) use it so they assert on
// the clock's time, never on how fast the machine happens to be.
package clocktest

import (
	"sort"
	"sync"
	"time"

	"github.com/aquiferhq/aquifer/internal/ports"
)

// Clock is a manual clock. The zero value is not usable; call New.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

// New returns a clock standing at start.
func New(start time.Time) *Clock {
	return &Clock{now: start}
}

var _ ports.Clock = (*Clock)(nil)

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires once the clock reaches now+d.
func (c *Clock) NewTimer(d time.Duration) ports.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d, firing every timer whose deadline
// it passes, in deadline order.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	var due []*timer
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(now) {
			due = append(due, t)
		} else {
			kept = append(kept, t)
		}
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		select {
		case t.ch <- now:
		default: // an unread earlier tick is still there
		}
	}
}

// Next returns the earliest armed timer deadline, if any.
func (c *Clock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for _, t := range c.timers {
		if next.IsZero() || t.at.Before(next) {
			next = t.at
		}
	}
	return next, !next.IsZero()
}

// Pending returns how many timers are armed.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type timer struct {
	c  *Clock
	ch chan time.Time
	at time.Time
}

func (t *timer) C() <-chan time.Time { return t.ch }

// Stop disarms the timer and reports whether it was armed.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.removeLocked()
}

// Reset rearms the timer for d from the clock's now; a d <= 0 fires at once.
func (t *timer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	was := t.removeLocked()
	t.at = t.c.now.Add(d)
	if d <= 0 {
		now := t.c.now
		t.c.mu.Unlock()
		select {
		case t.ch <- now:
		default:
		}
		return was
	}
	t.c.timers = append(t.c.timers, t)
	t.c.mu.Unlock()
	return was
}

// removeLocked disarms t and drops a tick it has not delivered, as
// time.Timer does since Go 1.23: after Stop or Reset no stale tick arrives.
func (t *timer) removeLocked() bool {
	select {
	case <-t.ch:
	default:
	}
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}
