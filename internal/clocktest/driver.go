package clocktest

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"time"
)

// TB is the part of testing.TB a Driver uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Driver moves a Clock for a test whose work runs on real goroutines. Each
// step waits until the system is quiescent — no work the clock counts
// running (only parked), no fired tick unread, the clock unused, and no
// goroutine of the process running, ready to run or in a system call —
// and then advances the clock to the next armed timer, so every timer
// fires at exactly its deadline and the work it starts sees that time.
// Every call is bounded by a real-time deadline that fails the test with
// what it waited for and the clock's state.
//
// Quiescence is judged on the whole process (a goroutine that was just
// handed work is ready to run before it touches the clock), so a test
// using a Driver must not run in parallel with other tests of its package.
type Driver struct {
	tb TB
	c  *Clock
	// Deadline bounds each call in real time. Default 10s.
	Deadline time.Duration
	// Quiet is how long the clock must go unused, with no counted work
	// running, for the system to count as quiescent although the process
	// is not idle (a garbage collection, a goroutine that runs long without
	// touching the clock). Default 100ms.
	Quiet time.Duration
	// Busy, when set, reports work in flight the clock cannot see.
	Busy func() bool

	// Real time and the process's idleness, as settle reads them
	// (time.Now and processIdle; tests of the driver replace them).
	now  func() time.Time
	idle func() bool
}

// NewDriver returns a driver for c that fails tb.
func NewDriver(tb TB, c *Clock) *Driver {
	return &Driver{tb: tb, c: c, Deadline: 10 * time.Second, Quiet: 100 * time.Millisecond, now: time.Now, idle: processIdle}
}

// Clock is the clock the driver moves.
func (d *Driver) Clock() *Clock { return d.c }

// Settle waits until the system is quiescent, without moving the clock.
func (d *Driver) Settle() {
	d.tb.Helper()
	d.settle("the system to settle", d.now().Add(d.Deadline))
}

// Until moves the clock, one armed timer at a time, until cond holds. cond
// is checked before each step, once the system is quiescent; when it
// holds, the clock stays where it is.
func (d *Driver) Until(what string, cond func() bool) {
	d.tb.Helper()
	deadline := d.now().Add(d.Deadline)
	for !cond() {
		d.settle(what, deadline)
		if cond() {
			return
		}
		if next, ok := d.c.Next(); ok {
			d.c.AdvanceTo(next)
		} else {
			// Nothing armed and nothing running: only something outside
			// the clock's sight can still make cond true.
			d.wait(what, deadline)
		}
	}
}

// For moves the clock forward by dur, firing every timer on the way at its
// deadline and letting the system settle after each.
func (d *Driver) For(dur time.Duration) {
	d.tb.Helper()
	d.To(d.c.Now().Add(dur))
}

// To moves the clock forward to at, as For does.
func (d *Driver) To(at time.Time) {
	d.tb.Helper()
	what := fmt.Sprintf("the clock to reach %s", d.offset(at))
	deadline := d.now().Add(d.Deadline)
	for {
		d.settle(what, deadline)
		next, ok := d.c.Next()
		if !ok || next.After(at) {
			d.c.AdvanceTo(at)
			d.settle(what, deadline)
			return
		}
		d.c.AdvanceTo(next)
	}
}

// After the clock was last used, the driver looks again at once (yielding
// to the goroutines at work) for spinFor; later it waits up to poll
// between looks, or until the clock is used.
const (
	spinFor = 500 * time.Microsecond
	poll    = 100 * time.Microsecond
)

// settle waits until the clock's work is quiescent: nothing counted as
// running, and the clock unused for three looks in a row that find the
// whole process idle, or for Quiet while it is not.
//
// Quiet counts only time the driver saw pass: a gap of more than Quiet/2
// between two of its looks (normally a poll apart) means the OS did not run
// the process, and a goroutine that was about to use the clock may not have
// had its turn either, so the quiet window starts again.
func (d *Driver) settle(what string, deadline time.Time) {
	d.tb.Helper()
	last := d.c.state()
	start := d.now()
	used, quietSince, lastLook, quietPolls, idlePolls := start, start, start, 0, 0
	wait := time.NewTimer(poll)
	defer wait.Stop()
	// pause lets the goroutines at work run before the next look: a yield
	// just after the clock was used, else a wait for its next use (or
	// poll).
	pause := func() {
		if d.now().Sub(used) < spinFor {
			runtime.Gosched()
			return
		}
		wait.Reset(poll)
		select {
		case <-d.c.kick:
		case <-wait.C:
		}
	}
	pause()
	for {
		now := d.now()
		if now.After(deadline) {
			d.fail(what)
		}
		if now.Sub(lastLook) > d.Quiet/2 {
			quietSince, quietPolls = now, 0
		}
		lastLook = now
		s := d.c.state()
		if s.activity != last.activity {
			used = now
		}
		if s.busy() || s.activity != last.activity || (d.Busy != nil && d.Busy()) {
			last, quietSince, quietPolls, idlePolls = s, now, 0, 0
			pause()
			continue
		}
		quietPolls++
		if d.idle() {
			// Nothing else runs. Three looks in a row (one can catch a
			// goroutine between two states), a yield apart: nothing of
			// ours is about to.
			if idlePolls++; idlePolls >= 3 {
				return
			}
			runtime.Gosched()
			continue
		}
		idlePolls = 0
		if quietPolls >= 3 && now.Sub(quietSince) >= d.Quiet {
			return
		}
		pause()
	}
}

// wait sleeps a little for work outside the clock's sight.
func (d *Driver) wait(what string, deadline time.Time) {
	d.tb.Helper()
	time.Sleep(time.Millisecond)
	if d.now().After(deadline) {
		d.fail(what)
	}
}

func (d *Driver) fail(what string) {
	d.tb.Helper()
	s := d.c.state()
	c := d.c
	c.mu.Lock()
	now, armed := c.now, len(c.timers)
	c.mu.Unlock()
	next := "none"
	if at, ok := c.Next(); ok {
		next = d.offset(at)
	}
	d.tb.Fatalf("clocktest: gave up after %v (real time) waiting for %s; the clock is at %s with %d timers armed (next at %s), "+
		"%d units of work in flight (%d parked), %d ticks unread", d.Deadline, what, d.offset(now), armed, next, s.work, s.parked, s.unread)
}

// offset names a time by its distance from the clock's start.
func (d *Driver) offset(at time.Time) string { return "+" + at.Sub(d.c.start).String() }

var schedSamples = []metrics.Sample{
	{Name: "/sched/goroutines/running:goroutines"},
	{Name: "/sched/goroutines/runnable:goroutines"},
	{Name: "/sched/goroutines/not-in-go:goroutines"},
}

// processIdle reports whether no goroutine but the caller runs, is ready to
// run or is in a system call.
func processIdle() bool {
	s := make([]metrics.Sample, len(schedSamples))
	copy(s, schedSamples)
	metrics.Read(s)
	for _, x := range s {
		if x.Value.Kind() != metrics.KindUint64 {
			return false // not supported: fall back on the quiet window
		}
	}
	return s[0].Value.Uint64() <= 1 && s[1].Value.Uint64() == 0 && s[2].Value.Uint64() == 0
}
