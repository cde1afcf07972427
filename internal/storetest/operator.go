package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// ExerciseOperator runs the ports.OperatorStore contract (listing, cursors,
// counts, attempt history, retry, bulk batches, lane pauses) against stores
// made by newStore, which must implement it. Durability across a reopen is
// each backend's own test.
func ExerciseOperator(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s ports.JobStore, o ports.OperatorStore)
	}{
		{"ListMatchesTheFilterNewestFirst", testListMatchesFilter},
		{"CursorPagingSkipsNothingWhileJobsArrive", testCursorPaging},
		{"ListAndCountLeaveOutExpired", testListExpired},
		{"HistoryRoundTrips", testHistory},
		{"RetentionSetsExpiry", testRetention},
		{"RetryRequeuesFinishedJobs", testRetry},
		{"RetryClearsScheduleAndDeadline", testRetryClearsSchedule},
		{"OperationsRoundTrip", testOperations},
		{"RunBatchRetries", testRunBatchRetry},
		{"RunBatchCancels", testRunBatchCancel},
		{"RunBatchRefusesAStaleRunner", testRunBatchConflict},
		{"LanePauses", testLanePauses},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			o, ok := s.(ports.OperatorStore)
			if !ok {
				t.Fatalf("%T does not implement ports.OperatorStore", s)
			}
			tc.fn(t, s, o)
		})
	}
}

// ms is a time with millisecond precision, as every store keeps times.
func ms(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }

// seedJobs stores n jobs of varied users, tenants, destinations, pools,
// creation times, statuses, results and URL paths, and returns every job in
// the store as read back one by one with Get (the flush jobs too), newest
// first: the reference that listing is checked against.
func seedJobs(t *testing.T, s ports.JobStore, n int, seed uint64) []*domain.Job {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	users := []string{"alice", "bob", domain.Scope("acme", "alice"), domain.Scope("acme", "carol"), domain.Scope("zeta", "dan")}
	lanes := []string{"a.test:80", "b.test:443", "pool:p1", "a.test:80|acme"} // the last: a tenant queue of a.test:80
	paths := []string{"/v1/Chat/completions", "/v1/embeddings", "/hooks/ingest", "/"}
	base := ms(time.Now().Add(-time.Hour))
	var seeded []domain.JobID
	for i := range n {
		lane := lanes[rng.IntN(len(lanes))]
		j := NewJob(users[rng.IntN(len(users))], fmt.Sprint("seed-", seed, "-", i), lane)
		j.URL = "http://" + string(domain.QueueKey(lane).Upstream()) + paths[rng.IntN(len(paths))] + "?token=Secret"
		if lane == "pool:p1" {
			j.PoolID, j.URL = "p1", ""
		}
		j.CreatedAt = base.Add(time.Duration(rng.IntN(3600)) * time.Second)
		j.UpdatedAt = j.CreatedAt
		stored := mustInsert(t, s, j)
		seeded = append(seeded, stored.ID)
		switch rng.IntN(5) {
		case 0: // completed with a status
			status := []int{200, 201, 500}[rng.IntN(3)]
			finish(t, s, stored, domain.StatusCompleted, &domain.Result{ResponseStatus: status})
		case 1: // failed for a reason
			reason := []string{"connection refused", "upstream returned 503 Service Unavailable", domain.ReasonCanceled}[rng.IntN(3)]
			finish(t, s, stored, domain.StatusFailed, &domain.Result{ResponseStatus: 503 * rng.IntN(2), Reason: reason})
		case 2:
			if err := s.MarkInFlight(ctx(t), &ports.MarkInFlightParams{ID: stored.ID, Seq: stored.Seq, At: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	flush(t, s)
	var all []*domain.Job
	for _, id := range seeded {
		all = append(all, mustGet(t, s, id))
	}
	// The flush jobs (user "flush", queued) are found by the user filter,
	// which the seeded users check on their own.
	all = append(all, listAll(t, s.(ports.OperatorStore), domain.JobFilter{UserID: "flush"}, 500)...)
	slices.SortFunc(all, func(a, b *domain.Job) int { return int(b.Seq - a.Seq) })
	return all
}

func finish(t *testing.T, s ports.JobStore, j *domain.Job, st domain.Status, r *domain.Result) {
	t.Helper()
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: st, Attempts: 1, Result: r, Now: time.Now()}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
}

func listAll(t *testing.T, o ports.OperatorStore, f domain.JobFilter, limit int) []*domain.Job {
	t.Helper()
	var out []*domain.Job
	before := int64(0)
	for range 10000 {
		page, err := o.ListJobs(ctx(t), &ports.ListJobsParams{Filter: f, BeforeSeq: before, Limit: limit, Now: time.Now()})
		if err != nil {
			t.Fatalf("ListJobs(%+v): %v", f, err)
		}
		if len(page) > limit {
			t.Fatalf("ListJobs returned %d jobs, limit %d", len(page), limit)
		}
		out = append(out, page...)
		if len(page) < limit {
			return out
		}
		before = page[len(page)-1].Seq
	}
	t.Fatal("paging never ended")
	return nil
}

func jobIDs(js []*domain.Job) []domain.JobID {
	out := make([]domain.JobID, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

func testListMatchesFilter(t *testing.T, s ports.JobStore, o ports.OperatorStore) {
	all := seedJobs(t, s, 150, 1)
	mid := all[len(all)/2].CreatedAt
	filters := []domain.JobFilter{
		{},
		{Statuses: []domain.Status{domain.StatusFailed}},
		{Statuses: []domain.Status{domain.StatusQueued, domain.StatusInFlight}},
		{Statuses: []domain.Status{domain.StatusCompleted}, ResponseStatus: 500},
		{ResponseStatus: 503},
		{UserID: "alice"},
		{UserID: domain.Scope("acme", "alice")},
		{Tenant: "acme"},
		{Tenant: "acme", Statuses: []domain.Status{domain.StatusFailed}},
		{Tenant: "zeta", UserID: domain.Scope("zeta", "dan")},
		{Tenant: "nobody"},
		{Destination: "a.test:80"},
		{Destination: "b.test:443", Statuses: []domain.Status{domain.StatusQueued}},
		{Destination: "pool:p1"},
		{PoolID: "p1"},
		{CreatedAfter: mid},
		{CreatedBefore: mid},
		{CreatedAfter: mid.Add(-20 * time.Minute), CreatedBefore: mid.Add(10 * time.Minute), Tenant: "acme"},
		{Q: "chat"},    // a path, in another case
		{Q: "REFUSED"}, // a reason
		{Q: "secret"},  // only in the query string: never matched
		{Q: "unavailable", Statuses: []domain.Status{domain.StatusFailed}},
		{Q: "/v1/", Destination: "a.test:80", CreatedAfter: mid},
	}
	for _, f := range filters {
		var want []domain.JobID
		wantCounts := map[domain.Status]int64{}
		for _, j := range all {
			if f.Matches(j) {
				want = append(want, j.ID)
			}
			if f.MatchesIgnoringStatus(j) {
				wantCounts[j.Status]++
			}
		}
		for _, limit := range []int{1, 7, 500} {
			got := jobIDs(listAll(t, o, f, limit))
			if !slices.Equal(got, want) {
				t.Fatalf("filter %+v, limit %d: listed %d jobs %v\nwant %d %v", f, limit, len(got), got, len(want), want)
			}
		}
		counts, err := o.CountJobs(ctx(t), &ports.CountJobsParams{Filter: f, Now: time.Now()})
		if err != nil {
			t.Fatalf("CountJobs: %v", err)
		}
		for st, n := range counts {
			if n == 0 {
				delete(counts, st)
			}
		}
		for st, n := range wantCounts {
			if counts[st] != n {
				t.Fatalf("filter %+v: counts %v, want %v", f, counts, wantCounts)
			}
		}
		if len(counts) != len(wantCounts) {
			t.Fatalf("filter %+v: counts %v, want %v", f, counts, wantCounts)
		}
	}
}

func testCursorPaging(t *testing.T, s ports.JobStore, o ports.OperatorStore) {
	var first []*domain.Job
	for i := range 30 {
		first = append(first, mustInsert(t, s, NewJob("u", fmt.Sprint("p", i), "a.test:80")))
	}
	f := domain.JobFilter{UserID: "u"}
	page, err := o.ListJobs(ctx(t), &ports.ListJobsParams{Filter: f, Limit: 10, Now: time.Now()})
	if err != nil || len(page) != 10 {
		t.Fatalf("first page: %d jobs, %v", len(page), err)
	}
	// Jobs arriving between pages show on the next listing's first page,
	// never inside the pages of this one.
	for i := range 5 {
		mustInsert(t, s, NewJob("u", fmt.Sprint("late", i), "a.test:80"))
	}
	got := jobIDs(page)
	before := page[len(page)-1].Seq
	for {
		p, err := o.ListJobs(ctx(t), &ports.ListJobsParams{Filter: f, BeforeSeq: before, Limit: 10, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, jobIDs(p)...)
		if len(p) < 10 {
			break
		}
		before = p[len(p)-1].Seq
	}
	slices.Reverse(first)
	if !slices.Equal(got, jobIDs(first)) {
		t.Fatalf("paged %v\nwant %v", got, jobIDs(first))
	}
	if p, err := o.ListJobs(ctx(t), &ports.ListJobsParams{Filter: f, BeforeSeq: first[len(first)-1].Seq, Limit: 10, Now: time.Now()}); err != nil || len(p) != 0 {
		t.Fatalf("page before the oldest job: %d jobs, %v", len(p), err)
	}
}

func testListExpired(t *testing.T, s ports.JobStore, o ports.OperatorStore) {
	live := mustInsert(t, s, NewJob("u", "live", "a.test:80"))
	old := mustInsert(t, s, NewJob("u", "old", "a.test:80"))
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: old.ID, Status: domain.StatusCompleted, Attempts: 1,
		Result: &domain.Result{ResponseStatus: 200}, Now: time.Now().Add(-domain.CompletedTTL - time.Minute)}); err != nil {
		t.Fatal(err)
	}
	f := domain.JobFilter{UserID: "u"}
	if got := jobIDs(listAll(t, o, f, 10)); !slices.Equal(got, []domain.JobID{live.ID}) {
		t.Fatalf("listed %v, want only the live job %s", got, live.ID)
	}
	c, err := o.CountJobs(ctx(t), &ports.CountJobsParams{Filter: f, Now: time.Now()})
	if err != nil || c[domain.StatusQueued] != 1 || c[domain.StatusCompleted] != 0 {
		t.Fatalf("counts %v, %v; want one queued, the expired job left out", c, err)
	}
}

func sampleHistory(n int) []domain.Attempt {
	var h []domain.Attempt
	at := ms(time.Now().Add(-time.Minute))
	for i := range n {
		a := domain.Attempt{At: at.Add(time.Duration(i) * time.Second), Duration: time.Duration(i+1) * 37 * time.Millisecond}
		switch i % 3 {
		case 0:
			a.Status, a.Signal = 429, domain.SignalRetryAfter
		case 1:
			a.Error = "dial tcp 127.0.0.1:1: connect: connection refused"
		case 2:
			a.Status, a.Signal, a.Member = 200, domain.SignalORCA, "gpu-1"
		}
		h = domain.AppendHistory(h, a)
	}
	return h
}

func sameHistory(t *testing.T, what string, got, want []domain.Attempt) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d attempts %+v, want %d %+v", what, len(got), got, len(want), want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if !g.At.Equal(w.At) || g.Duration.Milliseconds() != w.Duration.Milliseconds() || g.Status != w.Status ||
			g.Error != w.Error || g.Signal != w.Signal || g.Member != w.Member {
			t.Fatalf("%s: attempt %d = %+v, want %+v", what, i, g, w)
		}
	}
}

func testHistory(t *testing.T, s ports.JobStore, o ports.OperatorStore) {
	j := mustInsert(t, s, NewJob("u", "hist", "a.test:80"))
	if got := mustGet(t, s, j.ID); len(got.History) != 0 {
		t.Fatalf("a new job has history %+v", got.History)
	}
	h2 := sampleHistory(2)
	if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: j.ID, Seq: j.Seq, Phase: domain.PhaseDispatch, Attempts: 2, History: h2, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	sameHistory(t, "after Requeue", mustGet(t, s, j.ID).History, h2)
	// A Requeue without History keeps it (a delivery attempt, say).
	if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: j.ID, Seq: j.Seq, Phase: domain.PhaseDispatch, Attempts: 2, Deferrals: 1, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	sameHistory(t, "after a Requeue with no history", mustGet(t, s, j.ID).History, h2)
	h := sampleHistory(14)
	if len(h) != domain.MaxHistory {
		t.Fatalf("AppendHistory kept %d attempts, want %d", len(h), domain.MaxHistory)
	}
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusFailed, Attempts: 14,
		Result: &domain.Result{Reason: "retries exhausted"}, History: h, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	sameHistory(t, "after Finish", mustGet(t, s, j.ID).History, h)
	listed := listAll(t, o, domain.JobFilter{UserID: "u"}, 10)
	if len(listed) != 1 {
		t.Fatalf("listed %d jobs", len(listed))
	}
	sameHistory(t, "listed", listed[0].History, h)
}

func testRetention(t *testing.T, s ports.JobStore, _ ports.OperatorStore) {
	j := mustInsert(t, s, NewJob("u", "keep", "a.test:80"))
	now := time.Now()
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusFailed, Attempts: 1,
		Result: &domain.Result{Reason: "x"}, Retention: 72 * time.Hour, Now: now}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, j.ID).ExpiresAt; got.Sub(now) < 71*time.Hour || got.Sub(now) > 73*time.Hour {
		t.Fatalf("failed job with 72h retention expires at %v (now %v)", got, now)
	}
	d := mustInsert(t, s, NewJob("u", "keep-hook", "a.test:80"))
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: d.ID, Seq: d.Seq, Status: domain.StatusFailed, Attempts: 1,
		Result: &domain.Result{Reason: "x"}, Retention: 72 * time.Hour, Now: now, DeliverIn: "hooks.test:80"}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishDelivery(ctx(t), &ports.FinishDeliveryParams{ID: d.ID, Seq: d.Seq, Delivered: true, Attempts: 1,
		Response: 200, Retention: 72 * time.Hour, Now: now}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, d.ID).ExpiresAt; got.Sub(now) < 71*time.Hour || got.Sub(now) > 73*time.Hour {
		t.Fatalf("delivered failed job with 72h retention expires at %v (now %v)", got, now)
	}
}

func testRetry(t *testing.T, s ports.JobStore, o ports.OperatorStore) {
	j := mustInsert(t, s, NewJob("u", "retry", "a.test:80"))
	if _, err := o.Retry(ctx(t), &ports.RetryParams{ID: j.ID, Seq: j.Seq, Now: time.Now()}); !errors.Is(err, domain.ErrNotFinished) {
		t.Fatalf("Retry of a queued job = %v, want ErrNotFinished", err)
	}
	h := sampleHistory(3)
	readySeq, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusFailed, Attempts: 5,
		Result: &domain.Result{ResponseStatus: 503, Reason: "upstream returned 503"}, History: h, Now: time.Now(), DeliverIn: "hooks.test:80"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Retry(ctx(t), &ports.RetryParams{ID: j.ID, Seq: j.Seq, Now: time.Now()}); !errors.Is(err, domain.ErrNotFinished) {
		t.Fatalf("Retry while the webhook is pending = %v, want ErrNotFinished", err)
	}
	if err := s.FinishDelivery(ctx(t), &ports.FinishDeliveryParams{ID: j.ID, Seq: j.Seq, Delivered: true, Attempts: 1, Response: 200, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	got, err := o.Retry(ctx(t), &ports.RetryParams{ID: j.ID, Seq: j.Seq, Now: now})
	if err != nil {
		t.Fatalf("Retry: %v", err)
	}
	stored := mustGet(t, s, j.ID)
	for _, g := range []*domain.Job{got, stored} {
		if g.ID != j.ID || g.Seq != j.Seq || g.Status != domain.StatusQueued || g.Attempts != 0 || g.Deferrals != 0 ||
			g.Result != nil || g.Delivery != nil || g.ReadyQueue != j.Queue || g.ReadySeq <= readySeq ||
			g.URL != j.URL || string(g.Body) != string(j.Body) || g.Headers["Authorization"] != "Bearer t" ||
			g.WebhookURL != j.WebhookURL || g.ExpiresAt.Before(now.Add(domain.QueuedTTL-time.Minute)) {
			t.Fatalf("retried job = %+v (result %+v, delivery %+v)", g, g.Result, g.Delivery)
		}
		sameHistory(t, "retried job", g.History, h)
	}
	if r := ready(t, s, "a.test:80"); len(r) != 1 || r[0].ID != j.ID {
		t.Fatalf("retried job not ready in its queue: %v", r)
	}
	// Its next result makes a new delivery due.
	if seq, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusCompleted, Attempts: 1,
		Result: &domain.Result{ResponseStatus: 200}, Now: time.Now(), DeliverIn: "hooks.test:80"}); err != nil || seq == 0 {
		t.Fatalf("Finish after a retry = %d, %v; want a new delivery", seq, err)
	}
	if d := mustGet(t, s, j.ID).Delivery; d == nil || d.Status != domain.DeliveryPending || d.Attempts != 0 {
		t.Fatalf("delivery after the retried job finished: %+v", d)
	}
	if _, err := o.Retry(ctx(t), &ports.RetryParams{ID: "ffffffffffffffffffffffffffffffff", Now: time.Now()}); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Retry(unknown) = %v, want ErrNotFound", err)
	}
	// A completed job without a webhook can be retried too.
	c := mustInsert(t, s, NewJob("u", "retry-completed", "b.test:443"))
	finish(t, s, c, domain.StatusCompleted, &domain.Result{ResponseStatus: 200})
	if got, err := o.Retry(ctx(t), &ports.RetryParams{ID: c.ID, Now: time.Now()}); err != nil || got.Status != domain.StatusQueued {
		t.Fatalf("Retry(completed) = %+v, %v", got, err)
	}
}

func sampleOperation(id string, state domain.OperationState, at time.Time) *domain.Operation {
	return &domain.Operation{
		ID: id, Kind: domain.OpKindRetry, State: state,
		Filter: domain.JobFilter{Statuses: []domain.Status{domain.StatusFailed, domain.StatusCompleted}, Tenant: "acme",
			UserID: domain.Scope("acme", "alice"), Destination: "https://api.test:443", PoolID: "acme\x1fp",
			CreatedAfter: ms(at.Add(-time.Hour)), CreatedBefore: ms(at), ResponseStatus: 503, Q: "refused"},
		Cursor: 1234, Total: 100, Processed: 40, Changed: 38, Skipped: 2, Error: "",
		CreatedAt: ms(at), UpdatedAt: ms(at.Add(time.Second)),
	}
}

func sameOperation(t *testing.T, got, want *domain.Operation) {
	t.Helper()
	g, w := *got, *want
	if !g.CreatedAt.Equal(w.CreatedAt) || !g.UpdatedAt.Equal(w.UpdatedAt) ||
		!g.Filter.CreatedAfter.Equal(w.Filter.CreatedAfter) || !g.Filter.CreatedBefore.Equal(w.Filter.CreatedBefore) {
		t.Fatalf("operation times = %+v, want %+v", g, w)
	}
	g.CreatedAt, g.UpdatedAt, g.Filter.CreatedAfter, g.Filter.CreatedBefore = w.CreatedAt, w.UpdatedAt, w.Filter.CreatedAfter, w.Filter.CreatedBefore
	if fmt.Sprintf("%+v", g) != fmt.Sprintf("%+v", w) {
		t.Fatalf("operation = %+v\nwant %+v", g, w)
	}
}

func testOperations(t *testing.T, _ ports.JobStore, o ports.OperatorStore) {
	now := time.Now()
	a := sampleOperation("op-a", domain.OpCompleted, now.Add(-2*time.Minute))
	b := sampleOperation("op-b", domain.OpRunning, now.Add(-time.Minute))
	c := sampleOperation("op-c", domain.OpRunning, now)
	c.Kind, c.Filter = domain.OpKindCancel, domain.JobFilter{}
	for _, op := range []*domain.Operation{a, b, c} {
		if err := o.SaveOperation(ctx(t), op); err != nil {
			t.Fatalf("SaveOperation: %v", err)
		}
	}
	got, err := o.GetOperation(ctx(t), "op-b")
	if err != nil {
		t.Fatal(err)
	}
	sameOperation(t, got, b)
	if _, err := o.GetOperation(ctx(t), "op-none"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("GetOperation(unknown) = %v, want ErrNotFound", err)
	}
	all, err := o.Operations(ctx(t), false)
	if err != nil || len(all) != 3 || all[0].ID != "op-c" || all[1].ID != "op-b" || all[2].ID != "op-a" {
		t.Fatalf("Operations = %v, %v; want c, b, a", all, err)
	}
	running, err := o.Operations(ctx(t), true)
	if err != nil || len(running) != 2 || running[0].ID != "op-c" || running[1].ID != "op-b" {
		t.Fatalf("running Operations = %v, %v; want c, b", running, err)
	}
	sameOperation(t, running[0], c)
	b.State, b.Processed = domain.OpFailed, 41
	b.Error = "store unavailable"
	if err := o.SaveOperation(ctx(t), b); err != nil {
		t.Fatal(err)
	}
	got, err = o.GetOperation(ctx(t), "op-b")
	if err != nil {
		t.Fatal(err)
	}
	sameOperation(t, got, b)
}

func testRunBatchRetry(t *testing.T, s ports.JobStore, o ports.OperatorStore) {
	var items []ports.BatchItem
	var failed []*domain.Job
	for i := range 5 {
		j := mustInsert(t, s, NewJob("u", fmt.Sprint("f", i), "a.test:80"))
		finish(t, s, j, domain.StatusFailed, &domain.Result{Reason: "connection refused"})
		failed = append(failed, j)
		items = append(items, ports.BatchItem{ID: j.ID, Seq: j.Seq})
	}
	queued := mustInsert(t, s, NewJob("u", "q", "a.test:80"))
	items = append(items, ports.BatchItem{ID: queued.ID, Seq: queued.Seq},
		ports.BatchItem{ID: "ffffffffffffffffffffffffffffffff", Seq: 999999}) // gone
	op := sampleOperation("op-r", domain.OpRunning, time.Now())
	op.Filter, op.Processed, op.Changed, op.Skipped = domain.JobFilter{}, 0, 0, 0
	if err := o.SaveOperation(ctx(t), op); err != nil {
		t.Fatal(err)
	}
	next := *op
	next.Processed, next.Cursor = 7, failed[0].Seq
	changed, err := o.RunBatch(ctx(t), &ports.RunBatchParams{Op: &next, PrevProcessed: 0, Items: items, Now: time.Now()})
	if err != nil {
		t.Fatalf("RunBatch: %v", err)
	}
	slices.Sort(changed)
	want := jobIDs(failed)
	slices.Sort(want)
	if !slices.Equal(changed, want) {
		t.Fatalf("RunBatch changed %v, want the failed jobs %v", changed, want)
	}
	for _, j := range failed {
		if g := mustGet(t, s, j.ID); g.Status != domain.StatusQueued || g.Result != nil || g.Attempts != 0 {
			t.Fatalf("after the batch: %+v", g)
		}
	}
	if g := mustGet(t, s, queued.ID); g.Status != domain.StatusQueued || g.ReadySeq != queued.ReadySeq {
		t.Fatalf("the queued job was touched: %+v", g)
	}
	if r := ready(t, s, "a.test:80"); len(r) != 6 {
		t.Fatalf("%d jobs ready, want 6", len(r))
	}
	got, err := o.GetOperation(ctx(t), op.ID)
	if err != nil {
		t.Fatal(err)
	}
	next.Changed, next.Skipped = 5, 2 // added by the batch: the counts commit with the changes
	sameOperation(t, got, &next)
}

func testRunBatchCancel(t *testing.T, s ports.JobStore, o ports.OperatorStore) {
	a := mustInsert(t, s, NewJob("u", "c1", "a.test:80"))
	b := mustInsert(t, s, NewJob("u", "c2", "a.test:80"))
	running := mustInsert(t, s, NewJob("u", "c3", "a.test:80"))
	if err := s.MarkInFlight(ctx(t), &ports.MarkInFlightParams{ID: running.ID, Seq: running.Seq, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	done := mustInsert(t, s, NewJob("u", "c4", "a.test:80"))
	finish(t, s, done, domain.StatusCompleted, &domain.Result{ResponseStatus: 200})
	flush(t, s)
	op := &domain.Operation{ID: "op-c", Kind: domain.OpKindCancel, State: domain.OpRunning, Cursor: 1 << 40, CreatedAt: ms(time.Now()), UpdatedAt: ms(time.Now())}
	if err := o.SaveOperation(ctx(t), op); err != nil {
		t.Fatal(err)
	}
	next := *op
	next.Processed, next.Changed, next.Skipped, next.State = 4, 10, 20, domain.OpCompleted
	changed, err := o.RunBatch(ctx(t), &ports.RunBatchParams{Op: &next, Items: []ports.BatchItem{
		{ID: a.ID, Seq: a.Seq, DeliverIn: "hooks.test:80"}, {ID: b.ID, Seq: b.Seq},
		{ID: running.ID, Seq: running.Seq, DeliverIn: "hooks.test:80"}, {ID: done.ID, Seq: done.Seq, DeliverIn: "hooks.test:80"},
	}, Retention: 5 * time.Hour, Now: time.Now()})
	if err != nil {
		t.Fatalf("RunBatch: %v", err)
	}
	slices.Sort(changed)
	want := []domain.JobID{a.ID, b.ID}
	slices.Sort(want)
	if !slices.Equal(changed, want) {
		t.Fatalf("cancel batch changed %v, want %v", changed, want)
	}
	ga, gb := mustGet(t, s, a.ID), mustGet(t, s, b.ID)
	if !ga.Canceled() || !gb.Canceled() {
		t.Fatalf("not cancelled: %+v %+v", ga.Result, gb.Result)
	}
	if ga.Phase() != domain.PhaseDeliver || ga.ReadyQueue != "hooks.test:80" {
		t.Fatalf("cancelled job with a webhook: phase %v queue %q, want its delivery due", ga.Phase(), ga.ReadyQueue)
	}
	if gb.Phase() != domain.PhaseNone || gb.Delivery != nil {
		t.Fatalf("cancelled job without DeliverIn: phase %v delivery %+v", gb.Phase(), gb.Delivery)
	}
	if d := gb.ExpiresAt.Sub(time.Now()); d < 4*time.Hour || d > 6*time.Hour {
		t.Fatalf("cancelled job expires in %v, want the 5h retention", d)
	}
	if g := mustGet(t, s, running.ID); g.Status != domain.StatusInFlight {
		t.Fatalf("the in-flight job was cancelled: %+v", g)
	}
	if g := mustGet(t, s, done.ID); g.Status != domain.StatusCompleted || g.Delivery != nil {
		t.Fatalf("the completed job was touched: %+v", g)
	}
	if r := ready(t, s, "a.test:80"); len(r) != 0 {
		t.Fatalf("cancelled jobs still ready: %v", jobIDs(r))
	}
	got, err := o.GetOperation(ctx(t), op.ID)
	if err != nil {
		t.Fatal(err)
	}
	next.Changed, next.Skipped = 12, 22 // the batch's 2 changed and 2 left alone, added to what the runner counted
	sameOperation(t, got, &next)
}

func testRunBatchConflict(t *testing.T, s ports.JobStore, o ports.OperatorStore) {
	j := mustInsert(t, s, NewJob("u", "x", "a.test:80"))
	finish(t, s, j, domain.StatusFailed, &domain.Result{Reason: "x"})
	k := mustInsert(t, s, NewJob("u", "y", "a.test:80"))
	finish(t, s, k, domain.StatusFailed, &domain.Result{Reason: "y"})
	op := &domain.Operation{ID: "op-x", Kind: domain.OpKindRetry, State: domain.OpRunning, Cursor: 1 << 40, Processed: 10,
		CreatedAt: ms(time.Now()), UpdatedAt: ms(time.Now())}
	if err := o.SaveOperation(ctx(t), op); err != nil {
		t.Fatal(err)
	}
	next := *op
	next.Processed = 11
	if _, err := o.RunBatch(ctx(t), &ports.RunBatchParams{Op: &next, PrevProcessed: 10, Items: []ports.BatchItem{{ID: j.ID, Seq: j.Seq}}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// A second runner that read the operation before the first batch.
	stale := *op
	stale.Processed = 11
	_, err := o.RunBatch(ctx(t), &ports.RunBatchParams{Op: &stale, PrevProcessed: 10, Items: []ports.BatchItem{{ID: k.ID, Seq: k.Seq}}, Now: time.Now()})
	if !errors.Is(err, ports.ErrOperationConflict) {
		t.Fatalf("stale RunBatch = %v, want ErrOperationConflict", err)
	}
	if g := mustGet(t, s, k.ID); g.Status != domain.StatusFailed {
		t.Fatalf("a refused batch changed a job: %+v", g)
	}
	if _, err := o.RunBatch(ctx(t), &ports.RunBatchParams{Op: &domain.Operation{ID: "op-none"}, Now: time.Now()}); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("RunBatch of an unknown operation = %v, want ErrNotFound", err)
	}
}

func testLanePauses(t *testing.T, _ ports.JobStore, o ports.OperatorStore) {
	if ps, err := o.LanePauses(ctx(t)); err != nil || len(ps) != 0 {
		t.Fatalf("LanePauses on a new store = %v, %v", ps, err)
	}
	at := ms(time.Now())
	for _, p := range []domain.LanePause{
		{Upstream: "https://b.test:443", At: at, Reason: "incident 42"},
		{Upstream: "http://a.test:80", At: at.Add(time.Second)},
		{Upstream: "pool:acme\x1fgpu", At: at},
	} {
		if err := o.PauseLane(ctx(t), p); err != nil {
			t.Fatalf("PauseLane: %v", err)
		}
	}
	// Pausing again replaces the pause.
	if err := o.PauseLane(ctx(t), domain.LanePause{Upstream: "https://b.test:443", At: at.Add(time.Minute), Reason: "still down"}); err != nil {
		t.Fatal(err)
	}
	if err := o.ResumeLane(ctx(t), "http://a.test:80"); err != nil {
		t.Fatal(err)
	}
	if err := o.ResumeLane(ctx(t), "http://never.test:80"); err != nil {
		t.Fatalf("ResumeLane of a lane not paused = %v, want nil", err)
	}
	ps, err := o.LanePauses(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []domain.LanePause{{Upstream: "https://b.test:443", At: at.Add(time.Minute), Reason: "still down"}, {Upstream: "pool:acme\x1fgpu", At: at}}
	if len(ps) != len(want) {
		t.Fatalf("LanePauses = %+v, want %+v", ps, want)
	}
	for i := range want {
		if ps[i].Upstream != want[i].Upstream || !ps[i].At.Equal(want[i].At) || ps[i].Reason != want[i].Reason {
			t.Fatalf("LanePauses = %+v, want %+v", ps, want)
		}
	}
}
