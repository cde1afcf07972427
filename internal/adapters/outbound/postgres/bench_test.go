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
