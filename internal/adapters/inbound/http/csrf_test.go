package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// A foreign page in the operator's browser must not act on an open-mode
// Aquifer: cross-origin state-changing requests are refused before they do
// anything, and operator POSTs with a body must be JSON, which a form
// cannot send.

// requireRefused checks a 403 {"error":"cross-origin request refused"}.
func requireRefused(t *testing.T, what string, resp *http.Response, b []byte) {
	t.Helper()
	m := requireJSONError(t, resp, b, http.StatusForbidden)
	if m["error"] != "cross-origin request refused" {
		t.Fatalf("%s: error %q, want cross-origin request refused", what, m["error"])
	}
}

func TestCrossOriginWritesAreRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	dest := "http://" + up.hostPort
	e.laneCall(t, http.MethodPost, lanePath(dest)+"/pause", "") // hold the lane so a job stays queued
	queued := e.submit(t, jobFor("u", "stays-queued", up.url("/q")))
	const js = "application/json"

	foreign := [][]string{
		{"Origin", "https://evil.example"},
		{"Origin", "null"}, // a sandboxed frame, a file: page
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site", "Origin", "http://other." + up.hostPort},
	}
	for _, hdr := range foreign {
		what := strings.Join(hdr, ": ")
		cases := []struct {
			method, path, body string
		}{
			{http.MethodPost, lanePath(dest) + "/resume", ""},
			{http.MethodPost, lanePath(dest) + "/pause", `{"reason":"forged"}`},
			{http.MethodDelete, "/jobs/" + queued, ""},
			{http.MethodPost, "/jobs/cancel", `{"filter":{}}`},
			{http.MethodPost, "/jobs/retry", `{"filter":{},"dry_run":true}`},
			{http.MethodPost, "/jobs/" + queued + "/retry", ""},
			{http.MethodPost, "/jobs", `{"user_id":"u","idempotent_key":"forged","url":"` + up.url("/f") + `"}`},
			{http.MethodPost, "/pools/p/members", `{"member_id":"m","address":"` + up.url("/") + `","capacity_rps":1}`},
			{http.MethodDelete, "/pools/p/members/m", ""},
		}
		for _, c := range cases {
			h := append([]string{"Content-Type", js}, hdr...)
			resp, b := e.request(t, c.method, c.path, strings.NewReader(c.body), h...)
			requireRefused(t, what+" "+c.method+" "+c.path, resp, b)
		}
	}

	// Nothing changed: the lane is still paused (with its first reason), the
	// job still queued, no job or pool member was made.
	l := e.laneCall(t, http.MethodGet, lanePath(dest), "")
	if p, _ := l["paused"].(map[string]any); p == nil || p["reason"] != nil && p["reason"] != "" {
		t.Fatalf("after forged requests the lane is %v, want paused without a reason", l["paused"])
	}
	if _, m, raw := e.getJob(t, queued); m["status"] != "queued" {
		t.Fatalf("after forged requests the job is %s, want queued", raw)
	}
	if n := e.storeTotal(t); n != 1 {
		t.Fatalf("store holds %d unfinished jobs, want the 1 queued before", n)
	}
	if resp, b := e.request(t, http.MethodGet, "/pools", nil); resp.StatusCode != http.StatusOK || strings.Contains(string(b), `"m"`) {
		t.Fatalf("GET /pools after a forged registration: %d %s", resp.StatusCode, b)
	}

	// Reads are not refused (a browser does not let the other page read
	// the answer), and neither is the same origin, nor a client that is no
	// browser at all.
	if resp, b := e.request(t, http.MethodGet, "/lanes", nil, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusOK {
		t.Fatalf("cross-origin GET /lanes: %d %s, want 200", resp.StatusCode, b)
	}
	for _, hdr := range [][]string{
		{"Origin", e.srv.URL, "Sec-Fetch-Site", "same-origin"},
		{"Origin", e.srv.URL},
		{"Sec-Fetch-Site", "none"}, // typed into the address bar
		nil,                        // curl, the CLI
	} {
		resp, b := e.request(t, http.MethodPost, "/jobs/retry", strings.NewReader(`{"filter":{},"dry_run":true}`), append([]string{"Content-Type", js}, hdr...)...)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%v POST /jobs/retry: %d %s, want 200", hdr, resp.StatusCode, b)
		}
	}
	resp, b := e.request(t, http.MethodPost, lanePath(dest)+"/resume", nil, "Origin", e.srv.URL)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("same-origin resume: %d %s", resp.StatusCode, b)
	}
	e.waitStatus(t, queued, "completed")
}

func TestOperatorBodiesMustBeJSON(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	dest := "http://" + up.hostPort
	done := e.submit(t, jobFor("u", "done", up.url("/d")))
	e.waitStatus(t, done, "completed")

	// What a form can post: urlencoded, multipart and text/plain (the last
	// can carry a JSON-looking body), or no type at all.
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx", "text/json"} {
		for _, c := range []struct{ path, body string }{
			{lanePath(dest) + "/pause", `{"reason":"form"}`},
			{"/jobs/retry", `{"filter":{}}`},
			{"/jobs/cancel", `{"filter":{}}`},
			{"/jobs/" + done + "/retry", `{}`},
		} {
			var hdr []string
			if ct != "" {
				hdr = []string{"Content-Type", ct}
			}
			resp, b := e.request(t, http.MethodPost, c.path, strings.NewReader(c.body), hdr...)
			m := requireJSONError(t, resp, b, http.StatusUnsupportedMediaType)
			if m["error"] != "Content-Type must be application/json" || resp.Header.Get("Accept-Post") != "application/json" {
				t.Fatalf("POST %s as %q: %v, Accept-Post %q", c.path, ct, m, resp.Header.Get("Accept-Post"))
			}
			if resp.Header.Get("Aquifer-Warning") == "" {
				t.Fatalf("POST %s as %q: the 415 lacks the open-mode warning", c.path, ct)
			}
		}
	}
	l := e.laneCall(t, http.MethodGet, lanePath(dest), "")
	if l["paused"] != nil {
		t.Fatalf("a form post paused the lane: %v", l["paused"])
	}
	if _, m, raw := e.getJob(t, done); m["status"] != "completed" || m["attempts"].(float64) != 1 {
		t.Fatalf("a form post retried the job: %s", raw)
	}

	// JSON, with parameters, is taken; so is a POST without a body, and a
	// chunked one that turns out empty.
	resp, b := e.request(t, http.MethodPost, lanePath(dest)+"/pause", strings.NewReader(`{"reason":"json"}`), "Content-Type", "application/json; charset=utf-8")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pause with JSON: %d %s", resp.StatusCode, b)
	}
	resp, b = e.request(t, http.MethodPost, lanePath(dest)+"/resume", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resume without a body: %d %s", resp.StatusCode, b)
	}
	resp, b = e.request(t, http.MethodPost, lanePath(dest)+"/pause", emptyChunked{})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pause with an empty chunked body: %d %s", resp.StatusCode, b)
	}
	resp, b = e.request(t, http.MethodPost, lanePath(dest)+"/pause", &chunked{body: `{"reason":"chunked"}`})
	requireJSONError(t, resp, b, http.StatusUnsupportedMediaType)
	resp, b = e.request(t, http.MethodPost, "/jobs/"+done+"/retry", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("retry without a body: %d %s", resp.StatusCode, b)
	}
	e.waitStatus(t, done, "queued")

	// POST /jobs keeps taking a body without a Content-Type, as it always
	// has (curl -d sends form-urlencoded).
	resp, b = e.request(t, http.MethodPost, "/jobs", strings.NewReader(`{"user_id":"u","idempotent_key":"curl","url":"`+up.url("/c")+`"}`),
		"Content-Type", "application/x-www-form-urlencoded")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /jobs as curl -d sends it: %d %s", resp.StatusCode, b)
	}
}

// emptyChunked is a body of unknown length that has nothing in it: the
// client sends it chunked.
type emptyChunked struct{}

func (emptyChunked) Read([]byte) (int, error) { return 0, io.EOF }

// chunked is a body of unknown length: the client sends it chunked.
type chunked struct {
	body string
	done bool
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.done {
		return 0, io.EOF
	}
	c.done = true
	return copy(p, c.body), nil
}
