package clocktest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
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

func TestAfterFuncRunsAsWorkAndStops(t *testing.T) {
	c := clocktest.New(start)
	ran := make(chan time.Time, 1)
	release := make(chan struct{})
	c.AfterFunc(time.Second, func() {
		ran <- c.Now()
		<-release
	})
	stopped := c.AfterFunc(time.Second, func() { t.Error("a stopped AfterFunc ran") })
	if stopped.C() != nil || !stopped.Stop() {
		t.Fatal("an AfterFunc timer has no channel and stops while armed")
	}
	c.Advance(time.Second)
	if at := <-ran; !at.Equal(start.Add(time.Second)) {
		t.Fatalf("callback saw %v", at)
	}
	// Running, the callback is work in flight: a driver waits for it.
	d := clocktest.NewDriver(t, c)
	c.NewTimer(time.Minute)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.For(time.Minute)
	}()
	select {
	case <-done:
		t.Fatal("the driver moved the clock while a callback ran")
	case <-time.After(20 * time.Millisecond):
	}
	if c.Since() != time.Second {
		t.Fatalf("clock moved to +%v while a callback ran", c.Since())
	}
	close(release)
	<-done
	if c.Since() != time.Second+time.Minute {
		t.Fatalf("clock at +%v after For(1m)", c.Since())
	}
}

func TestSleepParksUntilTheClockPassesIt(t *testing.T) {
	c := clocktest.New(start)
	d := clocktest.NewDriver(t, c)
	woke := make(chan time.Time, 1)
	c.Begin() // a request in flight…
	go func() {
		defer c.End()
		if err := c.Sleep(t.Context(), 3*time.Second); err != nil { // …that takes 3 s of the clock's time
			t.Error(err)
		}
		woke <- c.Now()
	}()
	var at time.Time
	d.Until("the sleeper to wake", func() bool {
		select {
		case at = <-woke:
			return true
		default:
			return false
		}
	})
	if !at.Equal(start.Add(3 * time.Second)) {
		t.Fatalf("woke at %v, want +3s", at.Sub(start))
	}
	// A cancelled sleep returns at once and unparks its work.
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	c.Begin()
	go func() {
		defer c.End()
		errc <- c.Sleep(ctx, time.Hour)
	}()
	d.Until("the sleeper to park", func() bool { return c.Pending() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Sleep = %v", err)
	}
	d.Settle()
	if c.Pending() != 0 {
		t.Fatal("a cancelled sleep left its timer armed")
	}
}

func TestGateParksItsWaiters(t *testing.T) {
	c := clocktest.New(start)
	d := clocktest.NewDriver(t, c)
	g := clocktest.NewGate(c)
	through := make(chan time.Time, 2)
	for range 2 {
		c.Begin()
		go func() {
			defer c.End()
			if g.Wait(t.Context()) {
				through <- c.Now()
			}
		}()
	}
	c.NewTimer(10 * time.Second)
	d.For(10 * time.Second) // waiters at the gate do not hold the clock back
	if c.Since() != 10*time.Second || len(through) != 0 {
		t.Fatalf("clock at +%v, %d through a closed gate", c.Since(), len(through))
	}
	g.Open()
	g.Open()
	d.Settle()
	if len(through) != 2 {
		t.Fatalf("%d waiters through the open gate, want 2", len(through))
	}
	if !g.Wait(t.Context()) {
		t.Fatal("an open gate held a late waiter")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if clocktest.NewGate(nil).Wait(ctx) {
		t.Fatal("a closed gate let a cancelled waiter through")
	}
}

func TestDoerCountsAnExchangeUntilItsBodyIsClosed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	defer srv.Close()
	client := &http.Client{}
	defer client.CloseIdleConnections()
	c := clocktest.New(start)
	d := clocktest.NewDriver(t, c)
	c.NewTimer(time.Second)
	resp, err := c.Doer(client).Do(httptest.NewRequest(http.MethodGet, srv.URL, nil).WithContext(t.Context()))
	if err == nil {
		t.Fatal("a server request cannot be sent by a client; want an error") // RequestURI set
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	resp, err = c.Doer(client).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		d.For(time.Second)
	}()
	select {
	case <-moved:
		t.Fatal("the driver moved the clock while a response was unread")
	case <-time.After(20 * time.Millisecond):
	}
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	<-moved
	if c.Since() != time.Second {
		t.Fatalf("clock at +%v", c.Since())
	}
}

// TestDriverFiresEachTimerAtItsDeadline: a loop that rearms its timer
// sees every tick at exactly its deadline, and Until stops the clock where
// the condition first holds.
func TestDriverFiresEachTimerAtItsDeadline(t *testing.T) {
	c := clocktest.New(start)
	d := clocktest.NewDriver(t, c)
	var mu sync.Mutex
	var ticks []time.Time
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		tm := c.NewTimer(250 * time.Millisecond)
		defer tm.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tm.C():
			}
			mu.Lock()
			ticks = append(ticks, c.Now())
			mu.Unlock()
			tm.Reset(250 * time.Millisecond)
		}
	}()
	d.Until("five ticks", func() bool { mu.Lock(); defer mu.Unlock(); return len(ticks) == 5 })
	for i, at := range ticks {
		if want := start.Add(time.Duration(i+1) * 250 * time.Millisecond); !at.Equal(want) {
			t.Fatalf("tick %d at %v, want %v", i+1, at.Sub(start), want.Sub(start))
		}
	}
	if c.Since() != 1250*time.Millisecond {
		t.Fatalf("clock at +%v after the fifth tick, want +1.25s", c.Since())
	}
	d.For(100 * time.Millisecond) // between ticks: the clock stops where asked
	if c.Since() != 1350*time.Millisecond {
		t.Fatalf("clock at +%v, want +1.35s", c.Since())
	}
}

// fatalTB records a driver's failure and ends the goroutine, as t.Fatalf
// does.
type fatalTB struct{ msg chan string }

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg <- fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestDriverGivesUpAtItsRealDeadline(t *testing.T) {
	c := clocktest.New(start)
	tb := &fatalTB{msg: make(chan string, 1)}
	d := clocktest.NewDriver(tb, c)
	d.Deadline = 50 * time.Millisecond
	c.NewTimer(time.Second)
	c.Begin() // work that never ends
	go d.Until("something that never happens", func() bool { return false })
	select {
	case msg := <-tb.msg:
		for _, want := range []string{"gave up after 50ms", "something that never happens", "clock is at +0s", "1 timers armed (next at +1s)", "1 units of work in flight (0 parked)"} {
			if !strings.Contains(msg, want) {
				t.Errorf("failure %q does not say %q", msg, want)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the driver did not give up")
	}
}
