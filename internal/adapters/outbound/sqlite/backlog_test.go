package sqlite_test

import (
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
	storetest.RunBacklog(b, os.Getenv(storetest.BacklogEnv), func(b *testing.B) storetest.BacklogStore {
		s, err := sqlite.Open(b.Context(), sqlite.Options{Path: filepath.Join(b.TempDir(), "a.db")})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return storetest.BacklogStore{Store: s, Memory: func(b *testing.B) {
			size, err := s.SizeBytes(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(size)/(1<<20), "db-MiB")
		}}
	})
}
