package memory_test

import (
	"testing"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

func TestContract(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) ports.JobStore { return memory.New(nil) })
}

func TestLedgerContract(t *testing.T) {
	storetest.ExerciseLedger(t, func(t *testing.T) ports.JobStore { return memory.New(nil) })
}

func TestOperatorContract(t *testing.T) {
	storetest.ExerciseOperator(t, func(t *testing.T) ports.JobStore { return memory.New(nil) })
}
