package dispatch

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/clocktest"
)

func TestWorkersReuseAndStop(t *testing.T) {
	p := newWorkers(clocktest.New(t0), time.Hour)
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		p.run(func() { ran.Add(1); wg.Done() })
		wg.Wait() // sequential: one worker suffices
		// The task is over; its worker parks right after. Hand the next task
		// over only then, or a second worker is (rightly) started.
		for parked := false; !parked; {
			p.mu.Lock()
			parked = len(p.idle) == 1
			p.mu.Unlock()
			runtime.Gosched()
		}
	}
	p.mu.Lock()
	idle := len(p.idle)
	p.mu.Unlock()
	if ran.Load() != 100 || idle != 1 {
		t.Fatalf("ran %d tasks, %d idle workers; want 100 tasks on 1 reused worker", ran.Load(), idle)
	}
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) != 0 || !p.stopped {
		t.Fatalf("after stop: %d idle, stopped=%v", len(p.idle), p.stopped)
	}
}

func TestWorkersIdleTimeoutAndConcurrency(t *testing.T) {
	clock := clocktest.New(t0)
	drv := clocktest.NewDriver(t, clock)
	const idleTimeout = 20 * time.Second
	p := newWorkers(clock, idleTimeout)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		p.run(func() { <-release; wg.Done() })
	}
	close(release)
	wg.Wait() // 8 tasks ran at once, so 8 workers exist
	idle := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.idle)
	}
	drv.Until("8 idle workers", func() bool { return idle() == 8 })
	drv.For(idleTimeout - time.Millisecond)
	if n := idle(); n != 8 {
		t.Fatalf("%d of 8 idle workers left before their idle timeout", 8-n)
	}
	drv.Until("the idle workers to exit", func() bool { return idle() == 0 })
	if clock.Since() != idleTimeout {
		t.Fatalf("idle workers exited after %v, want %v", clock.Since(), idleTimeout)
	}
	p.stop() // waits for the exited workers: returns at once
	done := make(chan struct{})
	p.run(func() { close(done) }) // after stop: still runs
	<-done
}
