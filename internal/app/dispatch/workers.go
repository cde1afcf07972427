package dispatch

import (
	"sync"
	"time"

	"github.com/aquiferhq/aquifer/internal/ports"
)

// workers runs attempts on reusable goroutines. A fresh goroutine per
// attempt starts with a small stack and grows it (copying it several times)
// on its way through net/http; a worker keeps its grown stack for the next
// attempt. Workers idle longer than idleTimeout exit; all exit on stop.
type workers struct {
	clock       ports.Clock
	idleTimeout time.Duration

	mu      sync.Mutex
	idle    []*worker
	stopped bool
	quit    chan struct{}
	wg      sync.WaitGroup
}

type worker struct {
	tasks chan func()
}

func newWorkers(clock ports.Clock, idleTimeout time.Duration) *workers {
	return &workers{clock: clock, idleTimeout: idleTimeout, quit: make(chan struct{})}
}

// run executes task on an idle worker, or a new one. After stop it runs
// task on a plain goroutine, so no work is ever dropped.
func (p *workers) run(task func()) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		go task()
		return
	}
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.tasks <- task // buffered: never blocks
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go p.loop(&worker{tasks: make(chan func(), 1)}, task)
}

func (p *workers) loop(w *worker, task func()) {
	defer p.wg.Done()
	timer := p.clock.NewTimer(p.idleTimeout)
	defer timer.Stop()
	for {
		task()
		task = nil
		if !p.park(w) {
			return
		}
		timer.Reset(p.idleTimeout)
		select {
		case task = <-w.tasks:
			continue
		case <-timer.C():
		case <-p.quit:
		}
		// Leaving: unless someone took us off the idle list meanwhile, in
		// which case a task is on its way and must run.
		if p.unpark(w) {
			return
		}
		task = <-w.tasks
	}
}

// park puts w on the idle list; false if the pool is stopped.
func (p *workers) park(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false
	}
	p.idle = append(p.idle, w)
	return true
}

// unpark removes w from the idle list and reports whether it was there.
func (p *workers) unpark(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.idle {
		if x == w {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return true
		}
	}
	return false
}

// stop makes idle workers exit and waits for all workers to finish their
// current task.
func (p *workers) stop() {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.quit)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
