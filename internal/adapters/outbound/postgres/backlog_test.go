package postgres

import (
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
	storetest.RunBacklog(b, os.Getenv(storetest.BacklogEnv), func(b *testing.B) storetest.BacklogStore {
		s := openStore(b, newSchema(b), "bench:1", quiet)
		return storetest.BacklogStore{Store: s,
			// What a freshly loaded table would get from autovacuum soon
			// enough: statistics for the planner.
			Filled: func() { exec(b, s.opts.Schema, "ANALYZE jobs") },
			Memory: func(b *testing.B) {
				n, err := s.SizeBytes(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(n)/(1<<20), "tables-MiB")
			}}
	})
}
