package storetest

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// BacklogEnv names the environment variable that turns the backlog
// benchmarks on: the number of jobs to queue before measuring (for
// example 1000000). Unset, BenchBacklog skips: filling a store with a
// million jobs takes minutes, which neither `make test` nor an ordinary
// -bench run should pay.
const BacklogEnv = "AQUIFER_BACKLOG"

// Backlog lanes: the backlog waits in BacklogLane, for a destination that
// takes nothing; the measured work goes to another.
const (
	BacklogLane  = "slow.test:80"
	MeasuredLane = "fast.test:80"
	hooksLane    = "hooks.test:80"
)

// BacklogSizes returns the backlogs BenchBacklog compares: none and the
// one v (BacklogEnv's value, which the caller's test reads) asks for, or
// nil when it is empty (skip). A bad value is a test failure, not a silent
// skip.
func BacklogSizes(tb testing.TB, v string) []int {
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		tb.Fatalf("%s=%q: want a number of jobs", BacklogEnv, v)
	}
	return []int{0, n}
}

// BacklogJob returns a queued job for the backlog lane with a body of
// 1 KiB, as the scale scenario queues them: hex text of random
// bytes, which compresses about as well as JSON does (by half), where a
// repeated byte would let a store that compresses blocks hold it for
// nearly nothing.
func BacklogJob(key string, rng *rand.Rand) *domain.Job {
	return jobWithBody("backlog", key, BacklogLane, rng)
}

// jobWithBody is NewJob with BacklogJob's 1 KiB body.
func jobWithBody(user, key, lane string, rng *rand.Rand) *domain.Job {
	j := NewJob(user, key, lane)
	var raw [512]byte
	for i := 0; i < len(raw); i += 8 {
		binary.LittleEndian.PutUint64(raw[i:], rng.Uint64())
	}
	j.Body = hex.AppendEncode(make([]byte, 0, 1<<10), raw[:])
	return j
}

// FillBacklog queues n backlog jobs in s through InsertBatch, batches of
// 1000 from two goroutines, and fails tb unless every one is fresh.
func FillBacklog(tb testing.TB, s ports.JobStore, n int) {
	tb.Helper()
	const batch = 1000
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(n)))
			jobs := make([]*domain.Job, 0, batch)
			for {
				first := int(next.Add(batch)) - batch
				if first >= n {
					return
				}
				jobs = jobs[:0]
				for i := first; i < min(first+batch, n); i++ {
					jobs = append(jobs, BacklogJob(fmt.Sprint("b", i), rng))
				}
				out, err := s.InsertBatch(tb.Context(), jobs)
				if err != nil {
					tb.Errorf("InsertBatch: %v", err)
					return
				}
				for _, o := range out {
					if !o.Fresh {
						tb.Errorf("backlog job %s not fresh", o.Job.IdempotentKey)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
	tb.Logf("queued %d backlog jobs in %v", n, time.Since(start).Round(time.Millisecond))
}

// BenchBacklog measures, on s holding whatever backlog the caller queued,
// what the daemon's hot path does for another destination: durable
// inserts from 64 goroutines ("insert"), the store side of one job with a
// webhook ("lifecycle": insert, mark in flight, finish with a delivery due,
// finish the delivery), the same while the backlog drains slowly
// ("lifecycle-draining"), and ("reads") the load gauge's Counts, the
// dispatcher's first ListReady page of the backlogged lane and the
// sweep's Purge when nothing has expired, timed over a fixed sample
// whatever -benchtime says. While insert and lifecycle run, Counts is called
// every second, as the daemon's load gauge does. Each reports jobs/s and
// the CPU time per job of the whole process (the store's background work
// included); the caller adds memory figures (ReportMemory). written, when
// not nil, returns how many bytes the store has written in the background
// so far, once that work is done (an LSM's flushes and compactions): the
// timed runs then report it per job (bg-B/job), a measure of write
// amplification that does not move with the machine's speed.
func BenchBacklog(b *testing.B, s ports.JobStore, written func() uint64) {
	var n atomic.Int64
	key := func() string { return fmt.Sprint("m", n.Add(1)) }
	b.Run("insert", func(b *testing.B) {
		stop := gauge(b, s)
		b.SetParallelism(32) // x GOMAXPROCS goroutines
		bg := background(b, written)
		cpu := CPUTime()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, fresh, err := s.Insert(b.Context(), NewJob("bench", key(), MeasuredLane)); err != nil || !fresh {
					b.Fatalf("Insert = fresh %v, %v", fresh, err)
				}
			}
		})
		reportRate(b, cpu)
		bg()
		stop()
	})
	b.Run("lifecycle", func(b *testing.B) {
		stop := gauge(b, s)
		b.SetParallelism(32)
		bg := background(b, written)
		cpu := CPUTime()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				lifecycle(b, s, key())
			}
		})
		reportRate(b, cpu)
		bg()
		stop()
	})
	// The same with the backlog moving: every drainEvery-th job also
	// dispatches the backlog's oldest job, as a slow destination draining
	// its queue does beside the busy one. Its index entries are at the far
	// end of each index from the new jobs'.
	b.Run("lifecycle-draining", func(b *testing.B) {
		stop := gauge(b, s)
		b.SetParallelism(32)
		var done atomic.Int64
		var drained atomic.Int64
		var drain sync.Mutex // one drain at a time: each takes the head
		bg := background(b, written)
		cpu := CPUTime()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				lifecycle(b, s, key())
				if done.Add(1)%drainEvery == 0 {
					drain.Lock()
					if drainOne(b, s) {
						drained.Add(1)
					}
					drain.Unlock()
				}
			}
		})
		reportRate(b, cpu)
		bg()
		b.ReportMetric(float64(drained.Load()), "drained")
		stop()
	})
	// The lifecycles of the daemon's scale steps, whose jobs carry 1 KiB
	// bodies like the backlog's: what a store writes for the body itself
	// (and rewrites as it compacts) shows here.
	b.Run("lifecycle-1KiB", func(b *testing.B) {
		stop := gauge(b, s)
		b.SetParallelism(32)
		var seed atomic.Uint64
		bg := background(b, written)
		cpu := CPUTime()
		b.RunParallel(func(pb *testing.PB) {
			rng := rand.New(rand.NewPCG(seed.Add(1), 7))
			for pb.Next() {
				runLifecycle(b, s, jobWithBody("bench", key(), MeasuredLane, rng))
			}
		})
		reportRate(b, cpu)
		bg()
		stop()
	})
	b.Run("reads", func(b *testing.B) {
		for b.Loop() { // the reads below are timed on their own
		}
		sample(b, "µs/count", func() error {
			_, err := s.Counts(b.Context())
			return err
		})
		sample(b, "µs/listready", func() error {
			_, err := s.ListReady(b.Context(), &ports.ListReadyParams{Queue: BacklogLane, Limit: 100, Now: time.Now()})
			return err
		})
		// The sweep's last Purge of each minute, which finds nothing (more)
		// to purge.
		sample(b, "µs/purge", func() error {
			_, err := s.Purge(b.Context(), &ports.PurgeParams{Now: time.Now(), Limit: 1000})
			return err
		})
	})
}

// sample times fn over at least 3 calls and at most a second's worth (or
// 1000 calls), whatever -benchtime says — a Counts of a million-job store
// could take a second a call — and reports the mean as metric.
func sample(b *testing.B, metric string, fn func() error) {
	var n int
	start := time.Now()
	for n < 3 || (n < 1000 && time.Since(start) < time.Second) {
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(n), metric)
}

// drainEvery is how many measured jobs lifecycle-draining runs per backlog
// job it dispatches: at the daemon's few thousand jobs a second, a slow
// destination's one or two a second.
const drainEvery = 2000

// drainOne dispatches and completes the backlog lane's first job, if it
// has one, and reports whether it had.
func drainOne(b *testing.B, s ports.JobStore) bool {
	now := time.Now()
	jobs, err := s.ListReady(b.Context(), &ports.ListReadyParams{Queue: BacklogLane, Limit: 1, Now: now})
	if err != nil {
		b.Fatal(err)
	}
	if len(jobs) == 0 {
		return false
	}
	j := jobs[0]
	if err := s.MarkInFlight(b.Context(), &ports.MarkInFlightParams{ID: j.ID, Seq: j.Seq, At: now}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Finish(b.Context(), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusCompleted,
		Attempts: 1, Result: &domain.Result{ResponseStatus: 200}, Now: now}); err != nil {
		b.Fatal(err)
	}
	return true
}

// background starts counting what written (nil: nothing to count) says
// the store wrote in the background — an LSM's flushes and compactions —
// and returns the func that reports it per job as bg-B/job. Waiting for
// that work to settle is not the jobs' time: the timer restarts after it,
// and the report is called once the timer has stopped (reportRate).
func background(b *testing.B, written func() uint64) (report func()) {
	if written == nil {
		return func() {}
	}
	start := written()
	b.ResetTimer()
	return func() {
		b.ReportMetric(float64(written()-start)/float64(b.N), "bg-B/job")
	}
}

// lifecycle is one job with a webhook through the store.
func lifecycle(b *testing.B, s ports.JobStore, key string) {
	runLifecycle(b, s, NewJob("bench", key, MeasuredLane))
}

// runLifecycle takes j through the store: inserted, in flight, finished
// with a webhook due, delivered.
func runLifecycle(b *testing.B, s ports.JobStore, j *domain.Job) {
	j, _, err := s.Insert(b.Context(), j)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.MarkInFlight(b.Context(), &ports.MarkInFlightParams{ID: j.ID, Seq: j.Seq, At: time.Now()}); err != nil {
		b.Fatal(err)
	}
	res := &domain.Result{ResponseStatus: 200, Body: []byte(`{"ok":true}`)}
	if _, err := s.Finish(b.Context(), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusCompleted, Attempts: 1,
		Result: res, Now: time.Now(), DeliverIn: hooksLane}); err != nil {
		b.Fatal(err)
	}
	if err := s.FinishDelivery(b.Context(), &ports.FinishDeliveryParams{ID: j.ID, Seq: j.Seq, Delivered: true,
		Attempts: 1, Response: 204, Now: time.Now()}); err != nil {
		b.Fatal(err)
	}
}

// gauge calls Counts every second until the returned stop is called, as
// the daemon's load gauge does; stop waits for a call under way and
// reports the mean Counts latency.
func gauge(b *testing.B, s ports.JobStore) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var calls int
	var took time.Duration
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				start := time.Now()
				if _, err := s.Counts(b.Context()); err != nil {
					b.Error(err)
					return
				}
				took += time.Since(start)
				calls++
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		if calls > 0 {
			b.ReportMetric(float64(took.Microseconds())/float64(calls), "gauge-µs/count")
		}
	}
}

// reportRate stops the timer and reports jobs/s and the process's CPU
// time per job since cpu. (The timer stops before the gauge does: waiting
// for a slow Counts to return is not the jobs' time.)
func reportRate(b *testing.B, cpu time.Duration) {
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	if now := CPUTime(); cpu >= 0 && now >= 0 {
		b.ReportMetric(float64((now-cpu).Microseconds())/float64(b.N), "cpu-µs/job")
	}
}

// BacklogStore is a store a BenchmarkBacklog measures, with the store's own
// parts of the measurement.
type BacklogStore struct {
	Store ports.JobStore
	// Filled, when not nil, runs after the fill, before anything is
	// measured (an LSM waits for the fill's compactions).
	Filled func()
	// Written is BenchBacklog's written (nil: the store writes nothing in
	// the background).
	Written func() uint64
	// Memory, when not nil, reports the store's own memory and disk
	// figures beside ReportMemory's.
	Memory func(b *testing.B)
}

// RunBacklog is a store's BenchmarkBacklog: for an empty store and for one
// holding the backlog v names (BacklogEnv's value, which the caller's test
// reads; it skips when v is empty), each opened afresh by open (which
// closes it at cleanup), it fills the backlog (FillBacklog), runs
// BenchBacklog and reports the memory ("memory").
func RunBacklog(b *testing.B, v string, open func(b *testing.B) BacklogStore) {
	sizes := BacklogSizes(b, v)
	if sizes == nil {
		b.Skipf("set %s to the number of jobs to queue", BacklogEnv)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("backlog=%d", n), func(b *testing.B) {
			bs := open(b)
			FillBacklog(b, bs.Store, n)
			if bs.Filled != nil {
				bs.Filled()
			}
			BenchBacklog(b, bs.Store, bs.Written)
			b.Run("memory", func(b *testing.B) {
				for b.Loop() {
				}
				ReportMemory(b)
				if bs.Memory != nil {
					bs.Memory(b)
				}
			})
		})
	}
}

// ReportMemory reports the Go heap in use after a collection and the
// process's resident set size now and at its peak (VmRSS, VmHWM; Linux
// only), in MiB.
func ReportMemory(b *testing.B) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	if rss := procStatus("VmRSS:"); rss >= 0 {
		b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	}
	if peak := procStatus("VmHWM:"); peak >= 0 {
		b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MiB")
	}
}

// procStatus reads a size field (in kB) of /proc/self/status, in bytes; -1
// if there is none.
func procStatus(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}
