package clocktest_test

import (
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/clocktest"
)

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func fired(t *testing.T, c <-chan time.Time) (time.Time, bool) {
	t.Helper()
	select {
	case at := <-c:
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestTimersFireWhenTheClockPassesThem(t *testing.T) {
	t.Parallel()
	c := clocktest.New(start)
	a := c.NewTimer(time.Second)
	b := c.NewTimer(3 * time.Second)
	if next, ok := c.Next(); !ok || !next.Equal(start.Add(time.Second)) || c.Pending() != 2 {
		t.Fatalf("Next = %v %v, pending %d", next, ok, c.Pending())
	}
	c.Advance(999 * time.Millisecond)
	if _, ok := fired(t, a.C()); ok {
		t.Fatal("timer fired early")
	}
	c.Advance(time.Millisecond)
	if at, ok := fired(t, a.C()); !ok || !at.Equal(start.Add(time.Second)) {
		t.Fatalf("timer a: fired %v at %v", ok, at)
	}
	if _, ok := fired(t, b.C()); ok {
		t.Fatal("timer b fired early")
	}
	c.Advance(5 * time.Second)
	if _, ok := fired(t, b.C()); !ok {
		t.Fatal("timer b did not fire")
	}
	if c.Pending() != 0 || !c.Now().Equal(start.Add(6*time.Second)) {
		t.Fatalf("pending %d now %v", c.Pending(), c.Now())
	}
}

func TestStopAndResetDropStaleTicks(t *testing.T) {
	t.Parallel()
	c := clocktest.New(start)
	tm := c.NewTimer(time.Second)
	if !tm.Stop() || tm.Stop() {
		t.Fatal("Stop should report armed once")
	}
	c.Advance(2 * time.Second)
	if _, ok := fired(t, tm.C()); ok {
		t.Fatal("stopped timer fired")
	}
	tm.Reset(time.Second)
	c.Advance(time.Second) // fires; the tick waits in the channel
	tm.Reset(time.Second)  // the stale tick is dropped
	if _, ok := fired(t, tm.C()); ok {
		t.Fatal("a tick from before Reset arrived")
	}
	c.Advance(time.Second)
	if _, ok := fired(t, tm.C()); !ok {
		t.Fatal("reset timer did not fire")
	}
	tm.Reset(0)
	if _, ok := fired(t, tm.C()); !ok {
		t.Fatal("Reset(0) did not fire at once")
	}
}
