package storetest_test

import (
	"path/filepath"
	"testing"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
	"github.com/aquiferhq/aquifer/pkg/aquifer/storetest"
)

// The built-in stores pass the suite through the public API, as a store of
// your own would run it.

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	open := func(*testing.T) aquifer.Store { return aquifer.NewMemoryStore() }
	storetest.Run(t, open)
	storetest.RunLedger(t, open)
	storetest.RunOperator(t, open)
}

func TestSQLiteStore(t *testing.T) {
	t.Parallel()
	open := func(t *testing.T) aquifer.Store {
		s, err := aquifer.OpenSQLite(t.Context(), aquifer.SQLiteOptions{Path: filepath.Join(t.TempDir(), "jobs.db")})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	storetest.Run(t, open)
	storetest.RunLedger(t, open)
	storetest.RunOperator(t, open)
}
