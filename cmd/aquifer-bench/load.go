package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// load is the outcome of one submission run.
type load struct {
	accepted  int
	rejected  int
	errors    int
	firstErr  string
	elapsed   time.Duration
	latencies []time.Duration
	ids       []string // job id per submission index ("" if not accepted)
	start     time.Time
}

func (l *load) rate() float64 { return float64(l.accepted) / l.elapsed.Seconds() }

func (l *load) percentile(p float64) time.Duration {
	if len(l.latencies) == 0 {
		return 0
	}
	i := int(p * float64(len(l.latencies)-1))
	return l.latencies[i]
}

// submit POSTs n bodies made by body(i) to base/jobs with the given number
// of concurrent clients (one keep-alive connection each) and records latency
// and the job ids returned. header holds extra request header lines, each
// ending in "\r\n".
func submit(ctx context.Context, base, header string, n, clients int, quiet bool, label string, body func(i int) []byte) *load {
	res := &load{ids: make([]string, n), start: time.Now()}
	var (
		next     atomic.Int64
		done     atomic.Int64
		mu       sync.Mutex
		wg       sync.WaitGroup
		accepted atomic.Int64
	)
	stopBar := progress(quiet, label, n, func() int64 { return done.Load() })
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := newLeanConn(base)
			conn.extra = header
			defer conn.close()
			lat := make([]time.Duration, 0, n/clients+1)
			var rejected, errs int
			var firstErr string
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					break
				}
				t0 := time.Now()
				status, resp, err := conn.post("/jobs", body(i))
				d := time.Since(t0)
				done.Add(1)
				switch {
				case err != nil:
					errs++
					if firstErr == "" {
						firstErr = err.Error()
					}
				case status == http.StatusCreated || status == http.StatusOK:
					lat = append(lat, d)
					res.ids[i] = jobIDOf(resp)
					accepted.Add(1)
				default:
					rejected++
					if firstErr == "" {
						firstErr = fmt.Sprintf("HTTP %d: %s", status, resp)
					}
				}
			}
			mu.Lock()
			res.latencies = append(res.latencies, lat...)
			res.rejected += rejected
			res.errors += errs
			if res.firstErr == "" {
				res.firstErr = firstErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(res.start)
	stopBar()
	res.accepted = int(accepted.Load())
	sort.Slice(res.latencies, func(a, b int) bool { return res.latencies[a] < res.latencies[b] })
	return res
}

// progress draws a progress bar on stderr until the returned stop is called.
func progress(quiet bool, label string, total int, done func() int64) (stop func()) {
	if quiet {
		return func() {}
	}
	stopc := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	draw := func() {
		d := done()
		frac := float64(d) / float64(max(total, 1))
		width := 30
		filled := int(frac * float64(width))
		rate := float64(d) / max(time.Since(start).Seconds(), 1e-9)
		fmt.Fprintf(os.Stderr, "\r  %-18s [%s%s] %7d/%d %8.0f/s", label, strings.Repeat("=", filled),
			strings.Repeat(" ", width-filled), d, total, rate)
	}
	go func() {
		defer wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopc:
				draw()
				fmt.Fprintln(os.Stderr)
				return
			case <-t.C:
				draw()
			}
		}
	}()
	return func() { close(stopc); wg.Wait() }
}
