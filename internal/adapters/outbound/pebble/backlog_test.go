package pebble

import (
	"os"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/storetest"
)

// BenchmarkBacklog compares the hot path for one destination on an empty
// store and on one holding a backlog of queued jobs for another
// (storetest.BenchBacklog), once the compactions of the fill are done, with
// the memory the store holds. It runs only when AQUIFER_BACKLOG names the
// backlog, and is meant for -count 1 (each run queues the backlog afresh)
// and a fixed -benchtime, so that both stores get the same work:
//
//	AQUIFER_BACKLOG=1000000 go test -run XXX -bench Backlog -benchtime 20000x -count 1 .
func BenchmarkBacklog(b *testing.B) {
	storetest.RunBacklog(b, os.Getenv(storetest.BacklogEnv), func(b *testing.B) storetest.BacklogStore {
		s, err := Open(b.Context(), Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return storetest.BacklogStore{Store: s,
			Filled: func() { settle(b, s) },
			Written: func() uint64 {
				if err := s.db.Flush(); err != nil {
					b.Fatal(err)
				}
				settle(b, s)
				_, tables, err := WrittenBytes(s)
				if err != nil {
					b.Fatal(err)
				}
				return tables
			},
			Memory: func(b *testing.B) {
				m := s.db.Metrics()
				b.ReportMetric(float64(m.BlockCache.Size)/(1<<20), "cache-MiB")
				b.ReportMetric(float64(m.MemTable.Size)/(1<<20), "memtable-MiB")
				b.ReportMetric(float64(m.DiskSpaceUsage())/(1<<20), "disk-MiB")
			}}
	})
}

// settle waits (up to 10 minutes) until Pebble has run no compaction for
// two seconds, so that what is measured is a store holding the backlog,
// not one still compacting the gigabyte just written into it — a daemon
// whose backlog built up over hours paid that as it went. (Pebble's
// estimated compaction debt need not reach zero: levels a little over
// their target size are left until more writes come.)
func settle(b *testing.B, s *Store) {
	took, ok := waitQuiet(s, 2*time.Second, 10*time.Minute)
	if !ok {
		b.Logf("compactions still running after %v", took.Round(time.Millisecond))
		return
	}
	b.Logf("compactions settled in %v", took.Round(time.Millisecond))
}

// waitQuiet waits until Pebble has run no compaction for quietFor, at most
// limit. It returns how long it waited and whether Pebble went quiet.
func waitQuiet(s *Store, quietFor, limit time.Duration) (time.Duration, bool) {
	start, still := time.Now(), time.Now()
	for time.Since(still) < quietFor {
		if time.Since(start) > limit {
			return time.Since(start), false
		}
		if s.db.Metrics().Compact.NumInProgress > 0 {
			still = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start), true
}
