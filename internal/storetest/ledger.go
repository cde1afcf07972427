package storetest

import (
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// ExerciseLedger runs the LedgerStore contract (drain mode) against stores
// made by newStore, which must implement ports.LedgerStore.
func ExerciseLedger(t *testing.T, newStore NewStore) {
	t.Run("LedgerPagesAndDeleteFinished", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		testLedger(t, s)
	})
}

func testLedger(t *testing.T, s ports.JobStore) {
	ls, ok := s.(ports.LedgerStore)
	if !ok {
		t.Fatalf("%T does not implement ports.LedgerStore", s)
	}
	now := time.Now()
	// Five jobs: two finished (one without webhook, one delivered), one
	// whose delivery is pending, one queued, one expired.
	done := mustInsert(t, s, NewJob("u", "done", "a.test:80"))
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: done.ID, Seq: done.Seq, Status: domain.StatusCompleted, Attempts: 1,
		Result: &domain.Result{ResponseStatus: 200}, Now: now}); err != nil {
		t.Fatal(err)
	}
	delivered := mustInsert(t, s, NewJob("u", "delivered", "a.test:80"))
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: delivered.ID, Seq: delivered.Seq, Status: domain.StatusFailed, Attempts: 5,
		Result: &domain.Result{Reason: "x"}, Now: now, DeliverIn: "hooks.test:80"}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishDelivery(ctx(t), &ports.FinishDeliveryParams{ID: delivered.ID, Seq: delivered.Seq, Delivered: true, Attempts: 1, Now: now}); err != nil {
		t.Fatal(err)
	}
	pending := mustInsert(t, s, NewJob("u", "pending", "a.test:80"))
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: pending.ID, Seq: pending.Seq, Status: domain.StatusCompleted, Attempts: 1,
		Result: &domain.Result{}, Now: now, DeliverIn: "hooks.test:80"}); err != nil {
		t.Fatal(err)
	}
	queued := mustInsert(t, s, NewJob("u", "queued", "a.test:80"))
	old := NewJob("u", "expired", "a.test:80")
	old.ExpiresAt = now.Add(-time.Minute)
	expired := mustInsert(t, s, old)

	var all []ports.LedgerEntry
	after := ""
	for {
		page, err := ls.Ledger(ctx(t), &ports.LedgerParams{After: after, Limit: 2, Now: now})
		if err != nil {
			t.Fatalf("Ledger: %v", err)
		}
		if len(page) > 2 {
			t.Fatalf("Ledger returned %d entries, limit 2", len(page))
		}
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		after = page[len(page)-1].Cursor
	}
	want := map[domain.JobID]struct {
		j      *domain.Job
		status domain.Status
	}{
		done.ID: {done, domain.StatusCompleted}, delivered.ID: {delivered, domain.StatusFailed},
		pending.ID: {pending, domain.StatusCompleted}, queued.ID: {queued, domain.StatusQueued},
	}
	if len(all) != len(want) {
		t.Fatalf("ledger %+v, want the 4 unexpired jobs once each", all)
	}
	for _, e := range all {
		w, ok := want[e.ID]
		if !ok {
			t.Fatalf("ledger entry %+v is not one of the unexpired jobs", e)
		}
		delete(want, e.ID)
		if e.Seq != w.j.Seq || e.UserID != "u" || e.IdempotentKey != w.j.IdempotentKey || e.Status != w.status {
			t.Fatalf("ledger entry %+v, want job %s (%s) %s", e, w.j.ID, w.j.IdempotentKey, w.status)
		}
	}

	// DeleteFinished takes only finished jobs with nothing left to do, up to
	// throughSeq, in batches of limit.
	total := 0
	for {
		n, err := ls.DeleteFinished(ctx(t), expired.Seq, 1)
		if err != nil {
			t.Fatalf("DeleteFinished: %v", err)
		}
		if n > 1 {
			t.Fatalf("DeleteFinished deleted %d, limit 1", n)
		}
		if n == 0 {
			break
		}
		total += n
	}
	if total != 2 {
		t.Fatalf("DeleteFinished deleted %d jobs, want 2 (done, delivered)", total)
	}
	for _, j := range []*domain.Job{done, delivered} {
		if _, err := s.Get(ctx(t), j.ID); err == nil {
			t.Fatalf("finished job %s survived DeleteFinished", j.IdempotentKey)
		}
	}
	for _, j := range []*domain.Job{pending, queued} {
		mustGet(t, s, j.ID) // work is never deleted
	}
	// The key of a cleared job is free again.
	again := mustInsert(t, s, NewJob("u", "done", "a.test:80"))
	if again.ID == done.ID {
		t.Fatal("the cleared key returned the old job")
	}
	// throughSeq bounds it: a job finished after the ledger was read stays.
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: again.ID, Seq: again.Seq, Status: domain.StatusCompleted, Attempts: 1,
		Result: &domain.Result{}, Now: now}); err != nil {
		t.Fatal(err)
	}
	if n, err := ls.DeleteFinished(ctx(t), expired.Seq, 100); err != nil || n != 0 {
		t.Fatalf("DeleteFinished through an earlier seq = %d, %v; want 0", n, err)
	}
	mustGet(t, s, again.ID)
}
