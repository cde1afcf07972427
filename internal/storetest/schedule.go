package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// scheduleTests are the contract of ports.ScheduleStore and of job options
// in every other method; Exercise runs them.
var scheduleTests = []struct {
	name string
	fn   func(t *testing.T, s ports.JobStore)
}{
	{"ScheduledJobsWaitOutsideQueues", testScheduledWaitOutside},
	{"PromoteDueInDueOrderWithFreshReadySeqs", testPromoteDueOrder},
	{"PromoteDuePagesByLimit", testPromoteDueLimit},
	{"CancelledScheduledJobIsNeverPromoted", testScheduledCancelled},
	{"OverdueFindsWaitingJobsPastDeadline", testOverdue},
	{"PriorityQueuesAreReadSeparately", testPriorityQueues},
	{"OptionsRoundTrip", testOptionsRoundTrip},
	{"InsertBatch", testInsertBatch},
	{"InsertBatchScheduledAndEmpty", testInsertBatchScheduled},
}

// scheduledJob returns a job of lane due at notBefore.
func scheduledJob(user, key, lane string, notBefore time.Time) *domain.Job {
	j := NewJob(user, key, lane)
	j.NotBefore = ms(notBefore)
	j.ReadyQueue = ""
	j.ExpiresAt = j.NotBefore.Add(domain.QueuedTTL)
	return j
}

func promote(t *testing.T, s ports.JobStore, now time.Time, limit int) []*domain.Job {
	t.Helper()
	got, err := s.PromoteDue(ctx(t), &ports.PromoteParams{Now: now, Limit: limit})
	if err != nil {
		t.Fatalf("PromoteDue: %v", err)
	}
	return got
}

func nextDue(t *testing.T, s ports.JobStore) time.Time {
	t.Helper()
	next, err := s.NextDue(ctx(t))
	if err != nil {
		t.Fatalf("NextDue: %v", err)
	}
	return next
}

func readyAt(t *testing.T, s ports.JobStore, lane string, p domain.Priority) []*domain.Job {
	t.Helper()
	js, err := s.ListReady(ctx(t), &ports.ListReadyParams{Queue: domain.QueueKey(lane), Priority: p, Limit: 1000, Now: time.Now()})
	if err != nil {
		t.Fatalf("ListReady(%s, %s): %v", lane, p, err)
	}
	return js
}

func keysOf(js []*domain.Job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.IdempotentKey
	}
	return out
}

func sameKeys(t *testing.T, what string, got []*domain.Job, want ...string) {
	t.Helper()
	if fmt.Sprint(keysOf(got)) != fmt.Sprint(want) {
		t.Fatalf("%s = %v, want %v", what, keysOf(got), want)
	}
}

func testScheduledWaitOutside(t *testing.T, s ports.JobStore) {
	now := time.Now()
	in1h := mustInsert(t, s, scheduledJob("u", "in-1h", "sched.test:80", now.Add(time.Hour)))
	mustInsert(t, s, scheduledJob("u", "in-30m", "sched.test:80", now.Add(30*time.Minute)))
	mustInsert(t, s, NewJob("u", "now", "ready.test:80"))
	got := mustGet(t, s, in1h.ID)
	if !got.Scheduled() || got.ReadyQueue != "" || got.ReadySeq != 0 || got.Queue != "sched.test:80" ||
		!got.NotBefore.Equal(ms(now.Add(time.Hour))) || !got.ExpiresAt.Equal(ms(now.Add(time.Hour+domain.QueuedTTL))) {
		t.Fatalf("scheduled job as stored: %+v", got)
	}
	if in1h.ReadySeq != 0 {
		t.Fatalf("Insert gave a scheduled job ReadySeq %d", in1h.ReadySeq)
	}
	if r := readyAt(t, s, "sched.test:80", domain.PriorityNormal); len(r) != 0 {
		t.Fatalf("scheduled jobs are ready: %v", keysOf(r))
	}
	qs, err := s.ReadyQueues(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0] != "ready.test:80" {
		t.Fatalf("ReadyQueues = %v, want only ready.test:80", qs)
	}
	flush(t, s) // Counts may lag behind commits
	c, err := s.Counts(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if c.Queued != 4 { // with flush's job
		t.Fatalf("Counts = %+v, want 4 queued (scheduled jobs are queued)", c)
	}
	if n := nextDue(t, s); !n.Equal(ms(now.Add(30 * time.Minute))) {
		t.Fatalf("NextDue = %v, want %v", n, ms(now.Add(30*time.Minute)))
	}
	if p := promote(t, s, now, 10); len(p) != 0 {
		t.Fatalf("PromoteDue before anything is due promoted %v", keysOf(p))
	}
	// A duplicate of a scheduled job is answered with it.
	dup, fresh, err := s.Insert(ctx(t), scheduledJob("u", "in-1h", "sched.test:80", now.Add(time.Minute)))
	if err != nil || fresh || dup.ID != in1h.ID {
		t.Fatalf("Insert(duplicate of a scheduled job) = %v, %v, %v", dup, fresh, err)
	}
}

func testPromoteDueOrder(t *testing.T, s ports.JobStore) {
	now := time.Now()
	ready := mustInsert(t, s, NewJob("u", "ready", "sched.test:80"))
	mustInsert(t, s, scheduledJob("u", "c", "sched.test:80", now.Add(3*time.Second)))
	mustInsert(t, s, scheduledJob("u", "a", "sched.test:80", now.Add(time.Second)))
	mustInsert(t, s, scheduledJob("u", "b1", "other.test:80", now.Add(2*time.Second)))
	mustInsert(t, s, scheduledJob("u", "b2", "sched.test:80", now.Add(2*time.Second))) // same time: Seq order
	mustInsert(t, s, scheduledJob("u", "later", "sched.test:80", now.Add(time.Hour)))
	got := promote(t, s, now.Add(3*time.Second), 100)
	sameKeys(t, "PromoteDue", got, "a", "b1", "b2", "c")
	last := ready.ReadySeq
	for _, j := range got {
		if j.ReadyQueue != j.Queue || j.ReadySeq <= last || j.Status != domain.StatusQueued {
			t.Fatalf("promoted job %s: ready %s/%d after %d, status %s", j.IdempotentKey, j.ReadyQueue, j.ReadySeq, last, j.Status)
		}
		last = j.ReadySeq
		if stored := mustGet(t, s, j.ID); stored.ReadySeq != j.ReadySeq || stored.ReadyQueue != j.Queue || stored.Scheduled() {
			t.Fatalf("promoted job as stored: %+v", stored)
		}
	}
	sameKeys(t, "ListReady after promotion", readyAt(t, s, "sched.test:80", domain.PriorityNormal), "ready", "a", "b2", "c")
	sameKeys(t, "ListReady of the other queue", readyAt(t, s, "other.test:80", domain.PriorityNormal), "b1")
	if p := promote(t, s, now.Add(3*time.Second), 100); len(p) != 0 {
		t.Fatalf("a second PromoteDue promoted %v again", keysOf(p))
	}
	if n := nextDue(t, s); !n.Equal(ms(now.Add(time.Hour))) {
		t.Fatalf("NextDue = %v, want the job an hour ahead", n)
	}
	// Paging after the promoted jobs' cursor finds nothing new.
	js, err := s.ListReady(ctx(t), &ports.ListReadyParams{Queue: "sched.test:80", AfterSeq: last, Limit: 10, Now: time.Now()})
	if err != nil || len(js) != 0 {
		t.Fatalf("ListReady after the last promoted seq = %v, %v", keysOf(js), err)
	}
}

func testPromoteDueLimit(t *testing.T, s ports.JobStore) {
	now := time.Now()
	for i := range 5 {
		mustInsert(t, s, scheduledJob("u", fmt.Sprint("k", i), "sched.test:80", now.Add(time.Duration(i+1)*time.Millisecond)))
	}
	sameKeys(t, "first page", promote(t, s, now.Add(time.Second), 2), "k0", "k1")
	sameKeys(t, "second page", promote(t, s, now.Add(time.Second), 2), "k2", "k3")
	sameKeys(t, "third page", promote(t, s, now.Add(time.Second), 2), "k4")
	if n := nextDue(t, s); !n.IsZero() {
		t.Fatalf("NextDue with nothing scheduled = %v, want zero", n)
	}
}

func testScheduledCancelled(t *testing.T, s ports.JobStore) {
	now := time.Now()
	j := mustInsert(t, s, scheduledJob("u", "cancel-me", "sched.test:80", now.Add(time.Second)))
	keep := mustInsert(t, s, scheduledJob("u", "keep", "sched.test:80", now.Add(2*time.Second)))
	seq, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusFailed,
		Result: &domain.Result{Reason: domain.ReasonCanceled}, Now: now, DeliverIn: "hooks.test:80"})
	if err != nil || seq == 0 {
		t.Fatalf("Finish(scheduled) = %d, %v", seq, err)
	}
	if n := nextDue(t, s); !n.Equal(keep.NotBefore) {
		t.Fatalf("NextDue after the cancel = %v, want %v", n, keep.NotBefore)
	}
	sameKeys(t, "PromoteDue", promote(t, s, now.Add(time.Minute), 10), "keep")
	got := mustGet(t, s, j.ID)
	if got.Status != domain.StatusFailed || got.ReadyQueue != "hooks.test:80" || got.Scheduled() {
		t.Fatalf("cancelled scheduled job: %+v", got)
	}
	sameKeys(t, "its delivery", readyAt(t, s, "hooks.test:80", domain.PriorityNormal), "cancel-me")
}

func testOverdue(t *testing.T, s ports.JobStore) {
	now := time.Now()
	withDeadline := func(key string, d time.Duration, scheduled bool) *domain.Job {
		j := NewJob("u", key, "dl.test:80")
		if scheduled {
			j = scheduledJob("u", key, "dl.test:80", now.Add(-time.Hour))
		}
		j.Deadline = ms(now.Add(d))
		return mustInsert(t, s, j)
	}
	withDeadline("late-2s", -2*time.Second, false)
	withDeadline("late-1s-scheduled", -time.Second, true)
	withDeadline("future", time.Hour, false)
	running := withDeadline("running", -3*time.Second, false)
	done := withDeadline("done", -4*time.Second, false)
	mustInsert(t, s, NewJob("u", "no-deadline", "dl.test:80"))
	if err := s.MarkInFlight(ctx(t), &ports.MarkInFlightParams{ID: running.ID, Seq: running.Seq, At: now}); err != nil {
		t.Fatal(err)
	}
	finish(t, s, done, domain.StatusCompleted, &domain.Result{ResponseStatus: 200})
	flush(t, s)
	got, err := s.Overdue(ctx(t), &ports.OverdueParams{Now: now, Limit: 10})
	if err != nil {
		t.Fatalf("Overdue: %v", err)
	}
	sameKeys(t, "Overdue", got, "late-2s", "late-1s-scheduled")
	if !got[0].Deadline.Equal(ms(now.Add(-2 * time.Second))) {
		t.Fatalf("Overdue job's deadline = %v", got[0].Deadline)
	}
	got, err = s.Overdue(ctx(t), &ports.OverdueParams{Now: now, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "Overdue with limit 1", got, "late-2s")
	got, err = s.Overdue(ctx(t), &ports.OverdueParams{Now: now.Add(-time.Hour), Limit: 10})
	if err != nil || len(got) != 0 {
		t.Fatalf("Overdue an hour ago = %v, %v; want none", keysOf(got), err)
	}
}

func testPriorityQueues(t *testing.T, s ports.JobStore) {
	put := func(key string, p domain.Priority) *domain.Job {
		j := NewJob("u", key, "prio.test:80")
		j.Priority = p
		return mustInsert(t, s, j)
	}
	put("n1", domain.PriorityNormal)
	h1 := put("h1", domain.PriorityHigh)
	put("l1", domain.PriorityLow)
	put("n2", domain.PriorityNormal)
	put("h2", domain.PriorityHigh)
	sameKeys(t, "high", readyAt(t, s, "prio.test:80", domain.PriorityHigh), "h1", "h2")
	sameKeys(t, "normal", readyAt(t, s, "prio.test:80", domain.PriorityNormal), "n1", "n2")
	sameKeys(t, "low", readyAt(t, s, "prio.test:80", domain.PriorityLow), "l1")
	js, err := s.ListReady(ctx(t), &ports.ListReadyParams{Queue: "prio.test:80", Priority: domain.PriorityHigh, AfterSeq: h1.ReadySeq, Limit: 10, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "high after h1", js, "h2")
	if got := mustGet(t, s, h1.ID); got.Priority != domain.PriorityHigh {
		t.Fatalf("Get: priority %s, want high", got.Priority)
	}
	// Position counts every job ahead, whatever its priority.
	h2 := mustGet(t, s, put("h3", domain.PriorityHigh).ID)
	if n, err := s.Position(ctx(t), "prio.test:80", h2.ReadySeq); err != nil || n != 5 {
		t.Fatalf("Position = %d, %v; want 5", n, err)
	}
	// A result keeps its job's priority in the receiver's queue.
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: h1.ID, Seq: h1.Seq, Status: domain.StatusCompleted,
		Result: &domain.Result{ResponseStatus: 200}, Now: time.Now(), DeliverIn: "hooks.test:80"}); err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "high deliveries", readyAt(t, s, "hooks.test:80", domain.PriorityHigh), "h1")
	if r := readyAt(t, s, "hooks.test:80", domain.PriorityNormal); len(r) != 0 {
		t.Fatalf("normal deliveries = %v, want none", keysOf(r))
	}
}

func fullOptions(now time.Time) domain.JobOptions {
	return domain.JobOptions{
		NotBefore: ms(now.Add(time.Minute)), Deadline: ms(now.Add(time.Hour)), Priority: domain.PriorityLow,
		Retry:   domain.RetryOptions{MaxAttempts: 9, Backoff: 1500 * time.Millisecond, MaxBackoff: 90 * time.Second},
		Timeout: 7 * time.Second, TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		TraceState: "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
	}
}

func sameOptions(t *testing.T, what string, got, want domain.JobOptions) {
	t.Helper()
	if !got.NotBefore.Equal(want.NotBefore) || !got.Deadline.Equal(want.Deadline) || got.Priority != want.Priority ||
		got.Retry != want.Retry || got.Timeout != want.Timeout || got.TraceParent != want.TraceParent || got.TraceState != want.TraceState {
		t.Fatalf("%s: options %+v, want %+v", what, got, want)
	}
}

func testOptionsRoundTrip(t *testing.T, s ports.JobStore) {
	now := time.Now()
	want := fullOptions(now)
	j := scheduledJob("u", "opts", "opts.test:80", want.NotBefore)
	j.JobOptions = want
	stored := mustInsert(t, s, j)
	sameOptions(t, "Insert's job", stored.JobOptions, want)
	sameOptions(t, "Get", mustGet(t, s, j.ID).JobOptions, want)
	p := promote(t, s, now.Add(2*time.Minute), 10)
	if len(p) != 1 {
		t.Fatalf("PromoteDue = %v", keysOf(p))
	}
	sameOptions(t, "PromoteDue", p[0].JobOptions, want)
	r := readyAt(t, s, "opts.test:80", domain.PriorityLow)
	if len(r) != 1 {
		t.Fatalf("ListReady(low) = %v", keysOf(r))
	}
	sameOptions(t, "ListReady", r[0].JobOptions, want)
	if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: j.ID, Seq: stored.Seq, Phase: domain.PhaseDispatch, Attempts: 1, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	sameOptions(t, "after Requeue", mustGet(t, s, j.ID).JobOptions, want)
	finish(t, s, stored, domain.StatusFailed, &domain.Result{Reason: domain.ReasonDeadlineExceeded})
	got := mustGet(t, s, j.ID)
	sameOptions(t, "after Finish", got.JobOptions, want)
	if got.Result == nil || got.Result.Reason != domain.ReasonDeadlineExceeded {
		t.Fatalf("result %+v", got.Result)
	}
	// A plain job has plain options.
	plain := mustInsert(t, s, NewJob("u", "plain", "opts.test:80"))
	sameOptions(t, "plain job", mustGet(t, s, plain.ID).JobOptions, domain.JobOptions{})
	if o, ok := s.(ports.OperatorStore); ok {
		js := listAll(t, o, domain.JobFilter{Statuses: []domain.Status{domain.StatusFailed}}, 10)
		if len(js) != 1 {
			t.Fatalf("ListJobs(failed) = %v", keysOf(js))
		}
		sameOptions(t, "ListJobs", js[0].JobOptions, want)
	}
}

func testInsertBatch(t *testing.T, s ports.JobStore) {
	existing := mustInsert(t, s, NewJob("u", "taken", "batch.test:80"))
	batch := []*domain.Job{
		NewJob("u", "b0", "batch.test:80"),
		NewJob("u", "taken", "batch.test:80"),
		NewJob("u", "b2", "batch.test:80"),
		NewJob("u", "b0", "batch.test:80"), // a duplicate inside the batch
		NewJob("v", "b0", "batch.test:80"), // another user's key
	}
	batch[2].Priority = domain.PriorityHigh
	out, err := s.InsertBatch(ctx(t), batch)
	if err != nil {
		t.Fatalf("InsertBatch: %v", err)
	}
	if len(out) != len(batch) {
		t.Fatalf("InsertBatch returned %d outcomes for %d jobs", len(out), len(batch))
	}
	wantFresh := []bool{true, false, true, false, true}
	for i, o := range out {
		if o.Fresh != wantFresh[i] || o.Job == nil {
			t.Fatalf("outcome %d = %+v, want fresh %v", i, o, wantFresh[i])
		}
	}
	if out[1].Job.ID != existing.ID {
		t.Fatalf("duplicate of a stored job answered with %s, want %s", out[1].Job.ID, existing.ID)
	}
	if out[3].Job.ID != batch[0].ID {
		t.Fatalf("duplicate inside the batch answered with %s, want %s", out[3].Job.ID, batch[0].ID)
	}
	for _, i := range []int{0, 2, 4} {
		j := out[i].Job
		if j.ID != batch[i].ID || j.Seq <= existing.Seq || j.ReadySeq <= existing.ReadySeq || j.ReadyQueue != "batch.test:80" {
			t.Fatalf("outcome %d: %+v", i, j)
		}
		mustGet(t, s, j.ID)
	}
	if !(out[0].Job.ReadySeq < out[2].Job.ReadySeq && out[2].Job.ReadySeq < out[4].Job.ReadySeq) {
		t.Fatalf("ReadySeqs do not follow the batch's order: %d %d %d", out[0].Job.ReadySeq, out[2].Job.ReadySeq, out[4].Job.ReadySeq)
	}
	sameKeys(t, "normal", readyAt(t, s, "batch.test:80", domain.PriorityNormal), "taken", "b0", "b0")
	sameKeys(t, "high", readyAt(t, s, "batch.test:80", domain.PriorityHigh), "b2")
	// Duplicates are answered in a later batch too.
	again, err := s.InsertBatch(ctx(t), []*domain.Job{NewJob("u", "b2", "batch.test:80")})
	if err != nil || len(again) != 1 || again[0].Fresh || again[0].Job.ID != batch[2].ID {
		t.Fatalf("InsertBatch(duplicate) = %+v, %v", again, err)
	}
}

func testInsertBatchScheduled(t *testing.T, s ports.JobStore) {
	out, err := s.InsertBatch(ctx(t), nil)
	if err != nil || len(out) != 0 {
		t.Fatalf("InsertBatch(nothing) = %v, %v", out, err)
	}
	now := time.Now()
	out, err = s.InsertBatch(ctx(t), []*domain.Job{
		scheduledJob("u", "s1", "batch.test:80", now.Add(time.Hour)),
		NewJob("u", "r1", "batch.test:80"),
	})
	if err != nil || len(out) != 2 || !out[0].Fresh || !out[1].Fresh {
		t.Fatalf("InsertBatch = %+v, %v", out, err)
	}
	if !out[0].Job.Scheduled() || out[0].Job.ReadySeq != 0 {
		t.Fatalf("scheduled job of a batch: %+v", out[0].Job)
	}
	sameKeys(t, "ready", readyAt(t, s, "batch.test:80", domain.PriorityNormal), "r1")
	if n := nextDue(t, s); !n.Equal(ms(now.Add(time.Hour))) {
		t.Fatalf("NextDue = %v", n)
	}
	if _, err := s.Get(ctx(t), out[0].Job.ID); errors.Is(err, domain.ErrNotFound) {
		t.Fatal("scheduled job of a batch not found")
	}
}

// testRetryClearsSchedule: an operator's retry runs the job now, with no
// deadline, and keeps its other options.
func testRetryClearsSchedule(t *testing.T, s ports.JobStore, o ports.OperatorStore) {
	now := time.Now()
	opts := fullOptions(now)
	j := scheduledJob("u", "retry-opts", "opts.test:80", opts.NotBefore)
	j.JobOptions = opts
	stored := mustInsert(t, s, j)
	finish(t, s, stored, domain.StatusFailed, &domain.Result{Reason: domain.ReasonDeadlineExceeded})
	got, err := o.Retry(ctx(t), &ports.RetryParams{ID: j.ID, Seq: stored.Seq, Now: time.Now()})
	if err != nil {
		t.Fatalf("Retry: %v", err)
	}
	want := opts
	want.NotBefore, want.Deadline = time.Time{}, time.Time{}
	sameOptions(t, "Retry's job", got.JobOptions, want)
	sameOptions(t, "retried job as stored", mustGet(t, s, j.ID).JobOptions, want)
	if got.Scheduled() || got.ReadyQueue != "opts.test:80" {
		t.Fatalf("retried job not ready: %+v", got)
	}
	sameKeys(t, "ready", readyAt(t, s, "opts.test:80", domain.PriorityLow), "retry-opts")
	if d, err := s.Overdue(ctx(t), &ports.OverdueParams{Now: now.Add(2 * time.Hour), Limit: 10}); err != nil || len(d) != 0 {
		t.Fatalf("Overdue after the retry = %v, %v", keysOf(d), err)
	}
}
