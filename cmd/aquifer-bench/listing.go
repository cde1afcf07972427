package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"time"
)

// runListing is the ingest scenario with an operator listing all the while:
// one client fetches first pages of GET /jobs (with their counts; by
// status, destination, q) every -list-interval for as long as ingest runs
// (0: back to back, as fast as the daemon answers). Run with ingest in the
// same invocation (-scenario ingest,listing) to compare: the store's reads
// must not hold up its writer.
func runListing(ctx context.Context, o options) ([]result, error) {
	return ingestWith(ctx, o, "ingest + listing", "listing", func(ctx context.Context, daemonURL, targetURL string) func() (string, int) {
		return startLister(ctx, daemonURL, targetURL, o.listInterval)
	})
}

// startLister fetches first pages of GET /jobs one after another, interval
// apart, until the returned function stops it and reports.
func startLister(ctx context.Context, daemonURL, targetURL string, interval time.Duration) func() (string, int) {
	queries := []string{
		"/jobs?status=queued&limit=100",
		"/jobs?limit=100&destination=" + url.QueryEscape(targetURL),
		"/jobs?status=failed&limit=100",
		"/jobs?limit=100&q=t",
	}
	lctx, cancel := context.WithCancel(ctx)
	var (
		wg    sync.WaitGroup
		lats  []time.Duration
		fails int
		first string
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: 30 * time.Second}
		for i := 0; lctx.Err() == nil; i++ {
			req, _ := http.NewRequestWithContext(lctx, http.MethodGet, daemonURL+queries[i%len(queries)], nil)
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				if lctx.Err() == nil {
					fails++
					if first == "" {
						first = err.Error()
					}
				}
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				fails++
				if first == "" {
					first = fmt.Sprintf("GET %s: %s", req.URL.RequestURI(), resp.Status)
				}
				continue
			}
			lats = append(lats, time.Since(start))
			if interval > 0 {
				select {
				case <-time.After(interval):
				case <-lctx.Done():
				}
			}
		}
	}()
	return func() (string, int) {
		cancel()
		wg.Wait()
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		pct := func(p float64) time.Duration {
			if len(lats) == 0 {
				return 0
			}
			return lats[min(len(lats)-1, int(p*float64(len(lats))))]
		}
		note := fmt.Sprintf("%d listings during ingest, one every %v after the last (p50 %s, p99 %s, %d failed)", len(lats), interval,
			ms(pct(0.5)), ms(pct(0.99)), fails)
		if first != "" {
			note += "; first failure: " + first
		}
		return note, fails
	}
}
