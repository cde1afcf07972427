package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	httpapi "github.com/aquiferhq/aquifer/internal/adapters/inbound/http"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// ---------------------------------------------------------------------------
// Job options on POST /jobs, and in the job view.
// ---------------------------------------------------------------------------

const testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// withOptions is a job request with the given options merged in.
func withOptions(job map[string]any, opts map[string]any) map[string]any {
	for k, v := range opts {
		job[k] = v
	}
	return job
}

// TestPostJobOptionsShownInView submits a job with every option and checks
// the job view shows each as the server resolved it: the job is scheduled
// (queued, in no lane), never sent before its time.
func TestPostJobOptionsShownInView(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	notBefore := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	deadline := notBefore.Add(30 * time.Minute)
	id := e.submit(t, withOptions(jobFor("u", "all", up.url("/later")), map[string]any{
		"not_before": notBefore.Format(time.RFC3339Nano), "deadline": deadline.UnixMilli(), "priority": "high",
		"retry":           map[string]any{"max_attempts": 4, "backoff_seconds": 1.5, "max_backoff_seconds": 10},
		"timeout_seconds": 2.5, "traceparent": testTraceParent, "tracestate": "vendor=x",
	}))
	_, m, raw := e.getJob(t, id)
	want := map[string]any{
		"status": "queued", "scheduled": true, "not_before": notBefore.Format("2006-01-02T15:04:05.000Z"),
		"deadline": deadline.Format("2006-01-02T15:04:05.000Z"), "priority": "high", "timeout_seconds": 2.5,
		"traceparent": testTraceParent,
	}
	for k, v := range want {
		if m[k] != v {
			t.Fatalf("job view %s = %v, want %v; view %s", k, m[k], v, raw)
		}
	}
	r, _ := m["retry"].(map[string]any)
	if r["max_attempts"] != float64(4) || r["backoff_seconds"] != 1.5 || r["max_backoff_seconds"] != float64(10) {
		t.Fatalf("job view retry = %v, want max_attempts 4, backoff 1.5, max backoff 10", m["retry"])
	}
	up.requireNoArrival(t, 100*time.Millisecond)

	// delay_seconds works the same way, counted from now.
	before := time.Now()
	id = e.submit(t, withOptions(jobFor("u", "delayed", up.url("/delayed")), map[string]any{"delay_seconds": 600, "priority": "low"}))
	_, m, raw = e.getJob(t, id)
	nb, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["not_before"]))
	if err != nil || nb.Before(before.Add(599*time.Second)) || nb.After(time.Now().Add(601*time.Second)) || m["scheduled"] != true || m["priority"] != "low" {
		t.Fatalf("delayed job view %s: want not_before about 600s ahead, scheduled, low", raw)
	}

	// A scheduled job can be cancelled while it waits.
	resp, b := e.request(t, http.MethodDelete, "/jobs/"+id, nil)
	if resp.StatusCode != http.StatusOK || decodeObject(t, b)["status"] != "failed" {
		t.Fatalf("DELETE of a scheduled job: %d %s", resp.StatusCode, b)
	}
}

// TestPostJobWithoutOptions checks a plain job's view: priority normal, no
// option fields, not scheduled — and it runs at once.
func TestPostJobWithoutOptions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	id := e.submit(t, jobFor("u", "plain", up.url("/now")))
	m, raw := e.waitStatus(t, id, "completed")
	if m["priority"] != "normal" {
		t.Fatalf("plain job priority %v, want normal: %s", m["priority"], raw)
	}
	for _, k := range []string{"not_before", "deadline", "retry", "timeout_seconds", "traceparent", "scheduled"} {
		if _, ok := m[k]; ok {
			t.Fatalf("plain job view has %s: %s", k, raw)
		}
	}
	// A not_before in the past is "at once".
	id = e.submit(t, withOptions(jobFor("u", "past", up.url("/past")), map[string]any{"not_before": time.Now().Add(-time.Minute).UnixMilli()}))
	if m, raw := e.waitStatus(t, id, "completed"); m["not_before"] != nil {
		t.Fatalf("past not_before is kept: %s", raw)
	}
}

// TestPostJobOptionErrors checks that each malformed or out-of-bounds
// option is a 400 naming its field, and that nothing is stored.
func TestPostJobOptionErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	future := time.Now().Add(time.Hour)
	cases := []struct {
		opts  map[string]any
		field string
		msg   string // a part of the error message
	}{
		{map[string]any{"not_before": "tomorrow"}, "not_before", "RFC 3339"},
		{map[string]any{"not_before": true}, "not_before", "must be a string (an RFC 3339 time) or a number"},
		{map[string]any{"not_before": 1.5}, "not_before", "RFC 3339"},
		{map[string]any{"not_before": time.Now().Add(90 * 24 * time.Hour).UnixMilli()}, "not_before", "ahead"},
		{map[string]any{"delay_seconds": "10"}, "delay_seconds", "must be a number, not a string"},
		{map[string]any{"delay_seconds": -1}, "delay_seconds", "≥ 0"},
		{map[string]any{"delay_seconds": 5, "not_before": future.UnixMilli()}, "delay_seconds", "mutually exclusive"},
		{map[string]any{"deadline": []any{}}, "deadline", "not an array"},
		{map[string]any{"deadline": time.Now().Add(-time.Hour).Format(time.RFC3339)}, "deadline", "in the past"},
		{map[string]any{"deadline": future.Format(time.RFC3339), "not_before": future.Add(time.Minute).Format(time.RFC3339)}, "deadline", "not after not_before"},
		{map[string]any{"max_wait_seconds": 0}, "max_wait_seconds", "at least"},
		{map[string]any{"max_wait_seconds": 5, "deadline": future.UnixMilli()}, "max_wait_seconds", "mutually exclusive"},
		{map[string]any{"priority": "urgent"}, "priority", `"high", "normal" or "low"`},
		{map[string]any{"priority": 1}, "priority", "must be a string"},
		{map[string]any{"retry": 3}, "retry", "must be an object"},
		{map[string]any{"retry": map[string]any{"max_attempts": 0}}, "retry.max_attempts", "between 1 and 25"},
		{map[string]any{"retry": map[string]any{"max_attempts": 26}}, "retry.max_attempts", "between 1 and 25"},
		{map[string]any{"retry": map[string]any{"max_attempts": 2.5}}, "retry.max_attempts", "whole number"},
		{map[string]any{"retry": map[string]any{"max_attempts": "3"}}, "retry.max_attempts", "must be a number"},
		{map[string]any{"retry": map[string]any{"backoff_seconds": -2}}, "retry.backoff_seconds", "≥ 0"},
		{map[string]any{"retry": map[string]any{"max_backoff_seconds": 5}}, "retry.max_backoff_seconds", "needs retry.backoff_seconds"},
		{map[string]any{"retry": map[string]any{"backoff_seconds": 5, "max_backoff_seconds": 1}}, "retry.max_backoff_seconds", "less than"},
		{map[string]any{"timeout_seconds": 601}, "timeout_seconds", "at most 600"},
		{map[string]any{"timeout_seconds": false}, "timeout_seconds", "must be a number"},
		{map[string]any{"traceparent": "00-abc"}, "traceparent", "W3C traceparent"},
		{map[string]any{"traceparent": testTraceParent, "tracestate": "novalue"}, "tracestate", "key=value"},
	}
	before := e.storeTotal(t)
	for i, c := range cases {
		resp, b := e.post(t, withOptions(jobFor("u", fmt.Sprint("bad", i), up.url("/x")), c.opts))
		m := requireJSONError(t, resp, b, http.StatusBadRequest)
		if m["field"] != c.field || !strings.Contains(fmt.Sprint(m["error"]), c.msg) {
			t.Errorf("options %v: %s, want field %s and an error with %q", c.opts, b, c.field, c.msg)
		}
	}
	if after := e.storeTotal(t); after != before {
		t.Fatalf("refused submissions stored %d jobs", after-before)
	}
}

// TestPostJobTraceHeaders checks the W3C trace context request headers: used
// when the body names no traceparent, the body's winning otherwise, and an
// unparsable header ignored (the job is accepted without it).
func TestPostJobTraceHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	up := newUpstream(t, true, fixed(200, "text/plain", "ok")) // gated: jobs stay put
	post := func(key string, opts map[string]any, hdr ...string) map[string]any {
		t.Helper()
		raw, _ := json.Marshal(withOptions(jobFor("u", key, up.url("/"+key)), opts))
		resp, b := e.request(t, http.MethodPost, "/jobs", bytes.NewReader(raw), append([]string{"Content-Type", "application/json"}, hdr...)...)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s: %d %s", key, resp.StatusCode, b)
		}
		_, m, _ := e.getJob(t, decodeObject(t, b)["job_id"].(string))
		return m
	}
	const other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	if m := post("header", nil, "traceparent", testTraceParent); m["traceparent"] != testTraceParent {
		t.Fatalf("header traceparent: view %v", m["traceparent"])
	}
	if m := post("body-wins", map[string]any{"traceparent": other}, "traceparent", testTraceParent); m["traceparent"] != other {
		t.Fatalf("body and header traceparent: view %v, want the body's", m["traceparent"])
	}
	if m := post("bad-header", nil, "traceparent", "garbage"); m["traceparent"] != nil {
		t.Fatalf("garbage header traceparent kept: %v", m["traceparent"])
	}
}

// TestTraceParentReachesTarget checks, end to end over REST, that a job
// submitted with a traceparent header is sent with a traceparent of the
// same trace and a new parent id, and with the tracestate.
func TestTraceParentReachesTarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	raw, _ := json.Marshal(jobFor("u", "traced", up.url("/traced")))
	resp, b := e.request(t, http.MethodPost, "/jobs", bytes.NewReader(raw), "Content-Type", "application/json",
		"traceparent", testTraceParent, "tracestate", "congo=t61rcWkgMzE")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /jobs: %d %s", resp.StatusCode, b)
	}
	got := up.waitArrival(t)
	tp := got.Header.Get("Traceparent")
	if !domain.ValidTraceParent(tp) {
		t.Fatalf("target got traceparent %q, want a valid one", tp)
	}
	if tp[3:35] != testTraceParent[3:35] {
		t.Fatalf("target got trace id %s, want the submitter's %s", tp[3:35], testTraceParent[3:35])
	}
	if tp[36:52] == testTraceParent[36:52] {
		t.Fatalf("target got the submitter's own parent id %s, want a child's", tp[36:52])
	}
	if ts := got.Header.Get("Tracestate"); ts != "congo=t61rcWkgMzE" {
		t.Fatalf("target got tracestate %q", ts)
	}
}

// TestStreamOmitsPositionWhileScheduled checks that a scheduled job's SSE
// stream reports no queue position (it is in no queue yet).
func TestStreamOmitsPositionWhileScheduled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	id := e.submit(t, withOptions(jobFor("u", "sched", up.url("/s")), map[string]any{"delay_seconds": 3600}))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/jobs/"+id+"/stream", nil)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body) // until the context ends the stream
	if !strings.Contains(buf.String(), "event: queued") {
		t.Fatalf("stream %q has no queued frame", buf.String())
	}
	if strings.Contains(buf.String(), "event: position") {
		t.Fatalf("stream of a scheduled job reports a position: %q", buf.String())
	}
}

// ---------------------------------------------------------------------------
// POST /jobs/batch
// ---------------------------------------------------------------------------

// postBatch posts a raw body to POST /jobs/batch.
func (e *env) postBatch(t *testing.T, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	return e.request(t, http.MethodPost, "/jobs/batch", strings.NewReader(body), append([]string{"Content-Type", "application/json"}, hdr...)...)
}

// batchResult is the answer to POST /jobs/batch.
type batchResult struct {
	Results []struct {
		Index      int    `json:"index"`
		Outcome    string `json:"outcome"`
		StatusCode int    `json:"status_code"`
		JobID      string `json:"job_id"`
		Status     string `json:"status"`
		Error      string `json:"error"`
		Field      string `json:"field"`
	} `json:"results"`
	Created, Duplicates, Errors int
}

func jobJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBatchMixedItems checks a batch of valid, invalid, malformed and
// duplicate items: one result per item, in order, each as POST /jobs would
// have answered it alone; the valid ones stored and sent, with the
// request's trace header where they have no traceparent of their own.
func TestBatchMixedItems(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	existing := e.submit(t, jobFor("u", "existing", up.url("/existing")))
	up.waitArrival(t)
	items := []string{
		jobJSON(t, jobFor("u", "b0", up.url("/b0"))),
		jobJSON(t, jobFor("u", "existing", up.url("/existing"))),                                           // duplicate of a stored job
		jobJSON(t, map[string]any{"user_id": "u", "idempotent_key": "b2"}),                                 // no url
		`{"user_id":"u","idempotent_key":"b3","url":"` + up.url("/b3") + `","retry":{"max_attempts":"x"}}`, // wrong type
		`"not an object"`,
		jobJSON(t, withOptions(jobFor("u", "b5", up.url("/b5")), map[string]any{"priority": "high", "delay_seconds": 3600})),
		jobJSON(t, jobFor("u", "b0", up.url("/b0"))), // duplicate of an earlier item
		jobJSON(t, withOptions(jobFor("u", "b7", up.url("/b7")), map[string]any{"not_before": "soon"})),
	}
	resp, b := e.postBatch(t, `{"jobs":[`+strings.Join(items, ",")+`]}`, "traceparent", testTraceParent)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /jobs/batch: %d %s", resp.StatusCode, b)
	}
	if resp.Header.Get("X-Aquifer-Total-Jobs") == "" {
		t.Fatalf("batch answer has no load headers")
	}
	var out batchResult
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		outcome string
		code    int
		field   string
	}{
		{"created", 201, ""}, {"duplicate", 200, ""}, {"error", 400, "url"}, {"error", 400, "retry.max_attempts"},
		{"error", 400, ""}, {"created", 201, ""}, {"duplicate", 200, ""}, {"error", 400, "not_before"},
	}
	if len(out.Results) != len(want) || out.Created != 2 || out.Duplicates != 2 || out.Errors != 4 {
		t.Fatalf("batch answer %s: want %d results, 2 created, 2 duplicates, 4 errors", b, len(want))
	}
	for i, w := range want {
		r := out.Results[i]
		if r.Index != i || r.Outcome != w.outcome || r.StatusCode != w.code || r.Field != w.field {
			t.Fatalf("result %d = %+v, want %+v; answer %s", i, r, w, b)
		}
		if w.outcome == "error" && (r.Error == "" || r.JobID != "") || w.outcome != "error" && (!domain.ValidJobID(r.JobID) || r.Status == "") {
			t.Fatalf("result %d = %+v", i, r)
		}
	}
	if out.Results[1].JobID != existing || out.Results[6].JobID != out.Results[0].JobID {
		t.Fatalf("duplicates name %s and %s, want %s and %s", out.Results[1].JobID, out.Results[6].JobID, existing, out.Results[0].JobID)
	}
	if !strings.Contains(out.Results[4].Error, "expected a JSON object") {
		t.Fatalf("a string item: %q", out.Results[4].Error)
	}

	// The valid ones were stored with their options; the request's trace
	// header applies to them.
	m, raw := e.waitStatus(t, out.Results[0].JobID, "completed")
	if m["traceparent"] != testTraceParent {
		t.Fatalf("batch item without a traceparent of its own: %s", raw)
	}
	_, m, raw = e.getJob(t, out.Results[5].JobID)
	if m["scheduled"] != true || m["priority"] != "high" {
		t.Fatalf("scheduled batch item: %s", raw)
	}
}

// TestBatchRequestErrors checks what fails a batch as a whole: a body that
// is no object with 1–1000 jobs (400), and a body over the batch limit
// (413); an item over the body limit fails alone (413 in its result).
func TestBatchRequestErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{maxBody: 1024})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	one := jobJSON(t, jobFor("u", "k", up.url("/x")))
	many := strings.TrimSuffix(strings.Repeat(one+",", app.MaxBatch+1), ",")
	for _, c := range []struct{ body, field, msg string }{
		{`[` + one + `]`, "", "expected a JSON object"},
		{`{}`, "jobs", "at least one"},
		{`{"jobs":[]}`, "jobs", "at least one"},
		{`{"jobs":{"a":1}}`, "jobs", "must be an array"},
		{`{"jobs":[` + many + `]}`, "jobs", "at most 1000"},
	} {
		resp, b := e.postBatch(t, c.body)
		m := requireJSONError(t, resp, b, http.StatusBadRequest)
		if fmt.Sprint(m["field"]) != c.field && !(c.field == "" && m["field"] == nil) || !strings.Contains(fmt.Sprint(m["error"]), c.msg) {
			t.Errorf("body %.60s…: %s, want field %q and %q", c.body, b, c.field, c.msg)
		}
	}
	if n := e.storeTotal(t); n != 0 {
		t.Fatalf("refused batches stored %d jobs", n)
	}

	// An item over the body limit fails on its own.
	big := jobJSON(t, withOptions(jobFor("u", "big", up.url("/big")), map[string]any{"body": strings.Repeat("x", 2048)}))
	resp, b := e.postBatch(t, `{"jobs":[`+big+`,`+one+`]}`)
	var out batchResult
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil || len(out.Results) != 2 ||
		out.Results[0].StatusCode != http.StatusRequestEntityTooLarge || out.Results[1].Outcome != "created" {
		t.Fatalf("batch with an oversized item: %d %s", resp.StatusCode, b)
	}

	// The whole body is limited by MaxBatchBytes.
	h := httpapi.New(e.svc, httpapi.Options{MaxBodyBytes: 1024, MaxBatchBytes: 4096})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	body := `{"jobs":[` + strings.TrimSuffix(strings.Repeat(one+",", 40), ",") + `]}`
	r, err := http.Post(srv.URL+"/jobs/batch", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var tl map[string]any
	_ = json.NewDecoder(r.Body).Decode(&tl)
	if r.StatusCode != http.StatusRequestEntityTooLarge || tl["limit_bytes"] != float64(4096) {
		t.Fatalf("batch of %d bytes over a 4096-byte limit: %d %v", len(body), r.StatusCode, tl)
	}
}

// TestBatchAdmissionRejection checks that admission control refuses a batch
// as a whole, like POST /jobs: 429 with Retry-After, nothing stored.
func TestBatchAdmissionRejection(t *testing.T) {
	t.Parallel()
	var heap atomic.Int64
	e := newEnv(t, envOptions{admission: app.AdmissionConfig{MemoryLimitMB: 64, SampleEvery: time.Nanosecond,
		Memory: func() int64 { return heap.Load() }}})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	heap.Store(100 << 20)
	resp, b := e.postBatch(t, `{"jobs":[`+jobJSON(t, jobFor("u", "a", up.url("/a")))+`,`+jobJSON(t, jobFor("u", "b", up.url("/b")))+`]}`)
	m := requireJSONError(t, resp, b, http.StatusTooManyRequests)
	if resp.Header.Get("Retry-After") == "" || m["limit_reason"] != "memory" {
		t.Fatalf("rejected batch: Retry-After %q, body %s", resp.Header.Get("Retry-After"), b)
	}
	if n := e.storeTotal(t); n != 0 {
		t.Fatalf("a rejected batch stored %d jobs", n)
	}
	for _, key := range []string{"a", "b"} {
		if _, err := e.store.Lookup(context.Background(), "u", key); err == nil {
			t.Fatalf("job %s of a rejected batch was stored", key)
		}
	}
}

// TestBatchCrossOriginRefused checks POST /jobs/batch has POST /jobs's
// cross-origin protection.
func TestBatchCrossOriginRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	resp, b := e.postBatch(t, `{"jobs":[`+jobJSON(t, jobFor("u", "forged", up.url("/f")))+`]}`, "Origin", "https://evil.example")
	requireRefused(t, "cross-origin batch", resp, b)
	if n := e.storeTotal(t); n != 0 {
		t.Fatalf("a forged batch stored %d jobs", n)
	}
	// Like POST /jobs, a batch needs no Content-Type.
	resp, b = e.request(t, http.MethodPost, "/jobs/batch", strings.NewReader(`{"jobs":[`+jobJSON(t, jobFor("u", "plain", up.url("/p")))+`]}`))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("batch without Content-Type: %d %s", resp.StatusCode, b)
	}
}
