package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aquiferhq/aquifer/internal/app"
)

// TestCancelJob: aquifer_cancel_job cancels a job not sent yet, as DELETE
// /jobs/{id} does, and refuses one being sent or already finished.
func TestCancelJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{maxConcurrent: 1})
	release := make(chan struct{})
	up := upstream(t, release)

	var running, waiting enqueued
	e.call(t, "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "running", "url": up.URL + "/a"}, &running)
	var job jobDoc
	for deadline := time.Now().Add(waitFor); job.Status != "in_flight"; {
		if time.Now().After(deadline) {
			t.Fatalf("the first job never started: %+v", job)
		}
		e.call(t, "aquifer_get_job", map[string]any{"job_id": running.JobID}, &job)
	}
	e.call(t, "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "waiting", "url": up.URL + "/b"}, &waiting)

	var canceled struct {
		jobDoc
		Reason string `json:"reason"`
	}
	if res := e.call(t, "aquifer_cancel_job", map[string]any{"job_id": waiting.JobID}, &canceled); res.IsError {
		t.Fatalf("cancel a queued job: %s", errorText(t, res))
	}
	if canceled.JobID != waiting.JobID || canceled.Status != "failed" || canceled.Reason != "canceled" {
		t.Fatalf("canceled job %+v, want status failed, reason canceled", canceled)
	}
	if msg := errorText(t, e.call(t, "aquifer_cancel_job", map[string]any{"job_id": waiting.JobID}, nil)); msg != "job already finished (failed); it cannot be canceled" {
		t.Fatalf("cancel twice: %q", msg)
	}
	if msg := errorText(t, e.call(t, "aquifer_cancel_job", map[string]any{"job_id": running.JobID}, nil)); msg != "job already dispatched: its request is being sent; it cannot be canceled" {
		t.Fatalf("cancel a running job: %q", msg)
	}
	close(release)
	e.call(t, "aquifer_get_job", map[string]any{"job_id": running.JobID, "wait_seconds": 10}, &job)
	if job.Status != "completed" {
		t.Fatalf("the running job %+v, want completed", job)
	}
	e.call(t, "aquifer_get_job", map[string]any{"job_id": waiting.JobID}, &job)
	if job.Status != "failed" || job.Attempts != 0 {
		t.Fatalf("the canceled job %+v: it must never have been sent", job)
	}
}

// TestCancelJobIsTenantScoped: over streamable HTTP with API-key tenants,
// one tenant cannot cancel another's job: it is not found.
func TestCancelJobIsTenantScoped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{maxConcurrent: 1, tenants: []app.Tenant{{Name: "alpha"}, {Name: "bravo"}}})
	release := make(chan struct{})
	defer close(release)
	up := upstream(t, release)
	h := e.srv.HTTPHandler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(app.WithTenant(r.Context(), r.Header.Get("X-Test-Tenant"))))
	}))
	t.Cleanup(hs.Close)
	session := func(tenant string) *sdk.ClientSession {
		client := &http.Client{Transport: tenantTransport{tenant}}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: tenant, Version: "1"}, nil).
			Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: client}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	alpha, bravo := &env{cs: session("alpha")}, &env{cs: session("bravo")}
	var first, second enqueued
	alpha.call(t, "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "1", "url": up.URL}, &first)
	alpha.call(t, "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "2", "url": up.URL}, &second)

	if msg := errorText(t, bravo.call(t, "aquifer_cancel_job", map[string]any{"job_id": second.JobID}, nil)); msg != "job not found (unknown id, or the job expired)" {
		t.Fatalf("bravo cancelling alpha's job: %q, want not found", msg)
	}
	var job jobDoc
	if res := alpha.call(t, "aquifer_cancel_job", map[string]any{"job_id": second.JobID}, &job); res.IsError || job.Status != "failed" {
		t.Fatalf("alpha cancelling its own job: %+v %+v", res, job)
	}
}

// tenantTransport names the tenant on every request.
type tenantTransport struct{ tenant string }

func (t tenantTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Test-Tenant", t.tenant)
	return http.DefaultTransport.RoundTrip(r)
}
