package postgres

import (
	"fmt"
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
func BenchmarkLifecycle(b *testing.B) {
	s := openStore(b, newSchema(b), "bench:1", quiet)
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
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
	b.StopTimer()
	st := s.Stats()
	b.ReportMetric(float64(st.Ops)/float64(max(st.Commits, 1)), "ops/commit")
}
