package sqlite

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), Options{Path: filepath.Join(t.TempDir(), "a.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// indexEntries counts the entries of each of the jobs table's indexes, as
// stored (SQLite's dbstat: every cell of an index b-tree is one entry).
func indexEntries(t *testing.T, s *Store) map[string]int {
	t.Helper()
	rows, err := s.rdb.QueryContext(t.Context(), `SELECT name, sum(ncell) FROM dbstat
		WHERE name IN ('jobs_ready', 'jobs_scheduled', 'jobs_deadline', 'jobs_status') GROUP BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		out[name] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// flushWrites waits until the writes sent before it (MarkInFlight does not
// wait for its commit) are committed: the writer applies ops in order, and
// this Delete waits for its own.
func flushWrites(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Delete(t.Context(), "no-such-job"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("flush: Delete = %v", err)
	}
}

func wantEntries(t *testing.T, s *Store, when string, ready, scheduled, deadline int) {
	t.Helper()
	got := indexEntries(t, s)
	if got["jobs_ready"] != ready || got["jobs_scheduled"] != scheduled || got["jobs_deadline"] != deadline {
		t.Fatalf("%s: index entries %v, want jobs_ready %d, jobs_scheduled %d, jobs_deadline %d",
			when, got, ready, scheduled, deadline)
	}
}

// TestPlainJobsWriteNoOptionIndexes follows plain jobs (no options)
// through their lifecycle and checks that they never have an entry in
// jobs_scheduled or jobs_deadline, and one in jobs_ready only while they
// wait; then that a scheduled job and a job with a deadline are in their
// index exactly while the index's reads want them.
func TestPlainJobsWriteNoOptionIndexes(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	ctx, now := t.Context(), time.Now()
	var jobs []*domain.Job
	for i := range 4 {
		j, _, err := s.Insert(ctx, storetest.NewJob("u", fmt.Sprint("plain", i), "a.test:80"))
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	wantEntries(t, s, "plain jobs queued", 4, 0, 0)
	for _, j := range jobs {
		if err := s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: j.ID, Seq: j.Seq, At: now}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Requeue(ctx, &ports.RequeueParams{ID: jobs[0].ID, Seq: jobs[0].Seq, Phase: domain.PhaseDispatch, Attempts: 1, Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs[1:] {
		if _, err := s.Finish(ctx, &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusCompleted, Attempts: 1,
			Result: &domain.Result{ResponseStatus: 200}, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	wantEntries(t, s, "one plain job requeued, three finished", 1, 0, 0)

	sched := storetest.NewJob("u", "sched", "a.test:80")
	sched.NotBefore, sched.ReadyQueue = now.Add(time.Minute), ""
	dl := storetest.NewJob("u", "deadline", "a.test:80")
	dl.Deadline = now.Add(time.Hour)
	out, err := s.InsertBatch(ctx, []*domain.Job{sched, dl})
	if err != nil {
		t.Fatal(err)
	}
	wantEntries(t, s, "a scheduled job and one with a deadline inserted", 2, 1, 1)
	cancel := storetest.NewJob("u", "cancel", "a.test:80")
	cancel.NotBefore, cancel.ReadyQueue, cancel.Deadline = now.Add(time.Minute), "", now.Add(time.Hour)
	cancelled, _, err := s.Insert(ctx, cancel)
	if err != nil {
		t.Fatal(err)
	}
	wantEntries(t, s, "a scheduled job with a deadline inserted", 2, 2, 2)
	if _, err := s.Finish(ctx, &ports.FinishParams{ID: cancelled.ID, Seq: cancelled.Seq, Status: domain.StatusFailed,
		Result: &domain.Result{Reason: domain.ReasonCanceled}, Now: now}); err != nil {
		t.Fatal(err)
	}
	wantEntries(t, s, "the scheduled job with a deadline cancelled", 2, 1, 1)
	dlJob := out[1].Job
	if err := s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: dlJob.ID, Seq: dlJob.Seq, At: now}); err != nil {
		t.Fatal(err)
	}
	flushWrites(t, s)
	wantEntries(t, s, "the job with a deadline in flight", 2, 1, 0)
	if err := s.Requeue(ctx, &ports.RequeueParams{ID: dlJob.ID, Seq: dlJob.Seq, Phase: domain.PhaseDispatch, Attempts: 1, Now: now}); err != nil {
		t.Fatal(err)
	}
	wantEntries(t, s, "the job with a deadline requeued", 2, 1, 1)
	if p, err := s.PromoteDue(ctx, &ports.PromoteParams{Now: now.Add(time.Hour), Limit: 10}); err != nil || len(p) != 1 {
		t.Fatalf("PromoteDue = %v, %v", p, err)
	}
	wantEntries(t, s, "the scheduled job promoted", 3, 0, 1)
	if _, err := s.Finish(ctx, &ports.FinishParams{ID: dlJob.ID, Seq: dlJob.Seq, Status: domain.StatusFailed, Attempts: 1,
		Result: &domain.Result{Reason: domain.ReasonDeadlineExceeded}, Now: now}); err != nil {
		t.Fatal(err)
	}
	wantEntries(t, s, "the job with a deadline failed", 2, 0, 0)
}

// TestConcurrentPromoteDue runs PromoteDue from many goroutines at once
// (their ops share commit groups) and checks that every due job is
// promoted exactly once, with ReadySeqs that follow due order inside each
// call and are never reused.
func TestConcurrentPromoteDue(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	ctx, now := t.Context(), time.Now()
	const n = 200
	var batch []*domain.Job
	for i := range n {
		j := storetest.NewJob("u", fmt.Sprint("k", i), fmt.Sprintf("q%d.test:80", i%3))
		j.NotBefore, j.ReadyQueue = now.Add(-time.Duration(n-i)*time.Millisecond), ""
		batch = append(batch, j)
	}
	if _, err := s.InsertBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	promoted := map[domain.JobID]int64{}
	readySeqs := map[int64]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				got, err := s.PromoteDue(ctx, &ports.PromoteParams{Now: now, Limit: 7})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for i, j := range got {
					if _, dup := promoted[j.ID]; dup {
						t.Errorf("job %s promoted twice", j.IdempotentKey)
					}
					if readySeqs[j.ReadySeq] {
						t.Errorf("ready_seq %d given twice", j.ReadySeq)
					}
					if i > 0 && (j.ReadySeq <= got[i-1].ReadySeq || j.NotBefore.Before(got[i-1].NotBefore)) {
						t.Errorf("PromoteDue's jobs out of order: %s after %s", j.IdempotentKey, got[i-1].IdempotentKey)
					}
					promoted[j.ID], readySeqs[j.ReadySeq] = j.ReadySeq, true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(promoted) != n {
		t.Fatalf("%d jobs promoted, want %d", len(promoted), n)
	}
	for _, j := range batch {
		stored, err := s.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if stored.ReadySeq != promoted[j.ID] || stored.ReadyQueue != j.Queue {
			t.Fatalf("job %s stored ready %s/%d, promoted with %d", j.IdempotentKey, stored.ReadyQueue, stored.ReadySeq, promoted[j.ID])
		}
	}
	if next, err := s.NextDue(ctx); err != nil || !next.IsZero() {
		t.Fatalf("NextDue after promoting everything = %v, %v", next, err)
	}
}

// TestInsertBatchIsOneTransaction makes the second job of a batch fail in
// SQL (it reuses a stored job's id under another key) and checks that the
// first is not stored either, and that the store numbers later jobs as if
// the batch had never been.
func TestInsertBatchIsOneTransaction(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	ctx := t.Context()
	first, _, err := s.Insert(ctx, storetest.NewJob("u", "first", "a.test:80"))
	if err != nil {
		t.Fatal(err)
	}
	clash := storetest.NewJob("u", "clash", "a.test:80")
	clash.ID = first.ID
	if _, err := s.InsertBatch(ctx, []*domain.Job{storetest.NewJob("u", "lost", "a.test:80"), clash}); err == nil {
		t.Fatal("InsertBatch with a clashing id succeeded")
	}
	if _, err := s.Lookup(ctx, "u", "lost"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("the batch's first job after the batch failed: %v, want not found", err)
	}
	next, _, err := s.Insert(ctx, storetest.NewJob("u", "next", "a.test:80"))
	if err != nil {
		t.Fatal(err)
	}
	if next.Seq != first.Seq+1 || next.ReadySeq != first.ReadySeq+1 {
		t.Fatalf("job after the failed batch numbered %d/%d, want %d/%d", next.Seq, next.ReadySeq, first.Seq+1, first.ReadySeq+1)
	}
}

// TestPriorityOutsideTheThree: a job's priority is stored as the nearest of
// the three that lanes list and Position counts, so that no job waits
// where nothing reads.
func TestPriorityOutsideTheThree(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	ctx := t.Context()
	j := storetest.NewJob("u", "odd", "a.test:80")
	j.Priority = 5
	stored, _, err := s.Insert(ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Priority != domain.PriorityHigh {
		t.Fatalf("Insert's job has priority %d, want high", stored.Priority)
	}
	js, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: "a.test:80", Priority: domain.PriorityHigh, Limit: 10, Now: time.Now()})
	if err != nil || len(js) != 1 || js[0].ID != j.ID {
		t.Fatalf("ListReady(high) = %v, %v", js, err)
	}
	if n, err := s.Position(ctx, "a.test:80", stored.ReadySeq+1); err != nil || n != 1 {
		t.Fatalf("Position behind it = %d, %v; want 1", n, err)
	}
}

// TestRunBatchRetryClearsScheduleAndDeadline: a bulk retry re-queues a job
// as Retry does, so the job runs now and has no deadline, keeping its
// other options; it is ready at its priority and in neither
// jobs_scheduled nor jobs_deadline.
func TestRunBatchRetryClearsScheduleAndDeadline(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	ctx, now := t.Context(), time.Now()
	j := storetest.NewJob("u", "bulk", "a.test:80")
	j.NotBefore, j.ReadyQueue = now.Add(time.Minute), ""
	j.Deadline, j.Priority, j.TraceParent = now.Add(time.Hour), domain.PriorityLow, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	stored, _, err := s.Insert(ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, &ports.FinishParams{ID: j.ID, Seq: stored.Seq, Status: domain.StatusFailed,
		Result: &domain.Result{Reason: domain.ReasonDeadlineExceeded}, Now: now}); err != nil {
		t.Fatal(err)
	}
	op := &domain.Operation{ID: "op-bulk", Kind: domain.OpKindRetry, State: domain.OpRunning, CreatedAt: now, UpdatedAt: now}
	if err := s.SaveOperation(ctx, op); err != nil {
		t.Fatal(err)
	}
	next := *op
	next.Processed = 1
	changed, err := s.RunBatch(ctx, &ports.RunBatchParams{Op: &next, Items: []ports.BatchItem{{ID: j.ID, Seq: stored.Seq}}, Now: now})
	if err != nil || len(changed) != 1 {
		t.Fatalf("RunBatch = %v, %v", changed, err)
	}
	got, err := s.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.NotBefore.IsZero() || !got.Deadline.IsZero() || got.Priority != domain.PriorityLow || got.TraceParent != j.TraceParent ||
		got.ReadyQueue != "a.test:80" || got.Scheduled() {
		t.Fatalf("bulk-retried job: %+v", got)
	}
	js, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: "a.test:80", Priority: domain.PriorityLow, Limit: 10, Now: now})
	if err != nil || len(js) != 1 || js[0].ID != j.ID {
		t.Fatalf("ListReady(low) after the bulk retry = %v, %v", js, err)
	}
	if od, err := s.Overdue(ctx, &ports.OverdueParams{Now: now.Add(2 * time.Hour), Limit: 10}); err != nil || len(od) != 0 {
		t.Fatalf("Overdue after the bulk retry = %v, %v", od, err)
	}
	wantEntries(t, s, "after the bulk retry", 1, 0, 0)
}
