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
	target, err := newTarget()
	if err != nil {
		return nil, err
	}
	defer target.close()
	d, err := startDaemon(ctx, o, []upstreamRate{{target.host(), 1, 1}})
	if err != nil {
		return nil, err
	}
	defer d.stop()
	queries := []string{
		"/jobs?status=queued&limit=100",
		"/jobs?limit=100&destination=" + url.QueryEscape(target.url()),
		"/jobs?status=failed&limit=100",
		"/jobs?limit=100&q=t",
	}
	lctx, stop := context.WithCancel(ctx)
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
			req, _ := http.NewRequestWithContext(lctx, http.MethodGet, d.url+queries[i%len(queries)], nil)
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
			if o.listInterval > 0 {
				select {
				case <-time.After(o.listInterval):
				case <-lctx.Done():
				}
			}
		}
	}()
	cpu0, self0 := d.cpuTime(), selfCPU()
	l := submit(ctx, d.url, "", o.jobs, o.clients, o.quiet, "ingest + listing", bodyMaker(o, "listing", target.url()+"/t", ""))
	stop()
	wg.Wait()
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	pct := func(p float64) time.Duration {
		if len(lats) == 0 {
			return 0
		}
		return lats[min(len(lats)-1, int(p*float64(len(lats))))]
	}
	note := fmt.Sprintf("%d listings during ingest, one every %v after the last (p50 %s, p99 %s, %d failed)", len(lats), o.listInterval,
		ms(pct(0.5)), ms(pct(0.99)), fails)
	if first != "" {
		note += "; first failure: " + first
	}
	if l.firstErr != "" {
		note += "; ingest: " + l.firstErr
	}
	return []result{{scenario: "ingest + listing", accepted: l.accepted, failed: l.rejected + l.errors + fails,
		ingest: l.rate(), p50: l.percentile(0.5), p99: l.percentile(0.99), max: l.percentile(1),
		lost: -1, rss: d.peakRSS(), note: note, cpuPerJob: perJob(d.cpuTime()-cpu0, l.accepted),
		harness: perJob(selfCPU()-self0, l.accepted), listing: true}}, nil
}
