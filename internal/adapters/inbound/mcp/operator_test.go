package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aquiferhq/aquifer/internal/app"
)

// summary is a job of aquifer_list_jobs.
type summary struct {
	JobID          string `json:"job_id"`
	Status         string `json:"status"`
	URL            string `json:"url"`
	Tenant         string `json:"tenant"`
	UserID         string `json:"user_id"`
	ResponseStatus *int   `json:"response_status"`
	Reason         string `json:"reason"`
	Body           *string
	LastAttempt    *struct {
		At         int64   `json:"at"`
		DurationMS float64 `json:"duration_ms"`
		Status     int     `json:"status"`
	} `json:"last_attempt"`
	AttemptsRecorded int `json:"attempts_recorded"`
}

type jobList struct {
	Jobs       []summary        `json:"jobs"`
	NextCursor *string          `json:"next_cursor"`
	Counts     map[string]int64 `json:"counts"`
	Warning    string           `json:"warning"`
}

type laneDoc struct {
	Destination string `json:"destination"`
	Backlog     int64  `json:"backlog"`
	Paused      *struct {
		Since  int64  `json:"since"`
		Reason string `json:"reason"`
	} `json:"paused"`
	Warning string `json:"warning"`
}

type laneList struct {
	Lanes   []laneDoc `json:"lanes"`
	Warning string    `json:"warning"`
}

// flaky answers 500 while failing is set, 200 after; it counts requests.
type flaky struct {
	*httptest.Server
	failing atomic.Bool
	hits    atomic.Int64
}

func newFlaky(t *testing.T) *flaky {
	t.Helper()
	f := &flaky{}
	f.failing.Store(true)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		if f.failing.Load() {
			http.Error(w, "broken deploy", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "fine")
	}))
	t.Cleanup(f.Close)
	return f
}

// waitDone waits for a job to finish and returns it.
func (e *env) waitDone(t *testing.T, id string) jobDoc {
	t.Helper()
	var job jobDoc
	if res := e.call(t, "aquifer_get_job", map[string]any{"job_id": id, "wait_seconds": 10}, &job); res.IsError {
		t.Fatalf("get_job %s: %s", id, errorText(t, res))
	}
	if job.Status != "completed" && job.Status != "failed" {
		t.Fatalf("job %s still %s after 10s", id, job.Status)
	}
	return job
}

func (e *env) enqueue(t *testing.T, user, key, url string) string {
	t.Helper()
	var out enqueued
	if res := e.call(t, "aquifer_enqueue_job", map[string]any{"user_id": user, "idempotent_key": key, "url": url}, &out); res.IsError {
		t.Fatalf("enqueue %s: %s", key, errorText(t, res))
	}
	return out.JobID
}

func TestOperatorToolsAreListed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	tools, err := e.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*sdk.Tool{}
	for _, tool := range tools.Tools {
		byName[tool.Name] = tool
	}
	for name, readOnly := range map[string]bool{"aquifer_list_jobs": true, "aquifer_retry_job": false, "aquifer_lanes": true,
		"aquifer_pause_lane": false, "aquifer_resume_lane": false, "aquifer_cancel_job": false} {
		tool := byName[name]
		if tool == nil {
			t.Errorf("tool %s missing", name)
			continue
		}
		if tool.OutputSchema == nil || len(tool.Description) < 120 {
			t.Errorf("%s: output schema %v, description %q", name, tool.OutputSchema != nil, tool.Description)
		}
		if a := tool.Annotations; a == nil || a.ReadOnlyHint != readOnly {
			t.Errorf("%s: annotations %+v, want readOnlyHint %v (clients ask before tools that change things)", name, a, readOnly)
		}
	}
	if len(tools.Tools) != 12 {
		t.Errorf("want 12 tools, got %d", len(tools.Tools))
	}
}

// TestListJobsFiltersPagesAndCounts: the filters select, pages follow
// their cursors to the end without repeats, the first page counts each
// status, and summaries carry the last attempt but no body.
func TestListJobsFiltersPagesAndCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	good, bad := upstream(t, nil), newFlaky(t)
	var goodIDs, badIDs []string
	for i := range 5 {
		goodIDs = append(goodIDs, e.enqueue(t, "shop", fmt.Sprintf("g%d", i), fmt.Sprintf("%s/orders/%d", good.URL, i)))
	}
	for i := range 2 { // two: a third failure in a row would open the circuit and hold them
		badIDs = append(badIDs, e.enqueue(t, "shop", fmt.Sprintf("b%d", i), bad.URL+"/refunds"))
	}
	for _, id := range append(slices.Clone(goodIDs), badIDs...) {
		e.waitDone(t, id)
	}

	var failed jobList
	if res := e.call(t, "aquifer_list_jobs", map[string]any{"status": []string{"failed"}}, &failed); res.IsError {
		t.Fatal(errorText(t, res))
	}
	if got := ids(failed.Jobs); !sameSet(got, badIDs) {
		t.Fatalf("failed jobs %v, want %v", got, badIDs)
	}
	want := map[string]int64{"queued": 0, "in_flight": 0, "completed": 5, "failed": 2}
	if fmt.Sprint(failed.Counts) != fmt.Sprint(want) {
		t.Fatalf("counts %v, want %v (every status, whatever status says)", failed.Counts, want)
	}
	j := failed.Jobs[0]
	if j.Status != "failed" || j.ResponseStatus == nil || *j.ResponseStatus != 500 || j.LastAttempt == nil ||
		j.LastAttempt.Status != 500 || j.AttemptsRecorded != 2 || j.Body != nil || failed.NextCursor != nil {
		t.Fatalf("failed summary %+v (next %v)", j, failed.NextCursor)
	}
	if failed.Warning != "" {
		t.Fatalf("warning %q over the in-memory transport: only HTTP in open mode warns", failed.Warning)
	}

	var byDest, byQ jobList
	e.call(t, "aquifer_list_jobs", map[string]any{"destination": bad.URL}, &byDest)
	e.call(t, "aquifer_list_jobs", map[string]any{"q": "ORDERS/3"}, &byQ)
	if !sameSet(ids(byDest.Jobs), badIDs) || len(byQ.Jobs) != 1 || byQ.Jobs[0].JobID != goodIDs[3] {
		t.Fatalf("by destination %v, by q %v", ids(byDest.Jobs), ids(byQ.Jobs))
	}

	var seen []string
	var cursor string
	for page := 0; ; page++ {
		args := map[string]any{"limit": 3}
		if cursor != "" {
			args["cursor"] = cursor
		}
		var p jobList
		if res := e.call(t, "aquifer_list_jobs", args, &p); res.IsError {
			t.Fatal(errorText(t, res))
		}
		if (page == 0) != (p.Counts != nil) {
			t.Fatalf("page %d: counts %v; counts come on the first page only", page, p.Counts)
		}
		seen = append(seen, ids(p.Jobs)...)
		if p.NextCursor == nil {
			break
		}
		cursor = *p.NextCursor
	}
	all := append(slices.Clone(goodIDs), badIDs...)
	slices.Reverse(all) // newest first
	if !slices.Equal(seen, all) {
		t.Fatalf("paged %v, want every job once, newest first: %v", seen, all)
	}
}

func ids(js []summary) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.JobID
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestRetryJob: a failed job retried after the destination is fixed runs
// again under the same id, keeps its history, and delivers a second
// webhook; an unfinished or unknown job cannot be retried.
func TestRetryJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{maxConcurrent: 1})
	bad := newFlaky(t)
	var delivered atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delivered.Add(1)
	}))
	t.Cleanup(receiver.Close)

	var out enqueued
	e.call(t, "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "r", "url": bad.URL, "webhook_url": receiver.URL}, &out)
	if job := e.waitDone(t, out.JobID); job.Status != "failed" {
		t.Fatalf("job %+v, want failed", job)
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(waitFor); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	eventually("the first webhook", func() bool { return delivered.Load() == 1 })

	bad.failing.Store(false)
	var retried struct {
		jobDoc
		History []struct {
			Status int `json:"status"`
		} `json:"history"`
	}
	if res := e.call(t, "aquifer_retry_job", map[string]any{"job_id": out.JobID}, &retried); res.IsError {
		t.Fatalf("retry: %s", errorText(t, res))
	}
	if retried.JobID != out.JobID || (retried.Status != "queued" && retried.Status != "in_flight") {
		t.Fatalf("retried job %+v, want the same id, queued", retried.jobDoc)
	}
	var job struct {
		jobDoc
		History []struct {
			Status int `json:"status"`
		} `json:"history"`
	}
	if res := e.call(t, "aquifer_get_job", map[string]any{"job_id": out.JobID, "wait_seconds": 10}, &job); res.IsError || job.Status != "completed" {
		t.Fatalf("after the retry: %+v", job.jobDoc)
	}
	if got := fmt.Sprint(job.History); got != "[{500} {500} {200}]" {
		t.Fatalf("history %s, want both failures kept and the success after them", got)
	}
	eventually("the second webhook", func() bool { return delivered.Load() == 2 })

	// A job still running cannot be retried.
	release := make(chan struct{})
	slow := upstream(t, release)
	running := e.enqueue(t, "u", "slow", slow.URL)
	msg := errorText(t, e.call(t, "aquifer_retry_job", map[string]any{"job_id": running}, nil))
	close(release)
	if !strings.Contains(msg, "has not finished") {
		t.Fatalf("retrying an unfinished job: %q", msg)
	}
	if msg := errorText(t, e.call(t, "aquifer_retry_job", map[string]any{"job_id": strings.Repeat("a", 32)}, nil)); msg != "job not found (unknown id, or the job expired)" {
		t.Fatalf("retrying an unknown job: %q", msg)
	}
}

// TestPauseHoldsAndResumeReleases: a paused destination stores its jobs and
// sends none until it is resumed; the pause shows in the lane and in health.
func TestPauseHoldsAndResumeReleases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	up := newFlaky(t)
	up.failing.Store(false)

	var paused laneDoc
	if res := e.call(t, "aquifer_pause_lane", map[string]any{"destination": up.URL, "reason": "incident 7"}, &paused); res.IsError {
		t.Fatalf("pause: %s", errorText(t, res))
	}
	if paused.Paused == nil || paused.Paused.Reason != "incident 7" || paused.Paused.Since == 0 {
		t.Fatalf("paused lane %+v", paused)
	}
	id := e.enqueue(t, "u", "held", up.URL+"/x")
	var job jobDoc
	e.call(t, "aquifer_get_job", map[string]any{"job_id": id, "wait_seconds": 0.5}, &job)
	if job.Status != "queued" || up.hits.Load() != 0 {
		t.Fatalf("job %s after 0.5s on a paused lane, %d requests sent; want it queued, none sent", job.Status, up.hits.Load())
	}

	var lanes laneList
	e.call(t, "aquifer_lanes", map[string]any{"destination": up.URL}, &lanes)
	if len(lanes.Lanes) != 1 || lanes.Lanes[0].Paused == nil || lanes.Lanes[0].Backlog != 1 {
		t.Fatalf("lane while paused: %+v", lanes)
	}
	var everyLane laneList
	e.call(t, "aquifer_lanes", nil, &everyLane)
	if !slices.ContainsFunc(everyLane.Lanes, func(l laneDoc) bool { return l.Destination == lanes.Lanes[0].Destination && l.Paused != nil }) {
		t.Fatalf("every lane %+v lacks the paused %s", everyLane.Lanes, lanes.Lanes[0].Destination)
	}
	var h struct {
		PausedLanes []struct {
			Lane   string `json:"lane"`
			Reason string `json:"reason"`
		} `json:"paused_lanes"`
	}
	e.call(t, "aquifer_health", nil, &h)
	if len(h.PausedLanes) != 1 || h.PausedLanes[0].Reason != "incident 7" {
		t.Fatalf("health paused_lanes %+v", h.PausedLanes)
	}

	var resumed laneDoc
	if res := e.call(t, "aquifer_resume_lane", map[string]any{"destination": up.URL}, &resumed); res.IsError || resumed.Paused != nil {
		t.Fatalf("resume: %+v %+v", res, resumed)
	}
	if job := e.waitDone(t, id); job.Status != "completed" {
		t.Fatalf("after resume: %+v", job)
	}
}

// TestOperatorToolErrors: each bad argument is named, in words.
func TestOperatorToolErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, c := range []struct {
		name, tool string
		args       map[string]any
		want       string
	}{
		{"unknown status", "aquifer_list_jobs", map[string]any{"status": []string{"failed", "dead"}},
			`invalid status: item 2 of status must be one of queued, in_flight, completed or failed, not "dead"`},
		{"status not an array", "aquifer_list_jobs", map[string]any{"status": "failed"}, "invalid status: status must be an array, not a string"},
		{"status item not a string", "aquifer_list_jobs", map[string]any{"status": []any{1}}, "invalid status: every item of status must be a string; item 1 is a number"},
		{"limit too big", "aquifer_list_jobs", map[string]any{"limit": 501}, "invalid limit: limit must be at most 500, not 501"},
		{"limit zero", "aquifer_list_jobs", map[string]any{"limit": 0}, "invalid limit: limit must be at least 1, not 0"},
		{"response status", "aquifer_list_jobs", map[string]any{"response_status": 42}, "invalid response_status: response_status must be at least 100, not 42"},
		{"bad time", "aquifer_list_jobs", map[string]any{"created_after": "yesterday"}, "invalid created_after: created_after must be an RFC 3339 time"},
		{"times the wrong way round", "aquifer_list_jobs", map[string]any{"created_after": "2026-05-02T00:00:00Z", "created_before": "2026-05-01T00:00:00Z"},
			"invalid created_after: created_after must be before created_before"},
		{"bad destination", "aquifer_list_jobs", map[string]any{"destination": "api.example.com"}, "invalid destination: destination must be scheme://host[:port]"},
		{"bad cursor", "aquifer_list_jobs", map[string]any{"cursor": "nope"}, "invalid cursor: cursor is not one this server returned"},
		{"unknown argument", "aquifer_list_jobs", map[string]any{"state": "failed"}, "invalid arguments: unknown argument state; aquifer_list_jobs takes status, tenant, user_id"},
		{"retry without id", "aquifer_retry_job", map[string]any{}, "invalid job_id: job_id is required"},
		{"retry empty id", "aquifer_retry_job", map[string]any{"job_id": ""}, "invalid job_id: job_id is required"},
		{"pause without destination", "aquifer_pause_lane", map[string]any{"reason": "x"}, "invalid destination: destination is required"},
		{"pause blank destination", "aquifer_pause_lane", map[string]any{"destination": " "}, "invalid destination: destination is required"},
		{"pause bad destination", "aquifer_pause_lane", map[string]any{"destination": "ftp:/x"}, "invalid destination: destination must be scheme://host[:port]"},
		{"reason too long", "aquifer_pause_lane", map[string]any{"destination": "https://a.example", "reason": strings.Repeat("r", 501)},
			"invalid reason: reason must be at most 500 characters"},
		{"lane bad destination", "aquifer_lanes", map[string]any{"destination": "nothing"}, "invalid destination"},
		{"resume empty pool", "aquifer_resume_lane", map[string]any{"destination": "pool:"}, "invalid destination: a pool lane is pool:<pool_id>"},
	} {
		t.Run(c.name, func(t *testing.T) {
			msg := errorText(t, e.call(t, c.tool, c.args, nil))
			if !strings.Contains(msg, c.want) {
				t.Fatalf("error %q does not contain %q", msg, c.want)
			}
			for _, jargon := range []string{"validating", "/properties/", "map[", "has type"} {
				if strings.Contains(msg, jargon) {
					t.Fatalf("error %q speaks validator (%q)", msg, jargon)
				}
			}
		})
	}
}

// scopedServer serves the MCP handler over HTTP with the caller named by
// headers, as the API-key middleware would put it in the context.
func scopedServer(t *testing.T, e *env) *httptest.Server {
	t.Helper()
	h := e.srv.HTTPHandler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		switch {
		case r.Header.Get("X-Test-Admin") != "":
			ctx = app.WithAdmin(ctx, r.Header.Get("X-Test-Admin"))
		case r.Header.Get("X-Test-Tenant") != "":
			ctx = app.WithTenant(ctx, r.Header.Get("X-Test-Tenant"))
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(hs.Close)
	return hs
}

// headerTransport sets one header on every request.
type headerTransport struct{ name, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.name != "" {
		r.Header.Set(h.name, h.value)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func httpSession(t *testing.T, base string, header, value string) *env {
	t.Helper()
	client := &http.Client{Transport: headerTransport{header, value}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "op-" + value, Version: "1"}, nil).
		Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: base, HTTPClient: client}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return &env{cs: cs}
}

// TestOperatorToolsAreTenantScoped: over HTTP with API-key tenants, a
// tenant lists and retries only its own jobs and may not pause; an admin
// key sees every tenant's, named, and may pause.
func TestOperatorToolsAreTenantScoped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{tenants: []app.Tenant{{Name: "alpha"}, {Name: "bravo"}, {Name: "ops", Role: app.RoleAdmin}}})
	hs := scopedServer(t, e)
	alpha, bravo := httpSession(t, hs.URL, "X-Test-Tenant", "alpha"), httpSession(t, hs.URL, "X-Test-Tenant", "bravo")
	admin := httpSession(t, hs.URL, "X-Test-Admin", "ops")
	bad := newFlaky(t)
	id := alpha.enqueue(t, "shop", "1", bad.URL)
	if job := alpha.waitDone(t, id); job.Status != "failed" {
		t.Fatalf("alpha's job %+v", job)
	}

	var own, other, all jobList
	alpha.call(t, "aquifer_list_jobs", nil, &own)
	bravo.call(t, "aquifer_list_jobs", nil, &other)
	admin.call(t, "aquifer_list_jobs", map[string]any{"tenant": "alpha"}, &all)
	if len(own.Jobs) != 1 || own.Jobs[0].UserID != "shop" || own.Jobs[0].Tenant != "" || own.Counts["failed"] != 1 {
		t.Fatalf("alpha's own listing %+v", own)
	}
	if len(other.Jobs) != 0 || other.Counts["failed"] != 0 {
		t.Fatalf("bravo sees %+v", other)
	}
	if len(all.Jobs) != 1 || all.Jobs[0].Tenant != "alpha" || all.Jobs[0].UserID != "shop" || all.Warning != "" {
		t.Fatalf("the admin's listing %+v: want alpha's job, its tenant named, no open-mode warning", all)
	}
	if msg := errorText(t, bravo.call(t, "aquifer_list_jobs", map[string]any{"tenant": "alpha"}, nil)); !strings.Contains(msg, "only an admin key may list another tenant's jobs") {
		t.Fatalf("bravo naming alpha: %q", msg)
	}
	if msg := errorText(t, bravo.call(t, "aquifer_retry_job", map[string]any{"job_id": id}, nil)); msg != "job not found (unknown id, or the job expired)" {
		t.Fatalf("bravo retrying alpha's job: %q", msg)
	}
	if msg := errorText(t, alpha.call(t, "aquifer_pause_lane", map[string]any{"destination": bad.URL}, nil)); msg != "only an admin key may pause or resume lanes" {
		t.Fatalf("a tenant pausing: %q", msg)
	}
	var lane laneDoc
	if res := admin.call(t, "aquifer_pause_lane", map[string]any{"destination": bad.URL}, &lane); res.IsError || lane.Paused == nil {
		t.Fatalf("the admin pausing: %+v %+v", res, lane)
	}
	var retried jobDoc
	if res := admin.call(t, "aquifer_retry_job", map[string]any{"job_id": id}, &retried); res.IsError || retried.Status != "queued" {
		t.Fatalf("the admin retrying alpha's job: %+v %+v", res, retried)
	}
}

// TestOpenModeWarnsOverHTTP: with no API keys, operator tools called over
// HTTP say that anyone who reaches the server may use them.
func TestOpenModeWarnsOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	hs := httptest.NewServer(e.srv.HTTPHandler())
	t.Cleanup(hs.Close)
	open := httpSession(t, hs.URL, "", "")
	var list jobList
	var lanes laneList
	var lane laneDoc
	open.call(t, "aquifer_list_jobs", nil, &list)
	open.call(t, "aquifer_lanes", nil, &lanes)
	open.call(t, "aquifer_pause_lane", map[string]any{"destination": "https://a.example"}, &lane)
	for what, w := range map[string]string{"list": list.Warning, "lanes": lanes.Warning, "pause": lane.Warning} {
		if !strings.HasPrefix(w, "open mode: no API keys are configured") {
			t.Errorf("%s over HTTP in open mode: warning %q", what, w)
		}
	}
}
