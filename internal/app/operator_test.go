package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// TestHistoryAndRetry: each attempt lands in the job's history; a failed
// job retried by an operator runs again with its original request, keeps
// its id and history, and its new result gets a new webhook.
func TestHistoryAndRetry(t *testing.T) {
	var healthy atomic.Bool
	target := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if healthy.Load() {
			w.Header().Set("X-Aqueduct-Rps", "40")
			w.WriteHeader(http.StatusCreated)
			return
		}
		if n == 1 {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	hooks := newHooks(t)
	b := setup(t, func(c *app.Config) { c.Retry.Attempts = 2 })
	r := req("hist", target.URL+"/v1/run?token=x")
	r.WebhookURL = hooks.URL + "/h"
	id := b.enqueue(t, r)
	failed := b.waitStatus(t, id, domain.StatusFailed)
	if len(failed.History) != 2 || failed.History[0].Status != 503 || failed.History[1].Status != 503 {
		t.Fatalf("history after two 503s = %+v", failed.History)
	}
	if failed.History[0].Signal != domain.SignalRetryAfter || failed.History[1].Signal != "" {
		t.Fatalf("signals = %q, %q; want retry-after on the first", failed.History[0].Signal, failed.History[1].Signal)
	}
	waitFor(t, "the failure's webhook", func() bool { return hooks.count() == 1 })
	if _, err := b.svc.Retry(t.Context(), "ffffffffffffffffffffffffffffffff"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Retry(unknown) = %v", err)
	}

	healthy.Store(true)
	again, err := b.svc.Retry(t.Context(), id)
	if err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if again.ID != id || again.Status == domain.StatusFailed || again.Result != nil {
		t.Fatalf("retried job = %+v", again)
	}
	done := b.waitStatus(t, id, domain.StatusCompleted)
	if done.Result.ResponseStatus != http.StatusCreated || done.Attempts != 1 {
		t.Fatalf("after the retry: result %+v attempts %d", done.Result, done.Attempts)
	}
	if len(done.History) != 3 || done.History[2].Status != 201 || done.History[2].Signal != domain.SignalAqueduct {
		t.Fatalf("history after the retry = %+v", done.History)
	}
	waitFor(t, "the retry's webhook", func() bool { return hooks.count() == 2 })
	hits := target.snapshot()
	if len(hits) != 3 || hits[2].path != "/v1/run" || hits[2].body != hits[0].body {
		t.Fatalf("target saw %d requests; the retry must resend the original request", len(hits))
	}
	// A completed job can be replayed too; a queued one cannot.
	if _, err := b.svc.Retry(t.Context(), id); err != nil {
		t.Fatalf("Retry(completed) = %v", err)
	}
	b.waitStatus(t, id, domain.StatusCompleted)
	waitFor(t, "the third webhook", func() bool { return hooks.count() == 3 })

	if _, err := b.svc.PauseLane(t.Context(), target.URL, "hold"); err != nil {
		t.Fatal(err)
	}
	q := b.enqueue(t, req("queued", target.URL))
	if _, err := b.svc.Retry(t.Context(), q); !errors.Is(err, domain.ErrNotFinished) {
		t.Fatalf("Retry(queued) = %v, want ErrNotFinished", err)
	}
}

// TestListJobsFiltersAndPages: the façade's listing checks its input,
// scopes by tenant, pages with opaque cursors and counts on the first page.
func TestListJobsFiltersAndPages(t *testing.T) {
	target := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	b := setup(t, func(c *app.Config) {
		c.Retry.Attempts, c.Outage.FailureThreshold = 1, -1
		c.Tenants = []app.Tenant{{Name: "acme"}, {Name: "zeta"}, {Name: "ops", Role: app.RoleAdmin}}
	})
	acme, zeta := app.WithTenant(t.Context(), "acme"), app.WithTenant(t.Context(), "zeta")
	admin := app.WithAdmin(t.Context(), "ops")
	var acmeIDs []domain.JobID
	for i := range 7 {
		path := "/ok"
		if i%2 == 0 {
			path = "/bad"
		}
		res, err := b.svc.Enqueue(acme, req(fmt.Sprint("a", i), target.URL+path))
		if err != nil {
			t.Fatal(err)
		}
		acmeIDs = append(acmeIDs, res.JobID)
	}
	for i := range 3 {
		if _, err := b.svc.Enqueue(zeta, req(fmt.Sprint("z", i), target.URL+"/ok")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every job to finish", func() bool { return target.count() == 10 })
	waitFor(t, "the last results recorded", func() bool {
		p, err := b.svc.ListJobs(admin, &app.JobQuery{Statuses: []domain.Status{domain.StatusCompleted, domain.StatusFailed}})
		return err == nil && len(p.Jobs) == 10
	})

	// A tenant pages through its own jobs only, newest first, under its own names.
	var got []domain.JobID
	q := &app.JobQuery{Limit: 3}
	for pages := 0; ; pages++ {
		p, err := b.svc.ListJobs(acme, q)
		if err != nil {
			t.Fatal(err)
		}
		if pages == 0 && (p.Counts[domain.StatusFailed] != 4 || p.Counts[domain.StatusCompleted] != 3) {
			t.Fatalf("acme's counts = %v, want 4 failed and 3 completed", p.Counts)
		}
		if pages > 0 && p.Counts != nil {
			t.Fatalf("counts on page %d: %v (first page only)", pages, p.Counts)
		}
		for _, j := range p.Jobs {
			if j.UserID != "u1" {
				t.Fatalf("a tenant sees user_id %q, want its own name u1", j.UserID)
			}
			got = append(got, j.ID)
		}
		if p.NextCursor == "" {
			break
		}
		q.Cursor = p.NextCursor
	}
	want := slices.Clone(acmeIDs)
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		t.Fatalf("acme paged %v, want %v", got, want)
	}
	// Filters: status, destination, q (the path), response status.
	p, err := b.svc.ListJobs(acme, &app.JobQuery{Statuses: []domain.Status{domain.StatusFailed}, Destination: target.URL, Q: "BAD", ResponseStatus: 502})
	if err != nil || len(p.Jobs) != 4 {
		t.Fatalf("failed /bad jobs = %d, %v; want 4", len(p.Jobs), err)
	}
	// The admin sees everyone; a tenant may not name another.
	if p, err := b.svc.ListJobs(admin, &app.JobQuery{}); err != nil || len(p.Jobs) != 10 {
		t.Fatalf("admin listing = %d jobs, %v", len(p.Jobs), err)
	}
	if p, err := b.svc.ListJobs(admin, &app.JobQuery{Tenant: "zeta"}); err != nil || len(p.Jobs) != 3 {
		t.Fatalf("admin listing of zeta = %d jobs, %v", len(p.Jobs), err)
	}
	var de *domain.Error
	if _, err := b.svc.ListJobs(zeta, &app.JobQuery{Tenant: "acme"}); !errors.As(err, &de) || de.Code != domain.CodeForbidden {
		t.Fatalf("zeta listing acme = %v, want forbidden", err)
	}
	// Bad input names the field.
	for field, q := range map[string]*app.JobQuery{
		"status":          {Statuses: []domain.Status{"lost"}},
		"limit":           {Limit: app.MaxListLimit + 1},
		"cursor":          {Cursor: "bm90LWEtY3Vyc29y"},
		"destination":     {Destination: "api.example.com"},
		"response_status": {ResponseStatus: 42},
		"created_after":   {CreatedAfter: time.Unix(200, 0), CreatedBefore: time.Unix(100, 0)},
	} {
		if _, err := b.svc.ListJobs(admin, q); !errors.As(err, &de) || de.Code != domain.CodeInvalid || de.Field != field {
			t.Errorf("query %+v = %v, want invalid %s", q, err, field)
		}
	}
	// Another tenant's job is invisible to Retry.
	if _, err := b.svc.Retry(zeta, acmeIDs[0]); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("zeta retrying acme's job = %v, want not found", err)
	}
	// Tenants may not pause lanes; the admin may.
	if _, err := b.svc.PauseLane(acme, target.URL, ""); !errors.Is(err, app.ErrOperatorOnly) {
		t.Fatalf("tenant pause = %v, want ErrOperatorOnly", err)
	}
	if _, err := b.svc.PauseLane(admin, target.URL, "maintenance"); err != nil {
		t.Fatalf("admin pause = %v", err)
	}
}

// TestPauseHoldsDispatchAndSurvivesRestart: a paused lane stores its jobs
// and sends none; the pause outlives the process; resuming releases the
// jobs, and health shows the pause while it lasts.
func TestPauseHoldsDispatchAndSurvivesRestart(t *testing.T) {
	target := newUpstream(t, nil)
	store := newStore(t)
	b := setup(t, func(c *app.Config) { c.Store = store })
	lane, err := b.svc.PauseLane(t.Context(), target.URL, "incident 7")
	if err != nil || lane.Paused == nil || lane.Paused.Reason != "incident 7" {
		t.Fatalf("PauseLane = %+v, %v", lane, err)
	}
	var ids []domain.JobID
	for i := range 3 {
		ids = append(ids, b.enqueue(t, req(fmt.Sprint("p", i), target.URL)))
	}
	clockOf(t).drv.For(5 * time.Second)
	if n := target.count(); n != 0 {
		t.Fatalf("a paused lane dispatched %d jobs", n)
	}
	h := b.svc.Health(t.Context())
	if len(h.PausedLanes) != 1 || h.PausedLanes[0].Reason != "incident 7" {
		t.Fatalf("health paused_lanes = %+v", h.PausedLanes)
	}
	stopService(t, b.svc)

	// A new process on the same store starts with the lane paused.
	cfg := app.Config{Store: store, Doer: clockOf(t).doer(&http.Client{}), Clock: clockOf(t).clock(), Logger: zap.NewNop(),
		Rates: app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 16}}, Rand: noJitter}
	svc, err := app.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopService(t, svc) })
	clockOf(t).drv.For(5 * time.Second)
	if n := target.count(); n != 0 {
		t.Fatalf("the pause did not survive a restart: %d jobs sent", n)
	}
	if v, err := svc.Lane(t.Context(), target.URL); err != nil || v.Paused == nil || v.Backlog != 3 {
		t.Fatalf("lane after restart = %+v, %v; want paused with a backlog of 3", v, err)
	}
	if v, err := svc.ResumeLane(t.Context(), target.URL); err != nil || v.Paused != nil {
		t.Fatalf("ResumeLane = %+v, %v", v, err)
	}
	waitFor(t, "the held jobs to run", func() bool { return target.count() == 3 })
	for _, id := range ids {
		waitFor(t, "job "+string(id)+" to complete", func() bool {
			j, err := svc.Get(t.Context(), id)
			return err == nil && j.Status == domain.StatusCompleted
		})
	}
	if h := svc.Health(t.Context()); len(h.PausedLanes) != 0 {
		t.Fatalf("health after resume: %+v", h.PausedLanes)
	}
}

// TestLaneViewSaysWhy: the lane view shows the pace a destination set and
// the signal that set it, and the last failure.
func TestLaneViewSaysWhy(t *testing.T) {
	target := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		w.Header().Set("X-Aqueduct-Rps", "25")
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	b := setup(t, func(c *app.Config) { c.Retry.Attempts, c.Outage.FailureThreshold = 1, -1 })
	id := b.enqueue(t, req("ok", target.URL+"/ok"))
	b.waitStatus(t, id, domain.StatusCompleted)
	bad := b.enqueue(t, req("fail", target.URL+"/fail"))
	b.waitStatus(t, bad, domain.StatusFailed)
	v, err := b.svc.Lane(t.Context(), target.URL)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Live || v.RPS != 25 || v.PacedBy != domain.SignalAqueduct || v.PacedAt.IsZero() || v.CeilingRPS != 1000 {
		t.Fatalf("lane = %+v; want live, paced to 25 rps by x-aqueduct under a 1000 rps ceiling", v)
	}
	if v.LastError == "" || v.LastErrorAt.IsZero() {
		t.Fatalf("lane last error = %q at %v", v.LastError, v.LastErrorAt)
	}
	all, err := b.svc.Lanes(t.Context())
	if err != nil || len(all) != 1 || all[0].Destination != v.Destination {
		t.Fatalf("Lanes = %+v, %v", all, err)
	}
	if _, err := b.svc.Lane(t.Context(), "not a url"); err == nil {
		t.Fatal("Lane(not a url) succeeded")
	}
}

// TestBulkRetryResumesWhereItStopped: a bulk retry interrupted after some
// batches (its progress and those batches committed together) resumes at
// the next start and re-queues every remaining job exactly once.
func TestBulkRetryResumesWhereItStopped(t *testing.T) {
	var healthy atomic.Bool
	target := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		if healthy.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	})
	store := newStore(t)
	// Circuits off: each failure counts against its own job at once.
	b := setup(t, func(c *app.Config) { c.Store, c.Retry.Attempts, c.Outage.FailureThreshold = store, 1, -1 })
	const n = 23
	for i := range n {
		b.enqueue(t, req(fmt.Sprint("b", i), target.URL))
	}
	failed := []domain.Status{domain.StatusFailed}
	waitFor(t, "every job to fail", func() bool {
		p, err := b.svc.ListJobs(t.Context(), &app.JobQuery{Statuses: failed})
		return err == nil && len(p.Jobs) == n
	})
	dry, err := b.svc.StartOperation(t.Context(), domain.OpKindRetry, &app.JobQuery{Statuses: failed}, true)
	if err != nil || !dry.DryRun || dry.Count != n || dry.Operation != nil {
		t.Fatalf("dry run = %+v, %v", dry, err)
	}
	if _, err := b.svc.StartOperation(t.Context(), domain.OpKindCancel, &app.JobQuery{Statuses: failed}, true); err == nil {
		t.Fatal("a cancel of failed jobs was accepted")
	}
	stopService(t, b.svc)
	healthy.Store(true)

	// What a run killed after two batches of 5 leaves: those 10 jobs
	// re-queued and the progress saying so, committed together.
	page, err := store.ListJobs(t.Context(), &ports.ListJobsParams{Filter: domain.JobFilter{Statuses: failed}, Limit: n, Now: clockOf(t).now()})
	if err != nil || len(page) != n {
		t.Fatal(err)
	}
	op := &domain.Operation{ID: "op_test", Kind: domain.OpKindRetry, Filter: domain.JobFilter{Statuses: failed},
		State: domain.OpRunning, Cursor: page[0].Seq + 1, Total: n, CreatedAt: clockOf(t).now(), UpdatedAt: clockOf(t).now()}
	if err := store.SaveOperation(t.Context(), op); err != nil {
		t.Fatal(err)
	}
	for batch := range 2 {
		next := *op
		var items []ports.BatchItem
		for _, j := range page[batch*5 : batch*5+5] {
			items = append(items, ports.BatchItem{ID: j.ID, Seq: j.Seq})
		}
		next.Cursor, next.Processed = page[batch*5+4].Seq, op.Processed+5
		if _, err := store.RunBatch(t.Context(), &ports.RunBatchParams{Op: &next, PrevProcessed: op.Processed, Items: items, Now: clockOf(t).now()}); err != nil {
			t.Fatal(err)
		}
		op, _ = store.GetOperation(t.Context(), op.ID)
	}
	if op.Changed != 10 {
		t.Fatalf("after two batches the operation says %d changed", op.Changed)
	}

	cfg := app.Config{Store: store, Doer: clockOf(t).doer(&http.Client{}), Clock: clockOf(t).clock(), Logger: zap.NewNop(),
		Rates: app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 16}}, Rand: noJitter, OperationBatch: 4}
	svc, err := app.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopService(t, svc) })
	var got *domain.Operation
	waitFor(t, "the resumed operation to finish", func() bool {
		got, err = svc.GetOperation(t.Context(), op.ID)
		return err == nil && got.Finished()
	})
	if got.State != domain.OpCompleted || got.Changed != n || got.Processed != n || got.Skipped != 0 {
		t.Fatalf("operation = %+v; want completed with all %d changed once", got, n)
	}
	waitFor(t, "every job to complete", func() bool {
		p, err := svc.ListJobs(t.Context(), &app.JobQuery{Statuses: []domain.Status{domain.StatusCompleted}})
		return err == nil && len(p.Jobs) == n
	})
	// Each job was sent once before (and failed) and once after the replay.
	if c := target.count(); c != 2*n {
		t.Fatalf("target saw %d requests, want %d", c, 2*n)
	}
	ops, err := svc.Operations(t.Context())
	if err != nil || len(ops) != 1 {
		t.Fatalf("Operations = %v, %v", ops, err)
	}
}

// TestBulkCancel: a bulk cancel ends the queued jobs of a paused lane, with
// their webhooks, and leaves the others.
func TestBulkCancel(t *testing.T) {
	target := newUpstream(t, nil)
	other := newUpstream(t, nil)
	hooks := newHooks(t)
	b := setup(t, nil)
	if _, err := b.svc.PauseLane(t.Context(), target.URL, ""); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		r := req(fmt.Sprint("c", i), target.URL)
		r.WebhookURL = hooks.URL
		b.enqueue(t, r)
	}
	keep := b.enqueue(t, req("keep", other.URL))
	b.waitStatus(t, keep, domain.StatusCompleted)
	res, err := b.svc.StartOperation(t.Context(), domain.OpKindCancel, &app.JobQuery{Destination: target.URL}, false)
	if err != nil || res.Operation == nil || res.Count != 6 {
		t.Fatalf("StartOperation = %+v, %v", res, err)
	}
	waitFor(t, "the cancel to finish", func() bool {
		op, err := b.svc.GetOperation(t.Context(), res.Operation.ID)
		return err == nil && op.Finished() && op.Changed == 6
	})
	waitFor(t, "six webhooks", func() bool { return hooks.count() == 6 })
	for _, p := range hooks.payloads(t) {
		if p.Status != string(domain.StatusFailed) {
			t.Fatalf("webhook payload %+v, want failed", p)
		}
	}
	if _, err := b.svc.ResumeLane(t.Context(), target.URL); err != nil {
		t.Fatal(err)
	}
	clockOf(t).drv.For(2 * time.Second)
	if n := target.count(); n != 0 {
		t.Fatalf("cancelled jobs were sent: %d", n)
	}
	if _, err := b.svc.GetOperation(app.WithTenant(context.Background(), "nobody"), res.Operation.ID); err == nil {
		t.Fatal("an operation was visible to a tenant that did not start it")
	}
}

// TestListCountsAreReusedForASecond: the first page's counts of one filter
// are counted once a second however often it is polled; the jobs listed
// are always read afresh.
func TestListCountsAreReusedForASecond(t *testing.T) {
	target := newUpstream(t, nil)
	b := setup(t, nil)
	if _, err := b.svc.PauseLane(t.Context(), target.URL, ""); err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, req("one", target.URL))
	first, err := b.svc.ListJobs(t.Context(), &app.JobQuery{})
	if err != nil || first.Counts[domain.StatusQueued] != 1 {
		t.Fatalf("first listing = %+v, %v", first, err)
	}
	b.enqueue(t, req("two", target.URL))
	again, err := b.svc.ListJobs(t.Context(), &app.JobQuery{Statuses: []domain.Status{domain.StatusQueued}})
	if err != nil || len(again.Jobs) != 2 || again.Counts[domain.StatusQueued] != 1 {
		t.Fatalf("within the second: %d jobs, counts %v, %v; want both jobs and the counts reused", len(again.Jobs), again.Counts, err)
	}
	clockOf(t).drv.For(1100 * time.Millisecond)
	later, err := b.svc.ListJobs(t.Context(), &app.JobQuery{})
	if err != nil || later.Counts[domain.StatusQueued] != 2 {
		t.Fatalf("a second later: counts %v, %v; want 2 queued", later.Counts, err)
	}
}

// TestBulkRetryOfCancelledJobs: jobs cancelled a moment ago and then
// retried in bulk run (the cancellation still remembered for them covers
// only their cancelled copies).
func TestBulkRetryOfCancelledJobs(t *testing.T) {
	target := newUpstream(t, nil)
	b := setup(t, nil)
	if _, err := b.svc.PauseLane(t.Context(), target.URL, ""); err != nil {
		t.Fatal(err)
	}
	var ids []domain.JobID
	for i := range 3 {
		id := b.enqueue(t, req(fmt.Sprint("x", i), target.URL))
		if _, err := b.svc.Cancel(t.Context(), id); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		ids = append(ids, id)
	}
	if _, err := b.svc.ResumeLane(t.Context(), target.URL); err != nil {
		t.Fatal(err)
	}
	res, err := b.svc.StartOperation(t.Context(), domain.OpKindRetry, &app.JobQuery{Statuses: []domain.Status{domain.StatusFailed}}, false)
	if err != nil || res.Count != 3 {
		t.Fatalf("StartOperation = %+v, %v", res, err)
	}
	for _, id := range ids {
		b.waitStatus(t, id, domain.StatusCompleted)
	}
	if n := target.count(); n != 3 {
		t.Fatalf("target saw %d requests, want 3", n)
	}
}
