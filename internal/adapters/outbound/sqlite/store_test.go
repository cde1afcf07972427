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
