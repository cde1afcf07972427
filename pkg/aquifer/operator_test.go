package aquifer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// waitOperation polls aq.Operation until the operation has ended.
func waitOperation(t *testing.T, ctx context.Context, aq *aquifer.Aquifer, id string) *aquifer.Operation {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		op, err := aq.Operation(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if op.Finished() {
			return op
		}
		if time.Now().After(deadline) {
			t.Fatalf("operation %s still %s: %+v", id, op.State, op)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitJob(t *testing.T, ctx context.Context, aq *aquifer.Aquifer, id aquifer.JobID) *aquifer.Job {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	j, err := aq.Wait(wctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestOperatorCalls drives the facade's operator calls the way an
// embedding program's own console would: find the failed jobs of a tenant,
// replay them in bulk after a dry run, retry one, pause a destination and
// cancel what waits there, all scoped by the caller in the context.
func TestOperatorCalls(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(dest.Close)
	aq := start(t, aquifer.Options{
		Store: aquifer.NewMemoryStore(), CloseStore: true,
		Retry:           aquifer.RetryPolicy{Attempts: 1},
		Rates:           aquifer.RateTable{Defaults: aquifer.Rate{RPS: 1000, MaxConcurrent: 4}},
		FailedRetention: 5 * time.Hour,
		Tenants:         []aquifer.Tenant{{Name: "acme"}, {Name: "ops", Role: aquifer.RoleAdmin}},
	})
	acme := aquifer.WithTenant(t.Context(), "acme")
	admin := aquifer.WithAdmin(t.Context(), "ops")

	failed, err := aq.Enqueue(acme, &aquifer.JobRequest{UserID: "u", IdempotentKey: "k1", URL: dest.URL + "/sync"})
	if err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, acme, aq, failed.JobID)
	if j.Status != aquifer.StatusFailed || len(j.History) != 1 || j.History[0].Status != http.StatusBadGateway {
		t.Fatalf("job %+v, want failed after one 502 in its history", j)
	}
	// Failed jobs are kept for FailedRetention.
	if kept := j.ExpiresAt.Sub(j.UpdatedAt); kept < 5*time.Hour-time.Second || kept > 5*time.Hour+time.Second {
		t.Fatalf("failed job kept for %v, want FailedRetention (5h)", kept)
	}

	page, err := aq.ListJobs(acme, &aquifer.JobQuery{Statuses: []aquifer.Status{aquifer.StatusFailed}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 1 || page.Jobs[0].ID != failed.JobID || page.Jobs[0].UserID != "u" ||
		page.Counts[aquifer.StatusFailed] != 1 || page.NextCursor != "" {
		t.Fatalf("tenant's failed jobs: %+v", page)
	}
	if _, err := aq.ListJobs(acme, &aquifer.JobQuery{Tenant: "other"}); aquifer.ErrorCode(err) != aquifer.CodeForbidden {
		t.Fatalf("a tenant listing another: %v, want CodeForbidden", err)
	}
	if _, err := aq.ListJobs(acme, &aquifer.JobQuery{Limit: aquifer.MaxListLimit + 1}); aquifer.ErrorField(err) != "limit" {
		t.Fatalf("limit too large: %v, want an error naming limit", err)
	}

	// Replay in bulk: a dry run first, then the operation.
	healthy.Store(true)
	q := &aquifer.JobQuery{Statuses: []aquifer.Status{aquifer.StatusFailed}}
	dry, err := aq.RetryJobs(acme, q, true)
	if err != nil || !dry.DryRun || dry.Count != 1 || dry.Operation != nil {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	run, err := aq.RetryJobs(acme, q, false)
	if err != nil || run.Operation == nil || run.Operation.Kind != aquifer.OperationRetry {
		t.Fatalf("bulk retry: %+v, %v", run, err)
	}
	op := waitOperation(t, acme, aq, run.Operation.ID)
	if op.State != aquifer.OperationCompleted || op.Changed != 1 {
		t.Fatalf("operation %+v", op)
	}
	if j := waitJob(t, acme, aq, failed.JobID); j.Status != aquifer.StatusCompleted || len(j.History) != 2 {
		t.Fatalf("replayed job %+v, want completed with two attempts in its history", j)
	}
	if ops, err := aq.Operations(acme); err != nil || len(ops) != 1 || ops[0].ID != op.ID {
		t.Fatalf("Operations: %v, %v", ops, err)
	}

	// One job again, by id: it keeps its history.
	again, err := aq.Retry(acme, failed.JobID)
	if err != nil || again.ID != failed.JobID || again.Attempts != 0 || again.Result != nil {
		t.Fatalf("Retry: %+v, %v", again, err)
	}
	if j := waitJob(t, acme, aq, failed.JobID); len(j.History) != 3 {
		t.Fatalf("history after a retry: %+v", j.History)
	}
	if _, err := aq.Retry(admin, "0123456789abcdef0123456789abcdef"); !aquifer.IsNotFound(err) {
		t.Fatalf("Retry of no job: %v", err)
	}

	// Pausing is an operator's: a tenant may not, an admin may.
	if _, err := aq.PauseLane(acme, dest.URL, "deploy"); aquifer.ErrorCode(err) != aquifer.CodeForbidden {
		t.Fatalf("tenant PauseLane: %v, want CodeForbidden", err)
	}
	lane, err := aq.PauseLane(admin, dest.URL, "deploy")
	if err != nil || lane.Paused == nil || lane.Paused.Reason != "deploy" {
		t.Fatalf("PauseLane: %+v, %v", lane, err)
	}
	held, err := aq.Enqueue(acme, &aquifer.JobRequest{UserID: "u", IdempotentKey: "k2", URL: dest.URL + "/held"})
	if err != nil {
		t.Fatal(err)
	}
	lanes, err := aq.Lanes(admin)
	if err != nil || len(lanes) != 1 || lanes[0].Paused == nil || lanes[0].Backlog != 1 {
		t.Fatalf("Lanes: %+v, %v; want the paused destination with one job waiting", lanes, err)
	}
	dry, err = aq.CancelJobs(admin, &aquifer.JobQuery{Tenant: "acme"}, true)
	if err != nil || dry.Count != 1 {
		t.Fatalf("cancel dry run: %+v, %v", dry, err)
	}
	run, err = aq.CancelJobs(admin, &aquifer.JobQuery{Tenant: "acme"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if op := waitOperation(t, admin, aq, run.Operation.ID); op.Changed != 1 || op.Kind != aquifer.OperationCancel {
		t.Fatalf("cancel operation %+v", op)
	}
	if j := waitJob(t, acme, aq, held.JobID); j.Status != aquifer.StatusFailed || j.Result.Reason != "canceled" {
		t.Fatalf("cancelled job %+v", j)
	}
	if ops, _ := aq.Operations(admin); len(ops) != 2 {
		t.Fatalf("the admin sees %d operations, want both", len(ops))
	}
	if lane, err = aq.ResumeLane(admin, dest.URL); err != nil || lane.Paused != nil {
		t.Fatalf("ResumeLane: %+v, %v", lane, err)
	}
	if lane, err = aq.Lane(acme, dest.URL); err != nil || lane.Paused != nil || string(lane.Destination) != dest.URL {
		t.Fatalf("Lane: %+v, %v", lane, err)
	}
}
