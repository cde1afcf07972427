package pebble

import (
	"fmt"
	"testing"

	"github.com/aquiferhq/aquifer/internal/storetest"
)

// BenchmarkBacklog compares the hot path for one destination on an empty
// store and on one holding a backlog of queued jobs for another
// (storetest.BenchBacklog), with the memory the store holds. It runs only
// when AQUIFER_BACKLOG names the backlog, and is meant for -count 1 (each
// run queues the backlog afresh):
//
//	AQUIFER_BACKLOG=1000000 go test -run XXX -bench Backlog -benchtime 10s -count 1 .
func BenchmarkBacklog(b *testing.B) {
	sizes := storetest.BacklogSizes(b)
	if sizes == nil {
		b.Skipf("set %s to the number of jobs to queue", storetest.BacklogEnv)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("backlog=%d", n), func(b *testing.B) {
			s, err := Open(b.Context(), Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			storetest.FillBacklog(b, s, n)
			storetest.BenchBacklog(b, s)
			b.Run("memory", func(b *testing.B) {
				for b.Loop() {
				}
				storetest.ReportMemory(b)
				m := s.db.Metrics()
				b.ReportMetric(float64(m.BlockCache.Size)/(1<<20), "cache-MiB")
				b.ReportMetric(float64(m.MemTable.Size)/(1<<20), "memtable-MiB")
				b.ReportMetric(float64(m.DiskSpaceUsage())/(1<<20), "disk-MiB")
			})
		})
	}
}
