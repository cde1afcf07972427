package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// regularTimeout is the plain balancer's client timeout (BEHAVIOR.md §27.5).
const regularTimeout = 2 * time.Second

// regularRun is the baseline: a plain round-robin balancer. A ticker at
// --rps starts each job; every attempt goes to the next worker in turn; an
// error or a status >= 500 is retried (5 attempts, 1/2/4/8 s apart, the same
// policy as Aquifer's); anything else — 429 included — completes the job.
// It ignores reputation, X-Aqueduct-Rps and Retry-After.
type regularRun struct {
	o      options
	be     *backend
	client *http.Client

	cancel context.CancelFunc
	wg     sync.WaitGroup
	next   atomic.Uint64 // round-robin position

	mu sync.Mutex
	c  outcomeCounts
}

func newRegularRun(o options, be *backend) *regularRun {
	return &regularRun{o: o, be: be, client: &http.Client{
		Timeout:   regularTimeout,
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 1024, IdleConnTimeout: 90 * time.Second},
	}}
}

func (r *regularRun) launch(ctx context.Context) error {
	ctx, r.cancel = context.WithCancel(ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(time.Duration(float64(time.Second) / r.o.rps))
		defer t.Stop()
		for i := range r.o.jobs {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.dispatch(ctx, i)
			}()
			if i == r.o.jobs-1 {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// dispatch runs one job to its end, or until the run stops.
func (r *regularRun) dispatch(ctx context.Context, job int) {
	body := fmt.Sprintf(`{"job":%d}`, job)
	for attempt := 1; attempt <= productionRetry.Attempts; attempt++ {
		w := int(r.next.Add(1)-1) % len(r.be.workers)
		status, err := r.attempt(ctx, r.be.workerURL(w+1), body)
		if ctx.Err() != nil {
			return // the run ended: the job is left over
		}
		if err == nil && status < 500 {
			r.mu.Lock()
			r.c.completed++
			if status == http.StatusTooManyRequests {
				r.c.completed429++
			}
			r.mu.Unlock()
			return
		}
		if attempt == productionRetry.Attempts {
			break
		}
		t := time.NewTimer(productionRetry.Delay(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	r.mu.Lock()
	r.c.failed++
	r.mu.Unlock()
}

func (r *regularRun) attempt(ctx context.Context, url, body string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (r *regularRun) counts() outcomeCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c
}

func (r *regularRun) reputations() map[string]float64 { return nil }

func (r *regularRun) problems() []string { return nil }

func (r *regularRun) stop() {
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	r.client.CloseIdleConnections()
}
