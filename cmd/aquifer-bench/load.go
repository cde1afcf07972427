package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

func newClient(clients int) *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        clients * 2,
			MaxIdleConnsPerHost: clients * 2,
			MaxConnsPerHost:     clients * 2,
			IdleConnTimeout:     90 * time.Second,
		},
	}
}

// submit POSTs n bodies made by body(i) to url with the given number of
// concurrent clients and records latency and the job ids returned.
func submit(ctx context.Context, url string, n, clients int, quiet bool, label string, body func(i int) []byte) *load {
	client := newClient(clients)
	defer client.CloseIdleConnections()
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
			lat := make([]time.Duration, 0, n/clients+1)
			var rejected, errs int
			var firstErr string
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					break
				}
				t0 := time.Now()
				id, status, err := post(ctx, client, url, body(i))
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
					res.ids[i] = id
					accepted.Add(1)
				default:
					rejected++
					if firstErr == "" {
						firstErr = fmt.Sprintf("HTTP %d", status)
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

func post(ctx context.Context, client *http.Client, url string, body []byte) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", resp.StatusCode, err
	}
	var out struct {
		JobID string `json:"job_id"`
	}
	_ = json.Unmarshal(raw, &out)
	return out.JobID, resp.StatusCode, nil
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
