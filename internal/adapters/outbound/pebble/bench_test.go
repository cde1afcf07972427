package pebble_test

import (
	"fmt"
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

// report adds the mean group size and the CPU time per op (all goroutines,
// Pebble's background work included), which the wall time per op hides on a
// busy machine.
func report(b *testing.B, s *pebble.Store, cpuStart time.Duration) {
	st := s.Stats()
	b.ReportMetric(float64(st.Ops)/float64(max(st.Commits, 1)), "ops/commit")
	if cpuStart >= 0 {
		b.ReportMetric(float64((cpuTime()-cpuStart).Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

// BenchmarkInsertParallel measures durable inserts from many goroutines:
// the group commit's throughput.
func BenchmarkInsertParallel(b *testing.B) {
	for _, wal := range walIntervals {
		b.Run(fmt.Sprintf("wal=%v", wal), func(b *testing.B) {
			s := openBench(b, wal)
			defer s.Close()
			var n atomic.Int64
			b.SetParallelism(32) // x GOMAXPROCS goroutines
			b.ResetTimer()
			cpu := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					j := storetest.NewJob("bench", fmt.Sprint(n.Add(1)), "a.test:80")
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
func BenchmarkLifecycle(b *testing.B) {
	for _, wal := range walIntervals {
		b.Run(fmt.Sprintf("wal=%v", wal), func(b *testing.B) {
			s := openBench(b, wal)
			defer s.Close()
			var n atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			cpu := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					j, _, err := s.Insert(b.Context(), storetest.NewJob("bench", fmt.Sprint(n.Add(1)), "a.test:80"))
					if err != nil {
						b.Fatal(err)
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
