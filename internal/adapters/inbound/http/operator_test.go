package httpapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	httpapi "github.com/aquiferhq/aquifer/internal/adapters/inbound/http"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// ---------------------------------------------------------------------------
// Operators over REST: GET /jobs, history, retry, bulk operations, tenant
// scoping and the open-mode warning. Lanes are in lanes_test.go.
// ---------------------------------------------------------------------------

// call sends a request with an API key (none when key is "") and a body
// (none when body is ""), and decodes the JSON object it answers.
func (e *env) call(t *testing.T, method, path, key, body string) (*http.Response, map[string]any, []byte) {
	t.Helper()
	var hdr []string
	if key != "" {
		hdr = append(hdr, "Authorization", "Bearer "+key)
	}
	var rd *strings.Reader
	if body != "" {
		hdr = append(hdr, "Content-Type", "application/json")
		rd = strings.NewReader(body)
	}
	var resp *http.Response
	var b []byte
	if rd != nil {
		resp, b = e.request(t, method, path, rd, hdr...)
	} else {
		resp, b = e.request(t, method, path, nil, hdr...)
	}
	return resp, decodeObject(t, b), b
}

// list fetches GET /jobs?query with key and requires 200.
func (e *env) list(t *testing.T, query, key string) (jobs []map[string]any, page map[string]any) {
	t.Helper()
	resp, m, b := e.call(t, http.MethodGet, "/jobs?"+query, key, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /jobs?%s: status %d, body %s", query, resp.StatusCode, b)
	}
	raw, ok := m["jobs"].([]any)
	if !ok {
		t.Fatalf("GET /jobs?%s: no jobs array: %s", query, b)
	}
	for _, j := range raw {
		jobs = append(jobs, j.(map[string]any))
	}
	return jobs, m
}

func ids(jobs []map[string]any) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i], _ = j["job_id"].(string)
	}
	return out
}

// requireIDs checks that jobs are exactly want, in order.
func requireIDs(t *testing.T, what string, jobs []map[string]any, want ...string) {
	t.Helper()
	if got := ids(jobs); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%s: jobs %v, want %v", what, got, want)
	}
}

// requireCounts checks a listing's counts object.
func requireCounts(t *testing.T, page map[string]any, queued, inFlight, completed, failed int) {
	t.Helper()
	c, ok := page["counts"].(map[string]any)
	if !ok {
		t.Fatalf("page has no counts: %v", page)
	}
	requireKeys(t, "counts", c, "queued", "in_flight", "completed", "failed")
	want := map[string]float64{"queued": float64(queued), "in_flight": float64(inFlight), "completed": float64(completed),
		"failed": float64(failed)}
	for k, v := range want {
		if c[k] != v {
			t.Fatalf("counts %v, want %v", c, want)
		}
	}
}

// reverse returns ids newest first (submission order reversed).
func reverse(in ...string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[len(in)-1-i] = s
	}
	return out
}

// waitSettled waits until nothing is queued or in flight in the store
// and no webhook is pending.
func (e *env) waitSettled(t *testing.T) {
	t.Helper()
	eventually(t, "every job to finish", func() bool {
		c, err := e.store.Counts(t.Context())
		return err == nil && c.Total() == 0 && c.Deliveries == 0
	})
}

func TestListJobsFiltersAndCounts(t *testing.T) {
	e := newEnv(t, envOptions{outage: app.OutageConfig{FailureThreshold: -1}})
	upA := newUpstream(t, false, func(r recorded) response {
		if strings.HasPrefix(r.Path, "/bad") {
			return response{503, "text/plain", []byte("down for maintenance")}
		}
		return response{200, "text/plain", []byte("fine")}
	})
	upB := newUpstream(t, false, fixed(200, "text/plain", "fine"))
	start := time.Now()

	ok1 := e.submit(t, jobFor("u1", "k1", upA.url("/ok/1")))
	ok2 := e.submit(t, jobFor("u2", "k2", upA.url("/ok/2")))
	bad := e.submit(t, jobFor("u1", "k3", upA.url("/bad/1")))
	other := e.submit(t, jobFor("u2", "k4", upB.url("/other/1?access_token=sekrit-token&x=1")))
	e.waitSettled(t)

	all := reverse(ok1, ok2, bad, other)
	jobs, page := e.list(t, "", "")
	requireIDs(t, "unfiltered", jobs, all...)
	requireCounts(t, page, 0, 0, 3, 1)
	if page["next_cursor"] != nil {
		t.Fatalf("one page: next_cursor %v, want null", page["next_cursor"])
	}
	if _, present := page["next_cursor"]; !present {
		t.Fatalf("next_cursor is missing, want null")
	}

	// A summary is the job view without the body, plus the last attempt.
	failed := jobs[1]
	requireKeys(t, "failed job summary", failed, "job_id", "status", "url", "method", "created_at", "updated_at",
		"user_id", "attempts", "response_status", "content_type", "reason", "last_attempt", "attempts_recorded")
	if failed["status"] != "failed" || failed["attempts"] != float64(2) || failed["attempts_recorded"] != float64(2) ||
		failed["response_status"] != float64(503) || failed["url"] != upA.url("/bad/1") {
		t.Fatalf("failed summary %v", failed)
	}
	last, _ := failed["last_attempt"].(map[string]any)
	requireKeys(t, "last_attempt", last, "at", "duration_ms", "status")
	if last["status"] != float64(503) || last["at"].(float64) < float64(start.UnixMilli()) || last["duration_ms"].(float64) < 0 {
		t.Fatalf("last_attempt %v", last)
	}

	// URLs are redacted exactly as GET /jobs/{id} redacts them.
	_, view, _ := e.getJob(t, other)
	if jobs[0]["url"] != view["url"] || !strings.Contains(view["url"].(string), "access_token="+domain.Redacted) {
		t.Fatalf("listing url %v, job view url %v: want the same, redacted", jobs[0]["url"], view["url"])
	}
	_, _, raw := e.call(t, http.MethodGet, "/jobs", "", "")
	if strings.Contains(string(raw), "sekrit") {
		t.Fatalf("a secret URL parameter appears in the listing: %s", raw)
	}

	destA := "http://" + upA.hostPort
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"status=failed", []string{bad}},
		{"status=completed&status=failed", all},
		{"status=completed,failed", all},
		{"status=queued", nil},
		{"destination=" + url.QueryEscape(destA), reverse(ok1, ok2, bad)},
		{"destination=" + url.QueryEscape(destA+"/any/path"), reverse(ok1, ok2, bad)},
		{"user_id=u2", reverse(ok2, other)},
		{"user_id=u1&status=completed", []string{ok1}},
		{"q=BAD", []string{bad}},
		{"q=maintenance", nil},   // the body is not searched
		{"q=503", []string{bad}}, // the failure reason is
		{"response_status=503", []string{bad}},
		{"response_status=200", reverse(ok1, ok2, other)},
		{"created_after=" + start.Add(-time.Minute).UTC().Format(time.RFC3339), all},
		{"created_after=" + strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), nil},
		{"created_before=" + start.Add(-time.Minute).UTC().Format(time.RFC3339Nano), nil},
		{"created_before=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), all},
	} {
		jobs, page := e.list(t, c.query, "")
		requireIDs(t, c.query, jobs, c.want...)
		if _, ok := page["counts"]; !ok {
			t.Fatalf("%s: first page without counts", c.query)
		}
	}

	// Counts cover every status whatever the status filter says, under the
	// other filters.
	_, page = e.list(t, "status=failed&user_id=u1", "")
	requireCounts(t, page, 0, 0, 1, 1)
}

func TestListJobsCursorPaging(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	var submitted []string
	for i := range 7 {
		submitted = append(submitted, e.submit(t, jobFor("u", "page-"+strconv.Itoa(i), up.url("/p"))))
	}
	e.waitSettled(t)
	want := reverse(submitted...)

	var seen []string
	query := "limit=3"
	for pageNo := 0; ; pageNo++ {
		jobs, page := e.list(t, query, "")
		seen = append(seen, ids(jobs)...)
		_, hasCounts := page["counts"]
		if hasCounts != (pageNo == 0) {
			t.Fatalf("page %d: counts present %v, want only on the first page: %v", pageNo, hasCounts, page)
		}
		if pageNo == 0 {
			requireCounts(t, page, 0, 0, 7, 0)
		}
		next, _ := page["next_cursor"].(string)
		if next == "" {
			if len(jobs) != 1 || page["next_cursor"] != nil {
				t.Fatalf("last page: %d jobs, next_cursor %v; want 1 and null", len(jobs), page["next_cursor"])
			}
			break
		}
		if len(jobs) != 3 {
			t.Fatalf("page %d: %d jobs, want 3", pageNo, len(jobs))
		}
		if pageNo > 3 {
			t.Fatalf("paging does not end: %v", seen)
		}
		query = "limit=3&cursor=" + url.QueryEscape(next)
	}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Fatalf("paged through %v, want every job once, newest first: %v", seen, want)
	}

	// A cursor keeps the page's filters.
	jobs, _ := e.list(t, "limit=2&status=completed", "")
	_, page := e.list(t, "limit=2&status=completed", "")
	next, _ := page["next_cursor"].(string)
	more, _ := e.list(t, "limit=2&status=completed&cursor="+url.QueryEscape(next), "")
	requireIDs(t, "second filtered page", more, want[2:4]...)
	requireIDs(t, "first filtered page", jobs, want[:2]...)
}

func TestListJobsBadInput(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, c := range []struct{ query, field string }{
		{"status=bogus", "status"},
		{"status=failed,nope", "status"},
		{"created_after=yesterday", "created_after"},
		{"created_before=2026-13-01T00:00:00Z", "created_before"},
		{"created_after=-5", "created_after"},
		{"created_after=2026-01-02T00:00:00Z&created_before=2026-01-01T00:00:00Z", "created_after"},
		{"response_status=abc", "response_status"},
		{"response_status=42", "response_status"},
		{"response_status=0", "response_status"},
		{"limit=0", "limit"},
		{"limit=501", "limit"},
		{"limit=-1", "limit"},
		{"limit=ten", "limit"},
		{"limit=1&limit=2", "limit"},
		{"cursor=nope", "cursor"},
		{"destination=api.example.com", "destination"},
		{"destination=ftp://files.example.com", "destination"},
		{"q=" + strings.Repeat("x", 201), "q"},
		{"sort=asc", "sort"},
		{"statuses=failed", "statuses"},
	} {
		resp, b := e.request(t, http.MethodGet, "/jobs?"+c.query, nil)
		m := requireJSONError(t, resp, b, http.StatusBadRequest)
		if m["field"] != c.field {
			t.Errorf("GET /jobs?%s: field %v, want %q (%s)", c.query, m["field"], c.field, b)
		}
		if msg, _ := m["error"].(string); !strings.Contains(msg, c.field) {
			t.Errorf("GET /jobs?%s: message %q does not name %s", c.query, msg, c.field)
		}
	}
}

func TestGetJobHistory(t *testing.T) {
	e := newEnv(t, envOptions{})
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Aqueduct-Rps", "50")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(up.Close)

	start := time.Now()
	id := e.submit(t, jobFor("u", "hist", up.URL+"/h"))
	m, raw := e.waitStatus(t, id, "completed")
	hist, ok := m["history"].([]any)
	if !ok || len(hist) != 2 {
		t.Fatalf("history %v, want two attempts: %s", m["history"], raw)
	}
	first, second := hist[0].(map[string]any), hist[1].(map[string]any)
	requireKeys(t, "first attempt", first, "at", "duration_ms", "status")
	requireKeys(t, "second attempt", second, "at", "duration_ms", "status", "signal")
	if first["status"] != float64(503) || second["status"] != float64(200) || second["signal"] != domain.SignalAqueduct {
		t.Fatalf("history %s, want 503 then 200 with signal x-aqueduct", raw)
	}
	if first["at"].(float64) < float64(start.UnixMilli()) || second["at"].(float64) < first["at"].(float64) {
		t.Fatalf("history times out of order: %s", raw)
	}

	// A transport error is recorded as the error, with no status.
	dead := e.submit(t, jobFor("u", "dead", "http://127.0.0.1:1/x"))
	m, raw = e.waitStatus(t, dead, "failed")
	hist, _ = m["history"].([]any)
	if len(hist) != 2 {
		t.Fatalf("history of a dead destination %s, want two attempts", raw)
	}
	for _, h := range hist {
		a := h.(map[string]any)
		requireKeys(t, "failed attempt", a, "at", "duration_ms", "error")
		if msg, _ := a["error"].(string); msg == "" {
			t.Fatalf("attempt %v without its error", a)
		}
	}
}

func TestRetryJobRunsAgainAndRedeliversWebhook(t *testing.T) {
	e := newEnv(t, envOptions{})
	var healthy atomic.Bool
	up := newUpstream(t, false, func(recorded) response {
		if healthy.Load() {
			return response{200, "text/plain", []byte("done")}
		}
		return response{500, "text/plain", []byte("broken")}
	})
	hook := newUpstream(t, true, fixed(204, "", ""))
	j := jobFor("u", "replay", up.url("/r"))
	j["webhook_url"] = hook.url("/hook")
	id := e.submit(t, j)
	e.waitStatus(t, id, "failed")

	// The first webhook is held at the receiver: the delivery is pending,
	// and a retry would race it.
	first := hook.waitArrival(t)
	resp, b := e.request(t, http.MethodPost, "/jobs/"+id+"/retry", nil)
	requireJSONError(t, resp, b, http.StatusConflict)
	hook.releaseOne(t)
	eventually(t, "the first webhook to be delivered", func() bool {
		_, m, _ := e.getJob(t, id)
		w, _ := m["webhook"].(map[string]any)
		return w != nil && w["status"] == "delivered"
	})
	var p map[string]any
	if err := json.Unmarshal(first.Body, &p); err != nil || p["status"] != "failed" {
		t.Fatalf("first webhook %s, want the failure", first.Body)
	}

	healthy.Store(true)
	resp, m, b := e.call(t, http.MethodPost, "/jobs/"+id+"/retry", "", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("retry: status %d, body %s", resp.StatusCode, b)
	}
	// The answer is the job as re-queued; it may be on its way already.
	if m["job_id"] != id || (m["status"] != "queued" && m["status"] != "in_flight") || m["attempts"] != float64(0) {
		t.Fatalf("retry answered %s, want the job queued again with no attempts", b)
	}
	if _, ok := m["response_status"]; ok {
		t.Fatalf("retried job still shows its old result: %s", b)
	}

	second := hook.waitArrival(t)
	hook.releaseOne(t)
	if err := json.Unmarshal(second.Body, &p); err != nil || p["status"] != "completed" || p["job_id"] != id {
		t.Fatalf("second webhook %s, want the completion", second.Body)
	}
	eventually(t, "the second webhook to be delivered", func() bool {
		_, m, _ := e.getJob(t, id)
		w, _ := m["webhook"].(map[string]any)
		return m["status"] == "completed" && w != nil && w["status"] == "delivered"
	})
	_, m, raw := e.getJob(t, id)
	hist, _ := m["history"].([]any)
	if len(hist) != 3 || hist[2].(map[string]any)["status"] != float64(200) || m["attempts"] != float64(1) {
		t.Fatalf("after the retry: %s; want 3 attempts in the history (500, 500, 200) and attempts 1", raw)
	}
	if n := len(up.requests()); n != 3 {
		t.Fatalf("upstream got %d requests, want 3", n)
	}
	if n := len(hook.requests()); n != 2 {
		t.Fatalf("receiver got %d webhooks, want 2", n)
	}

	for _, c := range []struct {
		path   string
		status int
	}{
		{"/jobs/0123456789abcdef0123456789abcdef/retry", http.StatusNotFound},
		{"/jobs/not-a-job/retry", http.StatusNotFound},
	} {
		resp, b := e.request(t, http.MethodPost, c.path, nil)
		requireJSONError(t, resp, b, c.status)
	}
}

func TestRetryUnfinishedJobConflicts(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, true, fixed(200, "text/plain", "ok"))
	id := e.submit(t, jobFor("u", "busy", up.url("/busy")))
	up.waitArrival(t)
	resp, b := e.request(t, http.MethodPost, "/jobs/"+id+"/retry", nil)
	m := requireJSONError(t, resp, b, http.StatusConflict)
	if msg, _ := m["error"].(string); !strings.Contains(msg, "not finished") {
		t.Fatalf("conflict message %q", msg)
	}
	up.releaseOne(t)
	e.waitStatus(t, id, "completed")
}

// bulk posts a bulk body to path and decodes the answer.
func (e *env) bulk(t *testing.T, path, key, body string) (int, map[string]any, []byte, http.Header) {
	t.Helper()
	resp, m, b := e.call(t, http.MethodPost, path, key, body)
	return resp.StatusCode, m, b, resp.Header
}

// dryRun requires a dry run's 200 and returns its count.
func (e *env) dryRun(t *testing.T, path, key, filter string) int {
	t.Helper()
	status, m, b, _ := e.bulk(t, path, key, `{"dry_run":true,"filter":`+filter+`}`)
	if status != http.StatusOK {
		t.Fatalf("dry run %s %s: status %d, body %s", path, filter, status, b)
	}
	requireKeys(t, "dry run", m, "dry_run", "count")
	if m["dry_run"] != true {
		t.Fatalf("dry run answered %s", b)
	}
	return int(m["count"].(float64))
}

// waitOperation polls GET /operations/{id} until the operation has ended.
func (e *env) waitOperation(t *testing.T, id, key string) map[string]any {
	t.Helper()
	var op map[string]any
	eventually(t, "operation "+id+" to finish", func() bool {
		resp, m, b := e.call(t, http.MethodGet, "/operations/"+id, key, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /operations/%s: %d %s", id, resp.StatusCode, b)
		}
		op = m
		return m["state"] != "running"
	})
	return op
}

// startOperation requires a real run's 202 and returns the operation.
func (e *env) startOperation(t *testing.T, path, key, filter string) map[string]any {
	t.Helper()
	status, m, b, hdr := e.bulk(t, path, key, `{"filter":`+filter+`}`)
	if status != http.StatusAccepted {
		t.Fatalf("%s %s: status %d, body %s", path, filter, status, b)
	}
	requireKeys(t, "bulk answer", m, "operation")
	op := m["operation"].(map[string]any)
	requireKeys(t, "operation", op, "id", "kind", "state", "filter", "total", "processed", "changed", "skipped",
		"progress", "created_at", "updated_at")
	if loc := hdr.Get("Location"); loc != "/operations/"+op["id"].(string) {
		t.Fatalf("Location %q, want /operations/%s", loc, op["id"])
	}
	return op
}

func TestBulkRetry(t *testing.T) {
	e := newEnv(t, envOptions{outage: app.OutageConfig{FailureThreshold: -1}})
	var healthy atomic.Bool
	upA := newUpstream(t, false, func(recorded) response {
		if healthy.Load() {
			return response{200, "text/plain", []byte("ok")}
		}
		return response{503, "text/plain", []byte("no")}
	})
	upB := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	const failing = 12
	for i := range failing {
		e.submit(t, jobFor("u", "a-"+strconv.Itoa(i), upA.url("/a")))
	}
	for i := range 3 {
		e.submit(t, jobFor("u", "b-"+strconv.Itoa(i), upB.url("/b")))
	}
	e.waitSettled(t)

	destA := `"http://` + upA.hostPort + `"`
	if n := e.dryRun(t, "/jobs/retry", "", `{"status":["failed"]}`); n != failing {
		t.Fatalf("dry run of the failed jobs counted %d, want %d", n, failing)
	}
	if n := e.dryRun(t, "/jobs/retry", "", `{}`); n != failing+3 {
		t.Fatalf("dry run of every finished job counted %d, want %d", n, failing+3)
	}
	if n := e.dryRun(t, "/jobs/retry", "", `{"destination":"http://`+upB.hostPort+`","status":["completed"]}`); n != 3 {
		t.Fatalf("dry run of B's completed jobs counted %d, want 3", n)
	}
	if n := e.dryRun(t, "/jobs/retry", "", `{"created_after":`+strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)+`}`); n != 0 {
		t.Fatalf("dry run of future jobs counted %d", n)
	}
	if n := len(upA.requests()); n != 2*failing {
		t.Fatalf("dry runs changed something: upstream A got %d requests, want %d", n, 2*failing)
	}

	for _, c := range []struct{ body, field string }{
		{`{"filter":{"stauts":["failed"]}}`, "filter.stauts"},
		{`{"dry_run":true}`, "filter"},
		{`{"filter":{},"dryrun":true}`, "dryrun"},
		{`{"filter":{"status":["nope"]},"dry_run":true}`, "filter.status"},
		{`{"filter":{"status":["queued"]},"dry_run":true}`, "filter.status"},
		{`{"filter":{"status":"failed"}}`, "filter.status"},
		{`{"filter":{"created_after":"soon"}}`, "filter.created_after"},
		{`{"filter":{"created_before":true}}`, "filter.created_before"},
		{`{"filter":{"response_status":700}}`, "filter.response_status"},
		{`{"filter":{"destination":"nohost"}}`, "filter.destination"},
		{`{"filter":[]}`, "filter"},
	} {
		status, m, b, _ := e.bulk(t, "/jobs/retry", "", c.body)
		if status != http.StatusBadRequest || m["field"] != c.field {
			t.Errorf("POST /jobs/retry %s: %d %s, want 400 naming %s", c.body, status, b, c.field)
		}
	}
	resp, b := e.request(t, http.MethodPost, "/jobs/retry", nil)
	requireJSONError(t, resp, b, http.StatusBadRequest)

	healthy.Store(true)
	op := e.startOperation(t, "/jobs/retry", "", `{"status":["failed"],"destination":`+destA+`}`)
	if op["kind"] != "retry" || op["total"] != float64(failing) {
		t.Fatalf("operation %v, want a retry of %d jobs", op, failing)
	}
	filter, _ := op["filter"].(map[string]any)
	requireKeys(t, "operation filter", filter, "status", "destination")
	id := op["id"].(string)
	done := e.waitOperation(t, id, "")
	if done["state"] != "completed" || done["changed"] != float64(failing) || done["skipped"] != float64(0) ||
		done["processed"] != float64(failing) || done["progress"] != float64(1) {
		t.Fatalf("finished operation %v", done)
	}
	_, list, b := e.call(t, http.MethodGet, "/operations", "", "")
	ops, _ := list["operations"].([]any)
	if len(ops) != 1 || ops[0].(map[string]any)["id"] != id {
		t.Fatalf("GET /operations: %s", b)
	}

	e.waitSettled(t)
	_, page := e.list(t, "", "")
	requireCounts(t, page, 0, 0, failing+3, 0)
	// Every failed job was re-queued exactly once: two failed attempts and
	// one more each.
	if n := len(upA.requests()); n != 3*failing {
		t.Fatalf("upstream A got %d requests, want %d", n, 3*failing)
	}
	jobs, _ := e.list(t, "destination="+url.QueryEscape("http://"+upA.hostPort), "")
	for _, j := range jobs {
		if j["attempts_recorded"] != float64(3) {
			t.Fatalf("retried job %v, want 3 attempts recorded", j)
		}
	}

	resp, b = e.request(t, http.MethodGet, "/operations/op_nope", nil)
	requireJSONError(t, resp, b, http.StatusNotFound)
}

// ---------------------------------------------------------------------------
// Tenants and the admin role.
// ---------------------------------------------------------------------------

const (
	keyA   = "key-of-tenant-a"
	keyB   = "key-of-tenant-b"
	keyOps = "key-of-the-operator"
)

func hashKey(k string) string {
	sum := sha256.Sum256([]byte(k))
	return hex.EncodeToString(sum[:])
}

func tenantsWithAdmin() []app.Tenant {
	return []app.Tenant{{Name: "a", KeySHA256: hashKey(keyA)}, {Name: "b", KeySHA256: hashKey(keyB)},
		{Name: "ops", KeySHA256: hashKey(keyOps), Role: app.RoleAdmin}}
}

// submitAs submits a job with key and returns its id.
func (e *env) submitAs(t *testing.T, key string, job map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(job)
	resp, m, raw := e.call(t, http.MethodPost, "/jobs", key, string(b))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /jobs: %d %s", resp.StatusCode, raw)
	}
	return m["job_id"].(string)
}

func TestOperatorEndpointsAreTenantScoped(t *testing.T) {
	e := newEnv(t, envOptions{tenants: tenantsWithAdmin()})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	ja := e.submitAs(t, keyA, jobFor("u", "same-key", up.url("/a")))
	jb := e.submitAs(t, keyB, jobFor("u", "same-key", up.url("/b")))
	e.waitSettled(t)

	resp, b := e.request(t, http.MethodGet, "/jobs", nil)
	requireJSONError(t, resp, b, http.StatusUnauthorized)
	if resp.Header.Get("Aquifer-Warning") != "" {
		t.Fatalf("Aquifer-Warning with API keys configured: %q", resp.Header.Get("Aquifer-Warning"))
	}

	// A tenant sees its own jobs, under its own names.
	jobs, page := e.list(t, "", keyA)
	requireIDs(t, "tenant a", jobs, ja)
	requireCounts(t, page, 0, 0, 1, 0)
	if _, shown := jobs[0]["tenant"]; shown || jobs[0]["user_id"] != "u" {
		t.Fatalf("tenant's own job shown as %v, want user_id u and no tenant", jobs[0])
	}
	requireIDs(t, "tenant a naming itself", first(e.list(t, "tenant=a", keyA)), ja)
	resp, m, b := e.call(t, http.MethodGet, "/jobs?tenant=b", keyA, "")
	if resp.StatusCode != http.StatusForbidden || m["field"] != "tenant" {
		t.Fatalf("tenant a listing b's jobs: %d %s, want 403 naming tenant", resp.StatusCode, b)
	}
	if resp.Header.Get("Aquifer-Warning") != "" {
		t.Fatalf("Aquifer-Warning with API keys configured")
	}

	// Another tenant's job is not there at all.
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/jobs/" + ja}, {http.MethodPost, "/jobs/" + ja + "/retry"},
	} {
		resp, _, b := e.call(t, c.method, c.path, keyB, "")
		requireJSONError(t, resp, b, http.StatusNotFound)
	}

	// The admin sees every tenant's jobs, each with its tenant.
	jobs, page = e.list(t, "", keyOps)
	requireIDs(t, "admin", jobs, jb, ja)
	requireCounts(t, page, 0, 0, 2, 0)
	if jobs[0]["tenant"] != "b" || jobs[1]["tenant"] != "a" || jobs[0]["user_id"] != "u" || jobs[1]["user_id"] != "u" {
		t.Fatalf("admin listing %v, want tenants b and a with user_id u", jobs)
	}
	requireIDs(t, "admin, tenant b", first(e.list(t, "tenant=b", keyOps)), jb)
	requireIDs(t, "admin, tenant a's user u", first(e.list(t, "tenant=a&user_id=u", keyOps)), ja)
	_, view, b := e.call(t, http.MethodGet, "/jobs/"+jb, keyOps, "")
	if view["tenant"] != "b" || view["user_id"] != "u" {
		t.Fatalf("admin GET /jobs/{id}: %s, want tenant b and user_id u", b)
	}

	// Bulk operations count and act on what the caller may see.
	if n := e.dryRun(t, "/jobs/retry", keyA, `{}`); n != 1 {
		t.Fatalf("tenant a's dry run counted %d, want 1", n)
	}
	if n := e.dryRun(t, "/jobs/retry", keyOps, `{}`); n != 2 {
		t.Fatalf("admin's dry run counted %d, want 2", n)
	}
	status, m, b, _ := e.bulk(t, "/jobs/retry", keyA, `{"dry_run":true,"filter":{"tenant":"b"}}`)
	if status != http.StatusForbidden || m["field"] != "filter.tenant" {
		t.Fatalf("tenant a's bulk retry of b's jobs: %d %s, want 403 naming filter.tenant", status, b)
	}
	opB := e.startOperation(t, "/jobs/retry", keyB, `{}`)
	opAdmin := e.startOperation(t, "/jobs/retry", keyOps, `{"tenant":"a"}`)
	e.waitOperation(t, opB["id"].(string), keyB)
	e.waitOperation(t, opAdmin["id"].(string), keyOps)
	for _, c := range []struct {
		key  string
		want []string
	}{
		{keyA, []string{opAdmin["id"].(string)}}, // the admin's operation on a's jobs
		{keyB, []string{opB["id"].(string)}},
		{keyOps, []string{opAdmin["id"].(string), opB["id"].(string)}},
	} {
		_, m, b := e.call(t, http.MethodGet, "/operations", c.key, "")
		var got []string
		for _, op := range m["operations"].([]any) {
			got = append(got, op.(map[string]any)["id"].(string))
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("GET /operations as %s: %s, want %v", c.key, b, c.want)
		}
	}
	resp, _, b = e.call(t, http.MethodGet, "/operations/"+opB["id"].(string), keyA, "")
	requireJSONError(t, resp, b, http.StatusNotFound)
	e.waitSettled(t)
	if n := len(up.requests()); n != 4 {
		t.Fatalf("upstream got %d requests, want 4 (each job twice)", n)
	}

	// Only the admin may pause and resume.
	dest := "/lanes/" + url.PathEscape("http://"+up.hostPort)
	for _, action := range []string{"/pause", "/resume"} {
		resp, m, b := e.call(t, http.MethodPost, dest+action, keyA, "")
		requireJSONError(t, resp, b, http.StatusForbidden)
		if m["error"] != "only an admin key may pause or resume lanes" {
			t.Fatalf("tenant %s: %s", action, b)
		}
		resp, _, b = e.call(t, http.MethodPost, dest+action, keyOps, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("admin %s: %d %s", action, resp.StatusCode, b)
		}
	}
	resp, _, b = e.call(t, http.MethodGet, "/lanes", keyA, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tenant GET /lanes: %d %s", resp.StatusCode, b)
	}
}

// first returns a listing's jobs, for requireIDs.
func first(jobs []map[string]any, _ map[string]any) []map[string]any { return jobs }

func TestOpenModeWarning(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	id := e.submit(t, jobFor("u", "w", up.url("/w")))
	e.waitStatus(t, id, "completed")
	dest := "/lanes/" + url.PathEscape("http://"+up.hostPort)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/jobs", ""},
		{http.MethodGet, "/jobs?bogus=1", ""}, // errors too
		{http.MethodPost, "/jobs/" + id + "/retry", ""},
		{http.MethodPost, "/jobs/retry", `{"filter":{},"dry_run":true}`},
		{http.MethodPost, "/jobs/cancel", `{"filter":{},"dry_run":true}`},
		{http.MethodGet, "/operations", ""},
		{http.MethodGet, "/operations/op_x", ""},
		{http.MethodGet, "/lanes", ""},
		{http.MethodGet, dest, ""},
		{http.MethodPost, dest + "/pause", ""},
		{http.MethodPost, dest + "/resume", ""},
	} {
		resp, _, _ := e.call(t, c.method, c.path, "", c.body)
		if got := resp.Header.Get("Aquifer-Warning"); got != httpapi.OpenModeWarning {
			t.Errorf("%s %s: Aquifer-Warning %q, want %q", c.method, c.path, got, httpapi.OpenModeWarning)
		}
	}
	if httpapi.OpenModeWarning != "open mode: no API keys are configured; anyone who can reach this address can list, retry, cancel and pause" {
		t.Fatalf("warning text changed: %q", httpapi.OpenModeWarning)
	}
	for _, path := range []string{"/health", "/jobs/" + id} {
		resp, _ := e.request(t, http.MethodGet, path, nil)
		if got := resp.Header.Get("Aquifer-Warning"); got != "" {
			t.Errorf("GET %s (not an operator endpoint): Aquifer-Warning %q", path, got)
		}
	}
}
