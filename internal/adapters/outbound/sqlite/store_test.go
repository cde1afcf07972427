package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

func open(t *testing.T, sync sqlite.Sync) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), sqlite.Options{Path: filepath.Join(t.TempDir(), "aquifer.db"), Sync: sync})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func TestContract(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) ports.JobStore { return open(t, sqlite.SyncFull) })
}

func TestContractSyncNormal(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) ports.JobStore { return open(t, sqlite.SyncNormal) })
}

func TestLedgerContract(t *testing.T) {
	storetest.ExerciseLedger(t, func(t *testing.T) ports.JobStore { return open(t, sqlite.SyncFull) })
}

func TestOperatorContract(t *testing.T) {
	storetest.ExerciseOperator(t, func(t *testing.T) ports.JobStore { return open(t, sqlite.SyncFull) })
}

// TestStatsCountPagesWritten checks that Stats counts the pages the
// writer's commits write to the WAL: at least one for a commit of an
// insert, none while nothing is written.
func TestStatsCountPagesWritten(t *testing.T) {
	s := open(t, sqlite.SyncFull)
	defer s.Close()
	before := s.Stats()
	if _, _, err := s.Insert(t.Context(), storetest.NewJob("u", "k", "a.test:80")); err != nil {
		t.Fatal(err)
	}
	after := s.Stats()
	if after.Commits != before.Commits+1 || after.Pages <= before.Pages {
		t.Fatalf("stats %+v after one insert, from %+v: want one more commit and its pages", after, before)
	}
	if _, err := s.Get(t.Context(), "00000000000000000000000000000000"); err == nil {
		t.Fatal("Get of an unknown job found one")
	}
	if again := s.Stats(); again.Pages != after.Pages {
		t.Fatalf("pages went from %d to %d with no write", after.Pages, again.Pages)
	}
}
