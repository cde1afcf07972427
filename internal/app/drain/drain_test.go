package drain

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestDrainStateMachine walks every transition with an injected clock.
func TestDrainStateMachine(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	idle := false
	var flushes []string
	var flushErr error
	var d *drainer
	var duringFlush func()
	d = newDrainer(Config{Enabled: true, WebhookURL: "http://x.test", Idle: 45 * time.Second}, zap.NewNop(),
		func(context.Context) (bool, error) { return idle, nil },
		func(_ context.Context, id string, stillIdle func() bool) (int, error) {
			flushes = append(flushes, id)
			if duringFlush != nil {
				duringFlush()
				if !stillIdle() {
					return 0, errNewWork
				}
			}
			return 3, flushErr
		})
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	expect := func(step, state string, nFlushes int) {
		t.Helper()
		if h := d.health(); h.State != state || len(flushes) != nFlushes {
			t.Fatalf("%s: state %s after %d flushes, want %s after %d", step, h.State, len(flushes), state, nFlushes)
		}
	}
	ctx := context.Background()

	d.tick(ctx, at(0))
	expect("busy", Active, 0)
	idle = true
	d.tick(ctx, at(5))
	expect("idle starts", Draining, 0)
	if h := d.health(); h.IdleSinceMS != at(5).UnixMilli() {
		t.Fatalf("idle_since %d", h.IdleSinceMS)
	}
	d.tick(ctx, at(49))
	expect("timer not up", Draining, 0)

	flushErr = errors.New("drain webhook answered 503")
	d.tick(ctx, at(50))
	expect("first flush fails", Draining, 1)
	if h := d.health(); h.LastError == "" || h.NextAttemptMS != at(55).UnixMilli() {
		t.Fatalf("after a failed flush: %+v, want the error and a retry 5 s later", h)
	}
	d.tick(ctx, at(54))
	expect("backing off", Draining, 1)
	d.tick(ctx, at(55))
	expect("second flush fails", Draining, 2)
	if h := d.health(); h.NextAttemptMS != at(65).UnixMilli() {
		t.Fatalf("backoff did not double: next %d", h.NextAttemptMS)
	}
	if flushes[0] != flushes[1] {
		t.Fatal("a retry of the same idle period must reuse its flush id")
	}

	flushErr = nil
	d.tick(ctx, at(65))
	expect("flush succeeds", Unassigned, 3)
	if h := d.health(); h.LastFlushMS != at(65).UnixMilli() || h.LastError != "" || h.NextAttemptMS != 0 {
		t.Fatalf("after the flush: %+v", h)
	}
	d.tick(ctx, at(200))
	expect("unassigned stays put", Unassigned, 3)

	d.activity()
	expect("new work", Active, 3)
	d.tick(ctx, at(201))
	expect("idle again", Draining, 3)
	d.tick(ctx, at(246))
	expect("second idle period flushes", Unassigned, 4)
	if flushes[3] == flushes[0] {
		t.Fatal("a new idle period must get a new flush id")
	}

	// Work arriving during a flush voids it: active, no failure counted.
	d.activity()
	d.tick(ctx, at(300))
	duringFlush = d.activity
	d.tick(ctx, at(345))
	expect("work during the flush", Active, 5)
	if h := d.health(); h.LastError != "" || h.NextAttemptMS != 0 {
		t.Fatalf("an interrupted flush counted as a failure: %+v", h)
	}
	duringFlush = nil

	// Work seen by the idle check resets the timer.
	d.tick(ctx, at(400))
	expect("idle", Draining, 5)
	idle = false
	d.tick(ctx, at(430))
	expect("busy again", Active, 5)
	idle = true
	d.tick(ctx, at(431))
	d.tick(ctx, at(470))
	expect("timer restarted", Draining, 5)
}
