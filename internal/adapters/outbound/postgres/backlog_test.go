package postgres

import (
	"fmt"
	"os"
	"testing"

	"github.com/aquiferhq/aquifer/internal/storetest"
)

// BenchmarkBacklog compares the hot path for one destination on an empty
// store and on one holding a backlog of queued jobs for another
// (storetest.BenchBacklog), with the memory the process holds and the
// space the tables take. It runs only when AQUIFER_BACKLOG names the
// backlog, and is meant for -count 1 (each run queues the backlog afresh):
//
//	AQUIFER_BACKLOG=1000000 go test -run XXX -bench Backlog -benchtime 5000x -count 1 .
func BenchmarkBacklog(b *testing.B) {
	sizes := storetest.BacklogSizes(b, os.Getenv(storetest.BacklogEnv))
	if sizes == nil {
		b.Skipf("set %s to the number of jobs to queue", storetest.BacklogEnv)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("backlog=%d", n), func(b *testing.B) {
			s := openStore(b, newSchema(b), "bench:1", quiet)
			storetest.FillBacklog(b, s, n)
			// What a freshly loaded table would get from autovacuum soon
			// enough: statistics for the planner.
			exec(b, s.opts.Schema, "ANALYZE jobs")
			storetest.BenchBacklog(b, s, nil)
			b.Run("memory", func(b *testing.B) {
				for b.Loop() {
				}
				storetest.ReportMemory(b)
				n, err := s.SizeBytes(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(n)/(1<<20), "tables-MiB")
			})
		})
	}
}
