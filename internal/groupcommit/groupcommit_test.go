package groupcommit_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/groupcommit"
)

func TestEveryOpIsCommittedOnceInOrder(t *testing.T) {
	const submitters, each, maxBatch = 8, 500, 16
	ops := make(chan [2]int, 64)
	closing := make(chan struct{})
	var groups [][][2]int
	done := make(chan struct{})
	go func() {
		defer close(done)
		groupcommit.Run(ops, closing, groupcommit.Options{MaxBatch: maxBatch, GatherYields: 2}, func(b [][2]int) {
			groups = append(groups, slices.Clone(b))
		})
	}()
	var wg sync.WaitGroup
	for s := range submitters {
		wg.Go(func() {
			for i := range each {
				ops <- [2]int{s, i}
			}
		})
	}
	wg.Wait()
	close(closing)
	<-done

	next := make([]int, submitters)
	total := 0
	for _, g := range groups {
		if len(g) == 0 || len(g) > maxBatch {
			t.Fatalf("a group of %d ops (MaxBatch %d)", len(g), maxBatch)
		}
		for _, op := range g {
			if op[1] != next[op[0]] {
				t.Fatalf("submitter %d: op %d committed where %d was due", op[0], op[1], next[op[0]])
			}
			next[op[0]]++
			total++
		}
	}
	if total != submitters*each {
		t.Fatalf("%d ops committed, want %d", total, submitters*each)
	}
	if len(groups) >= total {
		t.Errorf("%d groups for %d ops: nothing was grouped", len(groups), total)
	}
	t.Logf("%d ops in %d groups", total, len(groups))
}

// Ops waiting while a commit runs form the next group, whole.
func TestOpsWaitingDuringACommitShareTheNext(t *testing.T) {
	ops := make(chan int, 16)
	closing := make(chan struct{})
	inCommit, release := make(chan struct{}), make(chan struct{})
	var sizes []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		groupcommit.Run(ops, closing, groupcommit.Options{MaxBatch: 8}, func(b []int) {
			sizes = append(sizes, len(b))
			if len(sizes) == 1 {
				close(inCommit)
				<-release
			}
		})
	}()
	ops <- 0
	<-inCommit
	for i := 1; i <= 11; i++ {
		ops <- i
	}
	close(release)
	close(closing)
	<-done
	if want := []int{1, 8, 3}; !slices.Equal(sizes, want) {
		t.Errorf("groups of %v, want %v", sizes, want)
	}
}

// Close commits what was submitted before it, in groups of at most
// MaxBatch, and the committed ops are not kept.
func TestClosingCommitsWhatWasSubmitted(t *testing.T) {
	ops := make(chan *int, 16)
	for i := range 10 {
		ops <- &i
	}
	closing := make(chan struct{})
	close(closing)
	var sizes []int
	var seen []*int
	groupcommit.Run(ops, closing, groupcommit.Options{MaxBatch: 4}, func(b []*int) {
		sizes = append(sizes, len(b))
		seen = b[:cap(b)]
	})
	if want := []int{4, 4, 2}; !slices.Equal(sizes, want) {
		t.Errorf("groups of %v, want %v", sizes, want)
	}
	for i, p := range seen {
		if p != nil {
			t.Errorf("slot %d still holds a committed op", i)
		}
	}
}

// A failed commit shows, with the time of the first failure of its run,
// until the next commit succeeds.
func TestHealthShowsFailuresUntilASuccess(t *testing.T) {
	var h groupcommit.Health
	t0 := time.Unix(1_700_000_000, 0)
	if h.Err() != nil || !h.Idle(t0, time.Second) {
		t.Fatal("a writer that tried nothing is healthy and idle")
	}
	h.Record(nil, t0)
	if h.Err() != nil || h.Idle(t0.Add(time.Millisecond), time.Second) {
		t.Fatal("after a success: healthy, not idle")
	}
	full := errors.New("no space left on device")
	h.Record(full, t0.Add(time.Second))
	h.Record(errors.New("still no space left on device"), t0.Add(2*time.Second))
	err := h.Err()
	var fe *groupcommit.FailingError
	if !errors.As(err, &fe) || !fe.Since.Equal(t0.Add(time.Second)) {
		t.Fatalf("Err = %v, want failing since the first failure", err)
	}
	if want := "writes failing since 2023-11-14T22:13:21Z: still no space left on device"; err.Error() != want {
		t.Fatalf("Err = %q, want %q", err, want)
	}
	if !h.Idle(t0.Add(5*time.Second), 3*time.Second) || h.Idle(t0.Add(4*time.Second), 3*time.Second) {
		t.Fatal("Idle does not follow the latest try")
	}
	h.Record(nil, t0.Add(3*time.Second))
	if h.Err() != nil {
		t.Fatalf("after a success: %v", h.Err())
	}
	h.Record(full, t0.Add(4*time.Second))
	if err := h.Err(); !errors.As(err, &fe) || !fe.Since.Equal(t0.Add(4*time.Second)) || !errors.Is(err, full) {
		t.Fatalf("a new run of failures: %v", err)
	}
}
