package sqlite_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// BenchmarkBacklog compares the hot path for one destination on an empty
// store and on one holding a backlog of queued jobs for another
// (storetest.BenchBacklog: inserts, lifecycles, and the load gauge's
// count, the first ListReady page and an empty Purge), with the memory the
// process holds and the size of the database. It runs only when
// AQUIFER_BACKLOG names the backlog, and is meant for -count 1 (each run
// queues the backlog afresh):
//
//	AQUIFER_BACKLOG=1000000 go test -run XXX -bench Backlog -benchtime 5000x -count 1 .
func BenchmarkBacklog(b *testing.B) {
	sizes := storetest.BacklogSizes(b, os.Getenv(storetest.BacklogEnv))
	if sizes == nil {
		b.Skipf("set %s to the number of jobs to queue", storetest.BacklogEnv)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("backlog=%d", n), func(b *testing.B) {
			s, err := sqlite.Open(b.Context(), sqlite.Options{Path: filepath.Join(b.TempDir(), "a.db")})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			storetest.FillBacklog(b, s, n)
			storetest.BenchBacklog(b, s, nil)
			b.Run("memory", func(b *testing.B) {
				for b.Loop() {
				}
				storetest.ReportMemory(b)
				size, err := s.SizeBytes(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(size)/(1<<20), "db-MiB")
			})
		})
	}
}
