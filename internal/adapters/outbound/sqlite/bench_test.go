package sqlite_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// BenchmarkInsertParallel measures durable inserts from many goroutines:
// the group commit's throughput.
func BenchmarkInsertParallel(b *testing.B) {
	for _, sync := range []sqlite.Sync{sqlite.SyncFull, sqlite.SyncNormal} {
		b.Run(string(sync), func(b *testing.B) {
			s, err := sqlite.Open(b.Context(), sqlite.Options{Path: filepath.Join(b.TempDir(), "a.db"), Sync: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var n atomic.Int64
			b.SetParallelism(32) // x GOMAXPROCS goroutines
			before := s.Stats()
			cpu := startCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					j := storetest.NewJob("bench", fmt.Sprint(n.Add(1)), "a.test:80")
					if _, _, err := s.Insert(b.Context(), j); err != nil {
						b.Fatal(err)
					}
				}
			})
			cpu.report()
			st := s.Stats()
			b.ReportMetric(float64(st.Ops)/float64(max(st.Commits, 1)), "ops/commit")
			b.ReportMetric(float64(st.Pages-before.Pages)/float64(b.N), "pages/op")
		})
	}
}

// BenchmarkLifecycle runs the store side of one job with a webhook: insert,
// finish (the delivery becomes due), finish the delivery.
func BenchmarkLifecycle(b *testing.B) { benchLifecycle(b, nil) }

// BenchmarkLifecycleBodies is BenchmarkLifecycle with request and response
// bodies of each size: WAL pages per lifecycle against the bodies' own
// pages (bodypages) show what a store writes beyond them. A body of
// sideBodyMin bytes or more is written once, apart from its row; kept in
// the row it was written again by the finish and by the delivery's finish
// (docs/BENCHMARKS.md, a thirteenth look).
func BenchmarkLifecycleBodies(b *testing.B) {
	for _, size := range []int{64, 1 << 10, 16 << 10, 64 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			benchLifecycle(b, bytes.Repeat([]byte("x"), size))
			b.ReportMetric(float64(2*size)/4096, "bodypages")
		})
	}
}

// benchLifecycle inserts, finishes with a delivery due and ends the
// delivery of b.N jobs from 32 goroutines per CPU. body, when not nil, is
// both the request's body and the response's; nil keeps storetest.NewJob's
// request and a small JSON response.
func benchLifecycle(b *testing.B, body []byte) {
	s, err := sqlite.Open(b.Context(), sqlite.Options{Path: filepath.Join(b.TempDir(), "a.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	response := []byte(`{"ok":true}`)
	if body != nil {
		response = body
	}
	var n atomic.Int64
	b.SetParallelism(32)
	before := s.Stats()
	cpu := startCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			j := storetest.NewJob("bench", fmt.Sprint(n.Add(1)), "a.test:80")
			if body != nil {
				j.Body = body
			}
			j, _, err := s.Insert(b.Context(), j)
			if err != nil {
				b.Fatal(err)
			}
			res := &domain.Result{ResponseStatus: 200, Body: response}
			if _, err := s.Finish(b.Context(), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusCompleted, Attempts: 1,
				Result: res, Now: time.Now(), DeliverIn: "hooks.test:80"}); err != nil {
				b.Fatal(err)
			}
			if err := s.FinishDelivery(b.Context(), &ports.FinishDeliveryParams{ID: j.ID, Seq: j.Seq, Delivered: true,
				Attempts: 1, Response: 204, Now: time.Now()}); err != nil {
				b.Fatal(err)
			}
		}
	})
	cpu.report()
	st := s.Stats()
	b.ReportMetric(float64(st.Pages-before.Pages)/float64(b.N), "pages/op")
}

// benchCPU measures the CPU time the whole process (the writer and every
// caller) spends on a benchmark's operations: on a shared machine it is
// far steadier than ns/op, which is wall time.
type benchCPU struct {
	b     *testing.B
	start time.Duration
}

// startCPU resets b's timer and starts counting CPU time.
func startCPU(b *testing.B) benchCPU {
	b.ResetTimer()
	return benchCPU{b, processCPU(b)}
}

// report adds the CPU time per operation since startCPU, as cpu-ns/op.
func (c benchCPU) report() {
	c.b.ReportMetric(float64(processCPU(c.b)-c.start)/float64(c.b.N), "cpu-ns/op")
}

func processCPU(b *testing.B) time.Duration {
	cpu := storetest.CPUTime()
	if cpu < 0 {
		b.Fatal("this system does not report the process's CPU time")
	}
	return cpu
}

var benchJobs = flag.Int("bench-jobs", 100_000, "jobs in the store that BenchmarkReads seeds")

// seedReads fills a store with n jobs as a busy deployment holds them: 23
// destinations, 47 users of 5 tenants, 80% completed, 10% failed and 10%
// still queued, inserted and finished from many goroutines (group commit
// keeps the setup to seconds).
func seedReads(b *testing.B, s ports.JobStore, n int) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				u := i % 47 // primes, so that no destination, user or status goes with another
				user := domain.Scope(fmt.Sprint("tenant", u%5), fmt.Sprint("user", u))
				j, _, err := s.Insert(context.Background(), storetest.NewJob(user, fmt.Sprint("seed", i), fmt.Sprintf("dest%d.test:443", i%23)))
				if err != nil {
					errs <- err
					return
				}
				status, result := domain.StatusCompleted, &domain.Result{ResponseStatus: 200}
				switch i % 10 {
				case 0:
					continue // stays queued
				case 1:
					status, result = domain.StatusFailed, &domain.Result{ResponseStatus: 503, Reason: "upstream returned 503"}
				}
				if _, err := s.Finish(context.Background(), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: status, Attempts: 1,
					Result: result, Now: time.Now()}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkReads measures the reads of a store holding -bench-jobs jobs
// (100,000 by default): a lane's first page of ready jobs (the dispatch
// path), the operator's first page (limit 100) by each indexed filter, and
// the counts beside it.
func BenchmarkReads(b *testing.B) {
	s, err := sqlite.Open(b.Context(), sqlite.Options{Path: filepath.Join(b.TempDir(), "a.db"), Sync: sqlite.SyncNormal})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	seedReads(b, s, *benchJobs)
	b.Logf("seeded %d jobs in %v", *benchJobs, time.Since(start).Round(time.Millisecond))
	now := time.Now()
	b.Run("ListReady", func(b *testing.B) {
		for b.Loop() {
			jobs, err := s.ListReady(b.Context(), &ports.ListReadyParams{Queue: "dest0.test:443", Limit: 100, Now: now})
			if err != nil || len(jobs) != 100 {
				b.Fatalf("ListReady: %d jobs, %v", len(jobs), err)
			}
		}
	})
	failed := []domain.Status{domain.StatusFailed}
	for _, tc := range []struct {
		name string
		f    domain.JobFilter
	}{
		{"newest", domain.JobFilter{}},
		{"status=failed", domain.JobFilter{Statuses: failed}},
		{"status=queued,failed", domain.JobFilter{Statuses: []domain.Status{domain.StatusQueued, domain.StatusFailed}}},
		{"destination", domain.JobFilter{Destination: "dest3.test:443"}},
		{"destination&status=failed", domain.JobFilter{Destination: "dest1.test:443", Statuses: failed}},
		{"user_id", domain.JobFilter{UserID: domain.Scope("tenant1", "user6")}},
		{"tenant", domain.JobFilter{Tenant: "tenant2"}},
		{"tenant&status=failed", domain.JobFilter{Tenant: "tenant1", Statuses: failed}},
	} {
		b.Run("ListJobs/"+tc.name, func(b *testing.B) {
			for b.Loop() {
				jobs, err := s.ListJobs(b.Context(), &ports.ListJobsParams{Filter: tc.f, Limit: 100, Now: now})
				if err != nil || len(jobs) != 100 {
					b.Fatalf("ListJobs: %d jobs, %v", len(jobs), err)
				}
			}
		})
	}
	for _, tc := range []struct {
		name string
		f    domain.JobFilter
	}{
		{"all", domain.JobFilter{}},
		{"destination", domain.JobFilter{Destination: "dest3.test:443"}},
		{"user_id", domain.JobFilter{UserID: domain.Scope("tenant1", "user6")}},
		{"tenant", domain.JobFilter{Tenant: "tenant2"}},
		{"q", domain.JobFilter{Q: "503"}},
	} {
		b.Run("CountJobs/"+tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.CountJobs(b.Context(), &ports.CountJobsParams{Filter: tc.f, Now: now}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
