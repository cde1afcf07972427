package main

import (
	"path/filepath"
	"testing"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// TestStoreStatsNameTheWritersWork: the shutdown log's "store writer" line
// carries SQLite's commits, ops and WAL pages, the figures BENCHMARKS.md
// reads the write amplification from.
func TestStoreStatsNameTheWritersWork(t *testing.T) {
	s, err := sqlite.Open(t.Context(), sqlite.Options{Path: filepath.Join(t.TempDir(), "a.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, key := range []string{"a", "b"} {
		if _, _, err := s.Insert(t.Context(), storetest.NewJob("u", key, "a.test:80")); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int64{}
	for _, f := range storeStats(s) {
		got[f.Key] = f.Integer
	}
	if got["commits"] < 1 || got["ops"] < 2 || got["wal_pages"] < 1 {
		t.Errorf("store writer fields %v; want commits ≥ 1, ops ≥ 2, wal_pages ≥ 1", got)
	}
}
