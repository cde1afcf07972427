package dispatch

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestWorkersReuseAndStop(t *testing.T) {
	t.Parallel()
	p := newWorkers(time.Hour)
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
	t.Parallel()
	p := newWorkers(20 * time.Millisecond)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		p.run(func() { <-release; wg.Done() })
	}
	close(release)
	wg.Wait() // 8 tasks ran at once, so 8 workers exist
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		n := len(p.idle)
		p.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle workers did not exit after their idle timeout", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.stop() // waits for the exited workers: returns at once
	done := make(chan struct{})
	p.run(func() { close(done) }) // after stop: still runs
	<-done
}
