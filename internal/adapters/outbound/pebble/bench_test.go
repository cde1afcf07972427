package pebble_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/pebble"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// walIntervals are the WALMinSyncInterval settings the benchmarks compare:
// none, and the daemon's default.
var walIntervals = []time.Duration{0, 5 * time.Millisecond}

func openBench(b *testing.B, wal time.Duration) *pebble.Store {
	b.Helper()
	s, err := pebble.Open(b.Context(), pebble.Options{Dir: b.TempDir(), WALMinSyncInterval: wal})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// report adds the mean group size, the CPU time per op (all goroutines,
// Pebble's background work included), which the wall time per op hides on a
// busy machine, and the bytes Pebble wrote per op: to the WAL, and to
// tables (the memtable flushed once the timer stops, so that every op's
// writes are counted, plus whatever compactions rewrote meanwhile).
func report(b *testing.B, s *pebble.Store, cpuStart time.Duration) {
	b.StopTimer()
	st := s.Stats()
	b.ReportMetric(float64(st.Ops)/float64(max(st.Commits, 1)), "ops/commit")
	if cpuStart >= 0 {
		b.ReportMetric(float64((storetest.CPUTime()-cpuStart).Microseconds())/float64(b.N), "cpu-µs/op")
	}
	wal, tables, err := pebble.WrittenBytes(s)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(wal)/float64(b.N), "walB/op")
	b.ReportMetric(float64(tables)/float64(b.N), "tableB/op")
}

// body1KiB is the request body of the Body1KiB benchmarks: 1 KiB of hex,
// as the backlog benchmarks queue.
var body1KiB = storetest.BacklogJob("x", rand.New(rand.NewPCG(1, 2))).Body

// BenchmarkInsertParallel measures durable inserts from many goroutines:
// the group commit's throughput.
func BenchmarkInsertParallel(b *testing.B) { benchInsert(b, nil) }

// BenchmarkInsertParallelBody1KiB is BenchmarkInsertParallel with a request
// body of 1 KiB (storetest.NewJob's is 7 bytes).
func BenchmarkInsertParallelBody1KiB(b *testing.B) { benchInsert(b, body1KiB) }

// benchInsert runs the insert benchmark, with body as every job's request
// body unless it is nil.
func benchInsert(b *testing.B, body []byte) {
	for _, wal := range walIntervals {
		b.Run(fmt.Sprintf("wal=%v", wal), func(b *testing.B) {
			s := openBench(b, wal)
			defer s.Close()
			var n atomic.Int64
			b.SetParallelism(32) // x GOMAXPROCS goroutines
			b.ResetTimer()
			cpu := storetest.CPUTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					j := storetest.NewJob("bench", fmt.Sprint(n.Add(1)), "a.test:80")
					if body != nil {
						j.Body = body
					}
					if _, _, err := s.Insert(b.Context(), j); err != nil {
						b.Fatal(err)
					}
				}
			})
			report(b, s, cpu)
		})
	}
}

// BenchmarkLifecycle runs the store side of one job with a webhook: insert,
// finish (the delivery becomes due), finish the delivery.
func BenchmarkLifecycle(b *testing.B) { benchLifecycle(b, nil) }

// BenchmarkLifecycleBody1KiB is BenchmarkLifecycle with a request body of
// 1 KiB and the dispatch's MarkInFlight too: the four writes of a job with
// a webhook, each of which rewrote the job's record (and with it the body)
// before layout 6.
func BenchmarkLifecycleBody1KiB(b *testing.B) { benchLifecycle(b, body1KiB) }

// benchLifecycle runs the lifecycle benchmark; with a body (not nil), every
// job carries it and is marked in flight before it finishes.
func benchLifecycle(b *testing.B, body []byte) {
	for _, wal := range walIntervals {
		b.Run(fmt.Sprintf("wal=%v", wal), func(b *testing.B) {
			s := openBench(b, wal)
			defer s.Close()
			var n atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			cpu := storetest.CPUTime()
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
					if body != nil {
						if err := s.MarkInFlight(b.Context(), &ports.MarkInFlightParams{ID: j.ID, Seq: j.Seq, At: time.Now()}); err != nil {
							b.Fatal(err)
						}
					}
					res := &domain.Result{ResponseStatus: 200, Body: []byte(`{"ok":true}`)}
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
			report(b, s, cpu)
		})
	}
}

var benchJobs = flag.Int("pebble.jobs", 100_000, "jobs in the store BenchmarkListJobs lists")

// seedBench fills s with n jobs across 100 users (10 of them in tenant
// acme) and 20 destinations: a tenth failed, six tenths completed, the rest
// queued.
func seedBench(b *testing.B, s *pebble.Store, n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				user := fmt.Sprint("user-", i%100)
				if i%100 < 10 {
					user = domain.Scope("acme", user)
				}
				j := storetest.NewJob(user, fmt.Sprint(i), fmt.Sprintf("host%d.test:80", i%20))
				stored, _, err := s.Insert(b.Context(), j)
				if err != nil {
					b.Error(err)
					return
				}
				var st domain.Status
				switch i % 10 {
				case 0:
					st = domain.StatusFailed
				case 1, 2, 3, 4, 5, 6:
					st = domain.StatusCompleted
				default:
					continue
				}
				if _, err := s.Finish(b.Context(), &ports.FinishParams{ID: stored.ID, Seq: stored.Seq, Status: st, Attempts: 1,
					Result: &domain.Result{ResponseStatus: 500, Reason: "upstream returned 500"}, Now: time.Now()}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkListJobs lists the first page (100 jobs) of common filters, and
// counts, over a store of -pebble.jobs jobs.
func BenchmarkListJobs(b *testing.B) {
	s := openBench(b, 0)
	defer s.Close()
	start := time.Now()
	seedBench(b, s, *benchJobs)
	b.Logf("seeded %d jobs in %v", *benchJobs, time.Since(start))
	failed := []domain.Status{domain.StatusFailed}
	mid := int64(*benchJobs) // about half way down the seq range (inserts and finishes take one each)
	for _, tc := range []struct {
		name   string
		f      domain.JobFilter
		before int64
	}{
		{"status=failed", domain.JobFilter{Statuses: failed}, 0},
		{"status=failed/deep", domain.JobFilter{Statuses: failed}, mid},
		{"destination", domain.JobFilter{Destination: "host7.test:80"}, 0},
		{"user_id", domain.JobFilter{UserID: "user-42"}, 0},
		{"tenant+status=failed", domain.JobFilter{Tenant: "acme", Statuses: failed}, 0},
		{"none", domain.JobFilter{}, 0},
		{"q", domain.JobFilter{Q: "x", Statuses: failed}, 0},
	} {
		b.Run("list/"+tc.name, func(b *testing.B) {
			for b.Loop() {
				page, err := s.ListJobs(b.Context(), &ports.ListJobsParams{Filter: tc.f, BeforeSeq: tc.before, Limit: 100, Now: time.Now()})
				if err != nil || len(page) != 100 {
					b.Fatalf("ListJobs = %d jobs, %v", len(page), err)
				}
			}
		})
	}
	for _, tc := range []struct {
		name string
		f    domain.JobFilter
	}{
		{"none", domain.JobFilter{}},
		{"user_id", domain.JobFilter{UserID: "user-42"}},
		{"tenant", domain.JobFilter{Tenant: "acme"}},
		{"destination", domain.JobFilter{Destination: "host7.test:80"}},
		{"tenant+destination", domain.JobFilter{Tenant: "acme", Destination: "host7.test:80"}},
		{"created_after", domain.JobFilter{CreatedAfter: time.Now().Add(-time.Hour)}},
		{"q", domain.JobFilter{Q: "refused"}},
	} {
		b.Run("count/"+tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.CountJobs(b.Context(), &ports.CountJobsParams{Filter: tc.f, Now: time.Now()}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkListReadyBody1KiB reads pages of 100 ready jobs with 1 KiB
// bodies, at random places in a lane of -pebble.ready queued jobs (the
// dispatcher's read, mostly from outside the block cache at this size).
func BenchmarkListReadyBody1KiB(b *testing.B) {
	s := openBench(b, 0)
	defer s.Close()
	storetest.FillBacklog(b, s, *benchReady)
	rng := rand.New(rand.NewPCG(3, 4))
	b.ResetTimer()
	for b.Loop() {
		page, err := s.ListReady(b.Context(), &ports.ListReadyParams{Queue: storetest.BacklogLane, Priority: domain.PriorityNormal,
			AfterSeq: rng.Int64N(int64(*benchReady) - 100), Limit: 100, Now: time.Now()})
		if err != nil || len(page) != 100 {
			b.Fatalf("ListReady = %d jobs, %v", len(page), err)
		}
	}
}

var benchReady = flag.Int("pebble.ready", 200_000, "jobs queued in the lane BenchmarkListReadyBody1KiB reads")
