// Package storetest is the conformance suite for aquifer.Store
// implementations: the same tests every built-in store (SQLite, Pebble,
// Postgres, memory) passes, for a store of your own.
//
//	func TestMyStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) aquifer.Store {
//			return mystore.Open(t.TempDir()) // fresh and empty each time
//		})
//	}
//
// The suite checks idempotent inserts (also under concurrency), lookups,
// expiry, the in-flight and requeue transitions, finishing with and without
// a webhook, ready lists in commit order, recovery after a crash, stale
// resets, purging, counts, positions, binary bodies, and that a closed
// store fails cleanly. Its subtests run in parallel, each on its own store,
// which the suite closes.
package storetest

import (
	"testing"

	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// Open returns a fresh, empty store for one subtest.
type Open func(t *testing.T) aquifer.Store

// Run runs the Store contract against stores made by open.
func Run(t *testing.T, open Open) {
	t.Helper()
	storetest.Exercise(t, func(t *testing.T) ports.JobStore { return open(t) })
}

// RunLedger runs the LedgerStore contract (what drain mode needs) against
// stores made by open, which must also implement aquifer.LedgerStore.
func RunLedger(t *testing.T, open Open) {
	t.Helper()
	storetest.ExerciseLedger(t, func(t *testing.T) ports.JobStore {
		s := open(t)
		if _, ok := s.(aquifer.LedgerStore); !ok {
			t.Fatalf("%T does not implement aquifer.LedgerStore", s)
		}
		return s
	})
}

// RunOperator runs the OperatorStore contract (what listing, retry, bulk
// operations and lane pauses need) against stores made by open, which must
// also implement aquifer.OperatorStore.
func RunOperator(t *testing.T, open Open) {
	t.Helper()
	storetest.ExerciseOperator(t, func(t *testing.T) ports.JobStore { return open(t) })
}
