package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Faulty is a store whose writes a test can make fail, as a full disk (or a
// database refusing writes) does, and succeed again.
type Faulty struct {
	// Store must implement ports.WriteChecker.
	Store ports.JobStore
	// Break makes writes fail from now on; Heal lets them succeed again.
	Break, Heal func(t *testing.T)
}

// ExerciseWriteFaults runs the write-fault contract against a store made by
// newFaulty: while writes fail they fail as unavailable and CheckWrites
// says so (and since when), reads go on; once healed, writes succeed
// again without reopening the store by hand, CheckWrites is nil, and every
// acknowledged write is still there.
func ExerciseWriteFaults(t *testing.T, newFaulty func(t *testing.T) Faulty) {
	t.Run("WriteFaultsShowAndHeal", func(t *testing.T) {
		f := newFaulty(t)
		t.Cleanup(func() { _ = f.Store.Close() })
		testWriteFaults(t, f)
	})
}

func testWriteFaults(t *testing.T, f Faulty) {
	s := f.Store
	wc, ok := s.(ports.WriteChecker)
	if !ok {
		t.Fatalf("%T does not implement ports.WriteChecker", s)
	}
	var acked []*domain.Job
	for i := range 5 {
		acked = append(acked, mustInsert(t, s, NewJob("u", fmt.Sprintf("before%d", i), "a.test:80")))
	}
	finish := func(j *domain.Job) error {
		_, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusCompleted, Attempts: 1,
			Result: &domain.Result{ResponseStatus: 200}, Now: time.Now()})
		return err
	}
	if err := finish(acked[0]); err != nil {
		t.Fatal(err)
	}
	if err := wc.CheckWrites(ctx(t)); err != nil {
		t.Fatalf("CheckWrites on a healthy store: %v", err)
	}

	f.Break(t)
	// Writes fail, at once or once the space that was left is used up:
	// each insert carries 64 KiB. Those that still succeed are
	// acknowledged like any other.
	big := strings.Repeat("x", 64<<10)
	var failure error
	for i := 0; i < 400 && failure == nil; i++ {
		j := NewJob("u", fmt.Sprintf("full%d", i), "a.test:80")
		j.Body = []byte(big)
		stored, _, err := s.Insert(ctx(t), j)
		if err != nil {
			failure = err
			break
		}
		acked = append(acked, stored)
	}
	if failure == nil {
		t.Fatal("writes never failed after Break")
	}
	if domain.CodeOf(failure) != domain.CodeUnavailable {
		t.Fatalf("a failed write returned %v (code %s), want an unavailable error", failure, domain.CodeOf(failure))
	}
	err := wc.CheckWrites(ctx(t))
	if err == nil || !strings.Contains(err.Error(), "writes failing since") {
		t.Fatalf("CheckWrites after a failed write = %v, want \"writes failing since …\"", err)
	}
	if j, err := s.Get(ctx(t), acked[1].ID); err != nil || j.ID != acked[1].ID {
		t.Fatalf("a read while writes fail: %v", err)
	}

	f.Heal(t)
	deadline := time.Now().Add(10 * time.Second)
	var after *domain.Job
	for after == nil {
		j, fresh, err := s.Insert(ctx(t), NewJob("u", "after", "a.test:80"))
		switch {
		case err == nil && fresh:
			after = j
		case err == nil:
			t.Fatal("the insert after healing is a duplicate")
		case time.Now().After(deadline):
			t.Fatalf("writes still fail 10 s after healing: %v", err)
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := wc.CheckWrites(ctx(t)); err != nil {
		t.Fatalf("CheckWrites after a successful write: %v", err)
	}
	if err := finish(acked[1]); err != nil {
		t.Fatalf("Finish after healing: %v", err)
	}
	for i, a := range acked {
		j, err := s.Get(ctx(t), a.ID)
		if err != nil {
			t.Fatalf("acknowledged job %d lost: %v", i, err)
		}
		if want := i < 2; j.Status.Terminal() != want {
			t.Fatalf("acknowledged job %d is %s", i, j.Status)
		}
		if after.Seq <= a.Seq {
			t.Fatalf("seq went back: %d after %d", after.Seq, a.Seq)
		}
	}
	if _, err := s.Lookup(ctx(t), "u", "after"); err != nil {
		t.Fatalf("the job written after healing: %v", err)
	}
}
