package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

func quiet(o *Options) { o.Logger = zap.NewNop() }

// BenchmarkInsertParallel measures durable inserts from many goroutines
// (32 x GOMAXPROCS): the group commit's throughput.
func BenchmarkInsertParallel(b *testing.B) {
	s := openStore(b, newSchema(b), "bench:1", quiet)
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			j := storetest.NewJob("bench", fmt.Sprint(n.Add(1)), "a.test:80")
			if _, _, err := s.Insert(b.Context(), j); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	st := s.Stats()
	b.ReportMetric(float64(st.Ops)/float64(max(st.Commits, 1)), "ops/commit")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "inserts/s")
}

// BenchmarkLifecycle runs the store side of one job with a webhook: insert,
// finish (the delivery becomes due), finish the delivery.
func BenchmarkLifecycle(b *testing.B) { benchLifecycle(b, nil) }

// BenchmarkLifecycleBody1KiB is BenchmarkLifecycle with a request body of
// 1 KiB (storetest.BacklogJob's), and marks the job in flight as the
// dispatcher does: what each of the job's row versions costs when the row
// holds its body.
func BenchmarkLifecycleBody1KiB(b *testing.B) {
	body := storetest.BacklogJob("x", rand.New(rand.NewPCG(1, 2))).Body
	benchLifecycle(b, body)
}

func benchLifecycle(b *testing.B, body []byte) {
	s := openStore(b, newSchema(b), "bench:1", quiet)
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	cpu, server := storetest.CPUTime(), postgresCPU()
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
	b.StopTimer()
	st := s.Stats()
	b.ReportMetric(float64(st.Ops)/float64(max(st.Commits, 1)), "ops/commit")
	if now := storetest.CPUTime(); cpu >= 0 && now >= 0 {
		b.ReportMetric(float64((now-cpu).Microseconds())/float64(b.N), "client-cpu-µs/op")
	}
	if now := postgresCPU(); server >= 0 && now >= 0 {
		b.ReportMetric(float64((now-server).Microseconds())/float64(b.N), "server-cpu-µs/op")
	}
}

// postgresCPU is the CPU time every process named postgres on this
// machine has used so far (the test server's backends, and whatever else
// uses that server meanwhile), from /proc; -1 where there is none.
func postgresCPU() time.Duration {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	var ticks int64
	found := false
	for _, d := range dirs {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime is field 14, stime 15.
		st := string(b)
		open, end := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')')
		if open < 0 || end < open || st[open+1:end] != "postgres" {
			continue
		}
		f := strings.Fields(st[end+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		k, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + k
		found = true
	}
	if !found {
		return -1
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ
}

// BenchmarkSyncLeases renews 100 held lanes and asks for 100 more that a
// peer holds: one lease sync of a busy process. Its cost depends on the
// lanes named, not on the jobs stored.
func BenchmarkSyncLeases(b *testing.B) {
	schema := newSchema(b)
	s := openStore(b, schema, "bench:1", quiet)
	peer := openStore(b, schema, "bench:2", quiet)
	mine, theirs := make([]domain.UpstreamKey, 100), make([]domain.UpstreamKey, 100)
	for i := range mine {
		mine[i] = domain.UpstreamKey(fmt.Sprintf("http://mine%03d.test:80", i))
		theirs[i] = domain.UpstreamKey(fmt.Sprintf("http://theirs%03d.test:80", i))
	}
	if _, err := peer.SyncLeases(b.Context(), &ports.SyncLeasesParams{Want: theirs, TTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	held, err := s.SyncLeases(b.Context(), &ports.SyncLeasesParams{Want: mine, TTL: time.Minute})
	if err != nil || len(held) != len(mine) {
		b.Fatalf("took %d lanes, %v", len(held), err)
	}
	want := append(append([]domain.UpstreamKey(nil), mine...), theirs...)

	for b.Loop() {
		held, err = s.SyncLeases(b.Context(), &ports.SyncLeasesParams{Want: want, Held: held, TTL: time.Minute})
		if err != nil || len(held) != len(mine) {
			b.Fatalf("holds %d lanes, %v", len(held), err)
		}
	}
}

// benchJobs is how many jobs BenchmarkListJobs seeds: AQUIFER_BENCH_JOBS,
// default 100000.
func benchJobs() int {
	if v, err := strconv.Atoi(os.Getenv("AQUIFER_BENCH_JOBS")); err == nil && v > 0 {
		return v
	}
	return 100000
}

// BenchmarkListJobs lists a first page (limit 100) and counts per status,
// for the common filters, over a store of benchJobs jobs shaped as a long
// run leaves them (seedListing). The cost must follow the page, not the
// table, for the listings; the counts read one index range.
func BenchmarkListJobs(b *testing.B) {
	schema := newSchema(b)
	s := openStore(b, schema, "bench:1", quiet)
	n := benchJobs()
	seedListing(b, schema, n)
	now := time.UnixMilli(1800000000000)
	failed := []domain.Status{domain.StatusFailed}
	for _, c := range []struct {
		name   string
		filter domain.JobFilter
	}{
		{"none", domain.JobFilter{}},
		{"status=failed", domain.JobFilter{Statuses: failed}},
		{"destination", domain.JobFilter{Destination: "http://up7.test:80"}},
		{"user_id", domain.JobFilter{UserID: "u42"}},
		{"tenant&status=failed", domain.JobFilter{Tenant: "t3", Statuses: failed}},
		{"q&status=failed", domain.JobFilter{Q: "items/9", Statuses: failed}},
	} {
		b.Run("list/"+c.name, func(b *testing.B) {
			for b.Loop() {
				page, err := s.ListJobs(b.Context(), &ports.ListJobsParams{Filter: c.filter, Limit: 100, Now: now})
				if err != nil || len(page) == 0 {
					b.Fatalf("%d jobs, %v", len(page), err)
				}
			}
		})
	}
	for _, c := range []struct {
		name   string
		filter domain.JobFilter
	}{
		{"none", domain.JobFilter{}},
		{"destination", domain.JobFilter{Destination: "http://up7.test:80"}},
		{"user_id", domain.JobFilter{UserID: "u42"}},
		{"tenant", domain.JobFilter{Tenant: "t3"}},
	} {
		b.Run("count/"+c.name, func(b *testing.B) {
			for b.Loop() {
				counts, err := s.CountJobs(b.Context(), &ports.CountJobsParams{Filter: c.filter, Now: now})
				if err != nil || len(counts) == 0 {
					b.Fatalf("counts %v, %v", counts, err)
				}
			}
		})
	}
}

// BenchmarkInsertParallelWhileListing is BenchmarkInsertParallel with an
// operator listing queued jobs and counting a destination's meanwhile,
// every 50ms (a few people paging) or back to back (a lister that takes a
// processor of its own: on a small machine that slows ingest by taking CPU,
// not by blocking it). Reads take no lock the writer waits for, and at most
// a quarter of the pool's connections.
func BenchmarkInsertParallelWhileListing(b *testing.B) {
	for _, c := range []struct {
		name  string
		pause time.Duration
	}{{"every50ms", 50 * time.Millisecond}, {"continuous", 0}} {
		b.Run(c.name, func(b *testing.B) { insertWhileListing(b, c.pause) })
	}
}

func insertWhileListing(b *testing.B, pause time.Duration) {
	s := openStore(b, newSchema(b), "bench:1", quiet)
	stop := make(chan struct{})
	var lists atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		f := domain.JobFilter{Statuses: []domain.Status{domain.StatusQueued}}
		dest := domain.JobFilter{Destination: domain.QueueKey("a.test:80").Upstream()}
		for {
			select {
			case <-stop:
				return
			case <-time.After(pause):
			}
			if _, err := s.ListJobs(context.Background(), &ports.ListJobsParams{Filter: f, Limit: 100, Now: time.Now()}); err != nil {
				b.Error(err)
				return
			}
			if _, err := s.CountJobs(context.Background(), &ports.CountJobsParams{Filter: dest, Now: time.Now()}); err != nil {
				b.Error(err)
				return
			}
			lists.Add(1)
		}
	})
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			j := storetest.NewJob("bench", fmt.Sprint(n.Add(1)), "a.test:80")
			if _, _, err := s.Insert(b.Context(), j); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	close(stop)
	wg.Wait()
	st := s.Stats()
	b.ReportMetric(float64(st.Ops)/float64(max(st.Commits, 1)), "ops/commit")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "inserts/s")
	b.ReportMetric(float64(lists.Load())/b.Elapsed().Seconds(), "lists/s")
}
