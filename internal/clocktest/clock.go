// Package clocktest is a settable ports.Clock for tests: time stands still
// until the test advances it, and timers fire when it passes their deadline.
// Tests of timing (pacing, backoff, probes, leases) use it so they assert on
// the clock's time, never on how fast the machine happens to be.
//
// The code under test runs on real goroutines, so a test must let them
// finish what they are doing before it moves the clock. Driver does that:
// it advances the clock to the next armed timer once the system is
// quiescent, within a real-time deadline. To judge quiescence the clock
// counts the work it can see: every use of the clock, requests in flight
// through Doer, callbacks of AfterFunc, and work parked on the clock
// (Sleep) or on a Gate, which does not hold the clock back.
package clocktest

import (
	"context"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/aquiferhq/aquifer/internal/ports"
)

// Clock is a manual clock. The zero value is not usable; call New.
type Clock struct {
	mu     sync.Mutex
	start  time.Time
	now    time.Time
	timers []*timer
	// fired are channel timers that fired and whose tick may not have been
	// read yet: their receiver is about to act.
	fired []*timer
	// work counts work in flight (Begin/End, requests through Doer,
	// AfterFunc callbacks); parked, how much of it waits for the clock or
	// a Gate.
	work, parked int
	// activity changes with every use of the clock, and kick is told.
	activity uint64
	kick     chan struct{}
}

// New returns a clock standing at start.
func New(start time.Time) *Clock {
	return &Clock{start: start, now: start, kick: make(chan struct{}, 1)}
}

var _ ports.Clock = (*Clock)(nil)

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.usedLocked()
	return c.now
}

// Start is the time the clock was created at.
func (c *Clock) Start() time.Time { return c.start }

// Since is how far the clock has moved since New.
func (c *Clock) Since() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now.Sub(c.start)
}

// NewTimer returns a timer that fires once the clock reaches now+d.
func (c *Clock) NewTimer(d time.Duration) ports.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc calls f on its own goroutine once the clock reaches now+d, as
// time.AfterFunc does; the returned timer's C is nil. Until f returns, the
// call counts as work in flight.
func (c *Clock) AfterFunc(d time.Duration, f func()) ports.Timer {
	t := &timer{c: c, fn: f}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d, firing every timer whose deadline
// it passes, in deadline order.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.advanceLocked(c.now.Add(d))
	c.mu.Unlock()
}

// AdvanceTo moves the clock forward to at (never back), firing every timer
// whose deadline it passes, in deadline order.
func (c *Clock) AdvanceTo(at time.Time) {
	c.mu.Lock()
	c.advanceLocked(at)
	c.mu.Unlock()
}

func (c *Clock) advanceLocked(at time.Time) {
	c.usedLocked()
	if at.After(c.now) {
		c.now = at
	}
	var due []*timer
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			due = append(due, t)
		} else {
			kept = append(kept, t)
		}
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		c.fireLocked(t)
	}
}

// fireLocked delivers t's tick (under the lock, so a Stop or Reset that
// follows cannot be overtaken by it) or starts its callback.
func (c *Clock) fireLocked(t *timer) {
	if t.sleeper {
		c.parked-- // the sleeper's work resumes now, before its goroutine wakes
	}
	if t.fn != nil {
		c.work++
		go func() {
			defer c.End()
			t.fn()
		}()
		return
	}
	select {
	case t.ch <- c.now:
		t.firedAt = time.Now()
		if !t.listed {
			t.listed = true
			c.fired = append(c.fired, t)
		}
	default: // an unread earlier tick is still there
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

// Begin counts one unit of work in flight until the matching End: a
// Driver does not move the clock meanwhile (unless the work parks).
func (c *Clock) Begin() {
	c.mu.Lock()
	c.usedLocked()
	c.work++
	c.mu.Unlock()
}

// End ends a unit of work started with Begin.
func (c *Clock) End() {
	c.mu.Lock()
	c.usedLocked()
	c.work--
	c.mu.Unlock()
}

func (c *Clock) park(n int) {
	c.mu.Lock()
	c.usedLocked()
	c.parked += n
	c.mu.Unlock()
}

// Sleep blocks until the clock has moved d past now, or ctx ends (then it
// returns ctx.Err()). It is for work the clock counts (a handler reached
// through Doer, an AfterFunc callback): while it sleeps, that work is
// parked, so a Driver moves the clock on; when the clock reaches the
// deadline it counts as running again at once.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := &timer{c: c, ch: make(chan time.Time, 1), sleeper: true}
	c.mu.Lock()
	c.usedLocked()
	c.parked++
	t.at = c.now.Add(d)
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	select {
	case <-t.ch:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		if t.removeLocked() {
			c.parked-- // not fired: unpark here
		}
		c.mu.Unlock()
		return ctx.Err()
	}
}

// usedLocked records a use of the clock and wakes a Driver waiting for one.
func (c *Clock) usedLocked() {
	c.activity++
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// state is what a Driver looks at.
type state struct {
	activity     uint64
	work, parked int
	unread       int // ticks fired but not received, younger than orphanAfter
}

// orphanAfter is how long an unread tick holds a Driver back: a timer
// whose receiver is gone (a goroutine that returned without Stop) must not
// stall the test.
const orphanAfter = 100 * time.Millisecond

func (c *Clock) state() state {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := state{activity: c.activity, work: c.work, parked: c.parked}
	kept := c.fired[:0]
	for _, t := range c.fired {
		if len(t.ch) > 0 && time.Since(t.firedAt) < orphanAfter {
			kept = append(kept, t)
		} else {
			t.listed = false
		}
	}
	clear(c.fired[len(kept):])
	c.fired = kept
	s.unread = len(kept)
	return s
}

// busy reports whether work is running (in flight and not parked), or a
// fired tick waits for its receiver.
func (s state) busy() bool { return s.work > s.parked || s.unread > 0 }

type timer struct {
	c       *Clock
	ch      chan time.Time // nil for AfterFunc
	fn      func()         // AfterFunc's callback
	at      time.Time
	sleeper bool      // Sleep's timer: its work is parked until it fires
	firedAt time.Time // real time of the last tick sent
	listed  bool      // in Clock.fired
}

func (t *timer) C() <-chan time.Time { return t.ch }

// Stop disarms the timer and reports whether it was armed.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.c.usedLocked()
	return t.removeLocked()
}

// Reset rearms the timer for d from the clock's now; a d <= 0 fires at once.
func (t *timer) Reset(d time.Duration) bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.usedLocked()
	was := t.removeLocked()
	t.at = c.now.Add(d)
	if d <= 0 {
		c.fireLocked(t)
		return was
	}
	c.timers = append(c.timers, t)
	return was
}

// removeLocked disarms t and drops a tick it has not delivered, as
// time.Timer does since Go 1.23: after Stop or Reset no stale tick arrives.
func (t *timer) removeLocked() bool {
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Doer wraps next so that every exchange counts as work in flight, from the
// call until its response body is closed (or the call fails): a Driver
// does not move the clock while a request travels or a response is read.
func (c *Clock) Doer(next ports.Doer) ports.Doer { return &doer{c: c, next: next} }

type doer struct {
	c    *Clock
	next ports.Doer
}

func (d *doer) Do(r *http.Request) (resp *http.Response, err error) {
	d.c.Begin()
	handed := false
	defer func() {
		if !handed {
			d.c.End() // failed, or panicked
		}
	}()
	resp, err = d.next.Do(r)
	if err != nil || resp == nil || resp.Body == nil {
		return resp, err
	}
	resp.Body = &body{ReadCloser: resp.Body, end: sync.OnceFunc(d.c.End)}
	handed = true
	return resp, nil
}

type body struct {
	io.ReadCloser
	end func()
}

func (b *body) Close() error {
	defer b.end()
	return b.ReadCloser.Close()
}

// Gate holds work until the test opens it, without holding the clock
// back: a handler that waits on a Gate is parked, so a Driver keeps moving
// the clock meanwhile. Made with a nil Clock it is a plain latch, for
// wall-clock tests.
type Gate struct {
	c       *Clock
	mu      sync.Mutex
	open    bool
	waiting int
	ch      chan struct{}
}

// NewGate returns a closed gate for work counted by c (which may be nil).
func NewGate(c *Clock) *Gate { return &Gate{c: c, ch: make(chan struct{})} }

// Wait blocks until the gate opens (true) or ctx ends (false).
func (g *Gate) Wait(ctx context.Context) bool {
	g.mu.Lock()
	if g.open {
		g.mu.Unlock()
		return true
	}
	g.waiting++
	if g.c != nil {
		g.c.park(1)
	}
	g.mu.Unlock()
	select {
	case <-g.ch:
		return true // Open counted us as running again
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.open {
			return true
		}
		g.waiting--
		if g.c != nil {
			g.c.park(-1)
		}
		return false
	}
}

// Open lets every waiter, present and future, through. The waiters count
// as running again before Open returns, so a Driver called next waits for
// them. Open is idempotent.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open {
		return
	}
	g.open = true
	if g.c != nil && g.waiting > 0 {
		g.c.park(-g.waiting)
	}
	g.waiting = 0
	close(g.ch)
}
