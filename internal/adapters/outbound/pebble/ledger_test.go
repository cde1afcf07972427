package pebble_test

import (
	"testing"

	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

func TestLedgerContract(t *testing.T) {
	storetest.ExerciseLedger(t, func(t *testing.T) ports.JobStore { return open(t, t.TempDir()) })
}
