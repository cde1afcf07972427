package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

func TestContract(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) ports.JobStore {
		return openStore(t, newSchema(t), "test-1", nil)
	})
}

func TestOperatorContract(t *testing.T) {
	storetest.ExerciseOperator(t, func(t *testing.T) ports.JobStore {
		return openStore(t, newSchema(t), "test-1", nil)
	})
}

// runGroup commits ops as one group, as the writer does, and returns what
// each caller is told.
func runGroup(s *Store, ops []*storekit.Op) []storekit.Result {
	for _, o := range ops {
		o.Await()
	}
	s.commit(ops)
	out := make([]storekit.Result, len(ops))
	for i, o := range ops {
		out[i] = o.Result()
	}
	return out
}

// TestGroupSettlesRepeatedAndExpiredKeys: inserts of one key in one group
// behave as if run one after another; an expired holder is replaced.
func TestGroupSettlesRepeatedAndExpiredKeys(t *testing.T) {
	t.Parallel()
	s := openStore(t, newSchema(t), "a:1", nil)
	old := storetest.NewJob("u", "k", "up.test:80")
	old.ExpiresAt = time.Now().Add(-time.Minute)
	first, second, other := storetest.NewJob("u", "k", "up.test:80"), storetest.NewJob("u", "k", "up.test:80"),
		storetest.NewJob("u", "other", "up.test:80")
	r := runGroup(s, []*storekit.Op{{Kind: storekit.OpInsert, Job: old}, {Kind: storekit.OpInsert, Job: first}, {Kind: storekit.OpInsert, Job: second},
		{Kind: storekit.OpInsert, Job: other}})
	for i, want := range []struct {
		id    domain.JobID
		fresh bool
	}{{old.ID, true}, {first.ID, true}, {first.ID, false}, {other.ID, true}} {
		if r[i].Err != nil || r[i].Fresh != want.fresh || r[i].Job.ID != want.id {
			t.Fatalf("insert %d: %+v, want job %s fresh=%v", i, r[i], want.id, want.fresh)
		}
	}
	if r[1].Job.Seq <= r[0].Job.Seq || r[1].Job.ReadySeq != r[1].Job.Seq {
		t.Fatalf("replacement seq %d (ready %d) after %d", r[1].Job.Seq, r[1].Job.ReadySeq, r[0].Job.Seq)
	}
	if _, err := s.Get(t.Context(), old.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("the expired holder survived: %v", err)
	}
}

// TestGroupIsolatesARefusedOp: a value PostgreSQL refuses fails its own
// caller, not the others sharing its group.
func TestGroupIsolatesARefusedOp(t *testing.T) {
	t.Parallel()
	s := openStore(t, newSchema(t), "a:1", nil)
	victim := storetest.NewJob("u", "0", "up.test:80")
	if _, _, err := s.Insert(t.Context(), victim); err != nil {
		t.Fatal(err)
	}
	good1, bad, good2 := storetest.NewJob("u", "1", "up.test:80"), storetest.NewJob("u\x00", "2", "up.test:80"),
		storetest.NewJob("u", "3", "up.test:80")
	r := runGroup(s, []*storekit.Op{{Kind: storekit.OpInsert, Job: good1}, {Kind: storekit.OpDelete, ID: victim.ID}, {Kind: storekit.OpInsert, Job: bad},
		{Kind: storekit.OpInsert, Job: good2}})
	// The failed group left nothing behind: re-run alone, each good op
	// finds the state it expects (a fresh key, a job to delete).
	if r[0].Err != nil || !r[0].Fresh || r[1].Err != nil || r[3].Err != nil || !r[3].Fresh {
		t.Fatalf("good ops: %+v, %+v, %+v", r[0], r[1], r[3])
	}
	if r[2].Err == nil || domain.CodeOf(r[2].Err) != domain.CodeUnavailable {
		t.Fatalf("bad insert: %+v, want an unavailable error", r[2])
	}
	// Free text that PostgreSQL cannot store is made storable instead.
	if _, err := s.Finish(t.Context(), &ports.FinishParams{ID: good1.ID, Status: domain.StatusFailed, Now: time.Now(),
		Result: &domain.Result{ContentType: "text/plain; charset=\xff", Reason: "nul\x00byte"}}); err != nil {
		t.Fatalf("Finish with odd text: %v", err)
	}
	if j, err := s.Get(t.Context(), good1.ID); err != nil || j.Result.Reason != "nul\uFFFDbyte" {
		t.Fatalf("finished job: %+v, %v", j, err)
	}
}

// TestFinishRaceKeepsOneDelivery: concurrent Finishes of one job (a
// re-dispatch racing the original) enqueue exactly one delivery.
func TestFinishRaceKeepsOneDelivery(t *testing.T) {
	t.Parallel()
	s := openStore(t, newSchema(t), "a:1", nil)
	j := storetest.NewJob("u", "1", "up.test:80")
	if _, _, err := s.Insert(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	var ops []*storekit.Op
	for range 5 {
		ops = append(ops, &storekit.Op{Kind: storekit.OpFinish, ID: j.ID, Finish: &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted,
			Attempts: 1, Now: time.Now(), DeliverIn: "hooks.test:80"}})
	}
	r := runGroup(s, ops)
	due := 0
	for _, x := range r {
		if x.Err != nil {
			t.Fatal(x.Err)
		}
		if x.N > 0 {
			due++
		}
	}
	if due != 1 {
		t.Fatalf("%d Finishes made a delivery due, want 1", due)
	}
}
