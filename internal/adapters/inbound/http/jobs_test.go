package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	httpapi "github.com/aquiferhq/aquifer/internal/adapters/inbound/http"
	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// ---------------------------------------------------------------------------
// Test environment: a real app.Service on the in-memory store, behind the
// HTTP adapter, served by httptest. Upstreams and webhook receivers are
// httptest servers too; the service's HTTP client refuses to dial anything
// but loopback.
// ---------------------------------------------------------------------------

const waitFor = 5 * time.Second

// countingStore is the memory store with a count of Insert calls (every row a
// submission writes goes through Insert) and an optional Ping failure.
type countingStore struct {
	*memory.Store
	inserts atomic.Int64
	pingErr error // set before use, never changed
}

func (s *countingStore) Insert(ctx context.Context, j *domain.Job) (*domain.Job, bool, error) {
	s.inserts.Add(1)
	return s.Store.Insert(ctx, j)
}

func (s *countingStore) Ping(ctx context.Context) error {
	if s.pingErr != nil {
		return s.pingErr
	}
	return s.Store.Ping(ctx)
}

type envOptions struct {
	maxBody   int64                  // httpapi.Options.MaxBodyBytes and app.Config.MaxBodyBytes
	keepAlive time.Duration          // httpapi.Options.KeepAlive; 0 = the handler's default
	hosts     map[string]domain.Rate // app.RateTable.Hosts
	pingErr   error                  // make the store's Ping fail
	admission app.AdmissionConfig    // app.Config.Admission
	poolToken string                 // httpapi.Options.PoolToken
	l8        *l8.Identity           // app.Config.L8.Identity
	tenants   []app.Tenant           // app.Config.Tenants, authenticated by httpkit.NewAuth(tenants)
	outage    app.OutageConfig       // app.Config.Outage
}

type env struct {
	svc    *app.Service
	store  *countingStore
	h      *httpapi.Handler
	srv    *httptest.Server
	client *http.Client
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	store := &countingStore{Store: memory.New(nil), pingErr: o.pingErr}
	svc, err := app.New(app.Config{
		Store:        store,
		Doer:         loopbackClient(),
		MaxBodyBytes: o.maxBody,
		Retry:        app.RetryPolicy{Attempts: 2, Backoff: []time.Duration{10 * time.Millisecond}},
		Rates:        app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 8}, Hosts: o.hosts},
		Admission:    o.admission,
		L8:           app.L8Config{Identity: o.l8},
		Tenants:      o.tenants,
		Outage:       o.outage,
	})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	h := httpapi.New(svc, httpapi.Options{MaxBodyBytes: o.maxBody, KeepAlive: o.keepAlive, PoolToken: o.poolToken,
		Auth: httpkit.NewAuth(o.tenants)})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.CloseStreams()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			t.Logf("Stop: %v", err)
		}
	})
	return &env{svc: svc, store: store, h: h, srv: srv, client: srv.Client()}
}

// loopbackClient is the service's outbound client: it dials only loopback
// addresses, so a test can never reach the outside world even if validation
// let a bad URL through.
func loopbackClient() *http.Client {
	d := &net.Dialer{Timeout: waitFor}
	return &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return nil, fmt.Errorf("test client refuses to dial non-loopback address %s", addr)
			}
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// request sends one request to the API and returns the response (body read
// and closed) and the body.
func (e *env) request(t *testing.T, method, path string, body io.Reader, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp, b
}

// post submits a job given as a Go value (marshalled) or raw string/bytes.
func (e *env) post(t *testing.T, v any) (*http.Response, []byte) {
	t.Helper()
	var raw []byte
	switch x := v.(type) {
	case string:
		raw = []byte(x)
	case []byte:
		raw = x
	default:
		var err error
		if raw, err = json.Marshal(v); err != nil {
			t.Fatalf("marshal: %v", err)
		}
	}
	return e.request(t, http.MethodPost, "/jobs", bytes.NewReader(raw), "Content-Type", "application/json")
}

// submit posts a job and requires 201; it returns the job id.
func (e *env) submit(t *testing.T, v any) string {
	t.Helper()
	resp, b := e.post(t, v)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /jobs: status %d, want 201; body %s", resp.StatusCode, b)
	}
	id, _ := decodeObject(t, b)["job_id"].(string)
	if !domain.ValidJobID(id) {
		t.Fatalf("POST /jobs: job_id %q is not a job id; body %s", id, b)
	}
	return id
}

// getJob fetches GET /jobs/{id} and returns the status code and the object.
func (e *env) getJob(t *testing.T, id string) (int, map[string]any, []byte) {
	t.Helper()
	resp, b := e.request(t, http.MethodGet, "/jobs/"+id, nil)
	return resp.StatusCode, decodeObject(t, b), b
}

// waitStatus polls GET /jobs/{id} until the job has the status.
func (e *env) waitStatus(t *testing.T, id, status string) (map[string]any, []byte) {
	t.Helper()
	var (
		last map[string]any
		raw  []byte
	)
	eventually(t, "job "+id+" to become "+status, func() bool {
		var code int
		code, last, raw = e.getJob(t, id)
		return code == http.StatusOK && last["status"] == status
	})
	return last, raw
}

// storeTotal is the number of unexpired queued and in-flight rows.
func (e *env) storeTotal(t *testing.T) int64 {
	t.Helper()
	c, err := e.store.Counts(context.Background())
	if err != nil {
		t.Fatalf("Counts: %v", err)
	}
	return c.Total()
}

// eventually polls cond every 5ms until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitFor, what)
		}
		<-tick.C
	}
}

func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v; body %q", err, b)
	}
	return m
}

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func requireKeys(t *testing.T, what string, m map[string]any, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := keysOf(m); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%s: keys %v, want exactly %v", what, got, want)
	}
}

// requireJSONError checks status, Content-Type and the {"error": ...} shape,
// and returns the object.
func requireJSONError(t *testing.T, resp *http.Response, b []byte, status int) map[string]any {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	m := decodeObject(t, b)
	msg, ok := m["error"].(string)
	if !ok || msg == "" {
		t.Fatalf("error body %s has no error message", b)
	}
	return m
}

// ---------------------------------------------------------------------------
// Upstreams and webhook receivers.
// ---------------------------------------------------------------------------

type recorded struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

type response struct {
	status      int
	contentType string
	body        []byte
}

// upstream is a loopback target that records every request. A gated
// upstream holds each request until the test calls releaseOne.
type upstream struct {
	srv      *httptest.Server
	hostPort string
	arrived  chan recorded
	release  chan struct{}

	mu   sync.Mutex
	reqs []recorded
	cur  int // requests being handled, counted until their answer starts
	peak int // the most that were ever handled at once
}

func newUpstream(t *testing.T, gated bool, respond func(r recorded) response) *upstream {
	t.Helper()
	tctx := t.Context() // canceled when the test ends: frees held requests before cleanups run
	u := &upstream{arrived: make(chan recorded, 256)}
	if gated {
		u.release = make(chan struct{})
	}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec := recorded{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
		u.mu.Lock()
		u.reqs = append(u.reqs, rec)
		u.cur++
		u.peak = max(u.peak, u.cur)
		u.mu.Unlock()
		// Leave before answering: Aquifer can start the next request only
		// after it has the answer, so a correct lane never shows overlap.
		leave := sync.OnceFunc(func() {
			u.mu.Lock()
			u.cur--
			u.mu.Unlock()
		})
		defer leave()
		select {
		case u.arrived <- rec:
		default:
		}
		if u.release != nil {
			select {
			case <-u.release:
			case <-r.Context().Done():
				return
			case <-tctx.Done():
				return
			}
		}
		leave()
		res := respond(rec)
		if res.contentType != "" {
			w.Header().Set("Content-Type", res.contentType)
		}
		w.WriteHeader(res.status)
		_, _ = w.Write(res.body)
	}))
	t.Cleanup(u.srv.Close)
	pu, err := url.Parse(u.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.hostPort = pu.Host
	return u
}

func (u *upstream) url(path string) string { return u.srv.URL + path }

// requirePeak checks that the upstream never handled more than max requests
// at once.
func (u *upstream) requirePeak(t *testing.T, max int) {
	t.Helper()
	u.mu.Lock()
	peak := u.peak
	u.mu.Unlock()
	if peak > max {
		t.Fatalf("upstream handled %d requests at once, want at most %d (max_concurrent ignored)", peak, max)
	}
}

func (u *upstream) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.reqs...)
}

// waitArrival returns the next request that reached the upstream.
func (u *upstream) waitArrival(t *testing.T) recorded {
	t.Helper()
	select {
	case r := <-u.arrived:
		return r
	case <-time.After(waitFor):
		t.Fatalf("no request reached the upstream within %v", waitFor)
		return recorded{}
	}
}

// requireNoArrival checks that no request reaches the upstream for d. It
// proves an absence (a job stays queued behind a running one), which only a
// time window can; correct code passes it however slow the machine is.
func (u *upstream) requireNoArrival(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case r := <-u.arrived:
		t.Fatalf("%s %s reached the upstream, want it held back (max_concurrent ignored?)", r.Method, r.Path)
	case <-time.After(d):
	}
}

// releaseOne lets one held request answer.
func (u *upstream) releaseOne(t *testing.T) {
	t.Helper()
	select {
	case u.release <- struct{}{}:
	case <-time.After(waitFor):
		t.Fatalf("no held request to release within %v", waitFor)
	}
}

func fixed(status int, contentType, body string) func(recorded) response {
	return func(recorded) response { return response{status, contentType, []byte(body)} }
}

func jobFor(user, key, target string) map[string]any {
	return map[string]any{"user_id": user, "idempotent_key": key, "url": target, "method": "POST", "body": "payload"}
}

// ---------------------------------------------------------------------------
// POST /jobs
// ---------------------------------------------------------------------------

func TestPostJobCreatedShape(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))

	resp, b := e.post(t, jobFor("u1", "k1", up.url("/x")))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d, want 201; body %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	m := decodeObject(t, b)
	requireKeys(t, "201 body", m, "job_id", "status")
	if m["status"] != "queued" {
		t.Fatalf("status %v, want queued", m["status"])
	}
	if id, _ := m["job_id"].(string); !domain.ValidJobID(id) {
		t.Fatalf("job_id %v is not a 32-hex job id", m["job_id"])
	}
	if n := e.store.inserts.Load(); n != 1 {
		t.Fatalf("store inserts = %d, want 1", n)
	}
}

func TestPostJobDuplicates(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "done"))

	id := e.submit(t, jobFor("alice", "order-1", up.url("/a")))
	e.waitStatus(t, id, "completed")

	// Same (user_id, idempotent_key): 200, same id, duplicate, real status.
	// The rest of the request may differ; only the key counts.
	dup := jobFor("alice", "order-1", up.url("/other"))
	dup["method"] = "PUT"
	resp, b := e.post(t, dup)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("duplicate: status %d, want 200; body %s", resp.StatusCode, b)
	}
	m := decodeObject(t, b)
	requireKeys(t, "duplicate body", m, "duplicate", "job_id", "status")
	if m["job_id"] != id || m["duplicate"] != true || m["status"] != "completed" {
		t.Fatalf("duplicate body %s, want job_id %s, duplicate true, status completed", b, id)
	}

	// Another user with the same key is a different job.
	other := e.submit(t, jobFor("bob", "order-1", up.url("/a")))
	if other == id {
		t.Fatalf("bob's job reused alice's id %s", id)
	}
	e.waitStatus(t, other, "completed")
	if n := len(up.requests()); n != 2 {
		t.Fatalf("upstream got %d requests, want 2 (the duplicate must not dispatch)", n)
	}
}

// The duplicate answer reports the job's status as GET /jobs/{id} would show
// it at that moment: queued while waiting, in_flight while running.
func TestPostJobDuplicateReportsLiveStatus(t *testing.T) {
	up := newUpstream(t, true, fixed(200, "text/plain", "ok"))
	e := newEnv(t, envOptions{hosts: map[string]domain.Rate{up.hostPort: {RPS: 1000, MaxConcurrent: 1}}})

	running := e.submit(t, jobFor("u", "running", up.url("/running")))
	up.waitArrival(t)
	waiting := e.submit(t, jobFor("u", "waiting", up.url("/waiting")))
	up.requireNoArrival(t, 50*time.Millisecond)

	for _, c := range []struct{ key, id, status string }{
		{"running", running, "in_flight"},
		{"waiting", waiting, "queued"},
	} {
		if _, m, b := e.getJob(t, c.id); m["status"] != c.status {
			t.Fatalf("GET %s: status %v, want %s; body %s", c.key, m["status"], c.status, b)
		}
		resp, b := e.post(t, jobFor("u", c.key, up.url("/"+c.key)))
		m := decodeObject(t, b)
		if resp.StatusCode != http.StatusOK || m["job_id"] != c.id || m["duplicate"] != true || m["status"] != c.status {
			t.Fatalf("duplicate of %s job: status %d body %s, want 200 job_id %s duplicate true status %s",
				c.key, resp.StatusCode, b, c.id, c.status)
		}
	}
	up.releaseOne(t)
	up.releaseOne(t)
	e.waitStatus(t, running, "completed")
	e.waitStatus(t, waiting, "completed")
	up.requirePeak(t, 1)
}

func TestPostJobMalformed(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	target := up.url("/x")

	valid := func(edit func(m map[string]any)) string {
		m := map[string]any{"user_id": "u", "idempotent_key": "k", "url": target, "method": "POST",
			"headers": map[string]any{"Accept": "text/plain"}, "body": "b"}
		edit(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	validJSON := valid(func(map[string]any) {})
	header := func(name, value string) string {
		return valid(func(m map[string]any) { m["headers"] = map[string]any{name: value} })
	}

	cases := []struct {
		name  string
		body  string
		field string   // expected "field" key; "" = none expected
		want  []string // substrings of the error message
	}{
		{"empty body", "", "", []string{"invalid json", "empty"}},
		{"whitespace only", " \n\t ", "", []string{"invalid json", "empty"}},
		{"not json", "hello there", "", []string{"invalid json"}},
		{"form encoded", "user_id=u&idempotent_key=k", "", []string{"invalid json"}},
		{"json array", "[" + validJSON + "]", "", []string{"invalid json", "object"}},
		{"json null", "null", "", []string{"invalid json", "object"}},
		{"json string", `"user_id"`, "", []string{"invalid json", "object"}},
		{"truncated object", `{"user_id":"u","idempotent_key":`, "", []string{"invalid json"}},
		{"trailing garbage", validJSON + " xyz", "", []string{"invalid json", "after the JSON object"}},
		{"trailing object", validJSON + validJSON, "", []string{"invalid json", "after the JSON object"}},
		{"trailing brace", validJSON + "}", "", []string{"invalid json", "after the JSON object"}},
		{"trailing bracket", validJSON + " ]", "", []string{"invalid json", "after the JSON object"}},
		{"user_id number", `{"user_id":42,"idempotent_key":"k","url":"` + target + `"}`, "user_id", []string{"invalid json: user_id must be a string, not a number"}},
		{"headers array", `{"user_id":"u","idempotent_key":"k","url":"` + target + `","headers":["Accept: x"]}`, "headers", []string{"invalid json: headers must be an object, not an array"}},
		{"headers empty array", `{"user_id":"u","idempotent_key":"k","url":"` + target + `","headers":[]}`, "headers", []string{"invalid json: headers must be an object, not an array"}},
		{"headers non-string value", `{"user_id":"u","idempotent_key":"k","url":"` + target + `","headers":{"X-Count":3}}`, "headers", []string{"invalid json: every value of headers must be a string, not a number"}},
		{"headers null value", `{"user_id":"u","idempotent_key":"k","url":"` + target + `","headers":{"X-A":{"b":1}}}`, "headers", []string{"invalid json: every value of headers must be a string, not an object"}},
		{"body object", `{"user_id":"u","idempotent_key":"k","url":"` + target + `","body":{"a":1}}`, "body", []string{"invalid json: body must be a string, not an object"}},
		{"method number", `{"user_id":"u","idempotent_key":"k","url":"` + target + `","method":1}`, "method", []string{"invalid json: method must be a string, not a number"}},
		{"webhook_url boolean", `{"user_id":"u","idempotent_key":"k","url":"` + target + `","webhook_url":true}`, "webhook_url", []string{"invalid json: webhook_url must be a string, not a boolean"}},
		{"missing user_id", valid(func(m map[string]any) { delete(m, "user_id") }), "user_id", []string{"user_id is required"}},
		{"blank user_id", valid(func(m map[string]any) { m["user_id"] = "   " }), "user_id", []string{"user_id is required"}},
		{"missing idempotent_key", valid(func(m map[string]any) { delete(m, "idempotent_key") }), "idempotent_key", []string{"idempotent_key is required"}},
		{"neither url nor pool_id", valid(func(m map[string]any) { delete(m, "url") }), "url", []string{"url", "pool_id", "required"}},
		{"both url and pool_id", valid(func(m map[string]any) { m["pool_id"] = "readers" }), "url", []string{"url", "pool_id", "mutually exclusive"}},
		{"ftp url", valid(func(m map[string]any) { m["url"] = "ftp://127.0.0.1/file" }), "url", []string{"url", "http"}},
		{"relative url", valid(func(m map[string]any) { m["url"] = "/jobs/x" }), "url", []string{"url", "http"}},
		{"scheme-less url", valid(func(m map[string]any) { m["url"] = "127.0.0.1:8080/x" }), "url", []string{"url"}},
		{"javascript url", valid(func(m map[string]any) { m["url"] = "javascript:alert(1)" }), "url", []string{"url", "http"}},
		{"url without host", valid(func(m map[string]any) { m["url"] = "http:///x" }), "url", []string{"url", "host"}},
		{"decimal metadata url", valid(func(m map[string]any) { m["url"] = "http://2852039166/latest/meta-data/" }), "url", []string{"url: destination 169.254.169.254 is denied: link-local / cloud metadata address"}},
		{"hex metadata webhook", valid(func(m map[string]any) { m["webhook_url"] = "http://0xa9fea9fe/" }), "webhook_url", []string{"webhook_url: destination 169.254.169.254 is denied"}},
		{"url host 0", valid(func(m map[string]any) { m["url"] = "http://0:8080/" }), "url", []string{"url: destination 0.0.0.0 is denied: unspecified address"}},
		{"url host not an IPv4 number", valid(func(m map[string]any) { m["url"] = "http://1.2.3.4.5/" }), "url", []string{"url: host 1.2.3.4.5 is not a valid IPv4 address"}},
		{"url with credentials", valid(func(m map[string]any) { m["url"] = "http://admin:hunter2@127.0.0.1:1/x" }), "url", []string{"url", "credentials"}},
		{"method with space", valid(func(m map[string]any) { m["method"] = "GE T" }), "method", []string{"method", "GE T", "not a valid"}},
		{"method with tab", valid(func(m map[string]any) { m["method"] = "G\tET" }), "method", []string{"method", "not a valid"}},
		{"method CONNECT", valid(func(m map[string]any) { m["method"] = "connect" }), "method", []string{"CONNECT"}},
		{"header name with space", header("X Bad", "v"), "headers", []string{"header name", "X Bad", "not a valid"}},
		{"header name with control char", header("X-Bad\x01", "v"), "headers", []string{"header name", "not a valid"}},
		{"header name with CRLF", header("X-Bad\r\nX-Evil", "v"), "headers", []string{"header name", "not a valid"}},
		{"header name with colon", header("X-Bad:", "v"), "headers", []string{"header name", "not a valid"}},
		{"header value with CRLF", header("X-Note", "a\r\nX-Injected: yes"), "headers", []string{"X-Note", "control characters"}},
		{"header value with LF", header("X-Note", "a\nb"), "headers", []string{"X-Note", "control characters"}},
		{"hop-by-hop Content-Length", header("Content-Length", "10"), "headers", []string{"Content-Length", "may not be set"}},
		{"hop-by-hop Connection", header("connection", "close"), "headers", []string{"Connection", "may not be set"}},
		{"hop-by-hop Transfer-Encoding", header("Transfer-Encoding", "chunked"), "headers", []string{"Transfer-Encoding", "may not be set"}},
		{"bad webhook_url", valid(func(m map[string]any) { m["webhook_url"] = "ftp://127.0.0.1/hook" }), "webhook_url", []string{"webhook_url", "http"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.store.inserts.Load()
			resp, b := e.post(t, c.body)
			if resp.StatusCode < 400 || resp.StatusCode > 499 {
				t.Fatalf("status %d, want 4xx; body %s", resp.StatusCode, b)
			}
			m := requireJSONError(t, resp, b, http.StatusBadRequest)
			msg := m["error"].(string)
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			if got, _ := m["field"].(string); got != c.field {
				t.Errorf("field %q, want %q (body %s)", got, c.field, b)
			}
			if strings.Contains(string(b), "hunter2") {
				t.Errorf("error response echoes the URL password: %s", b)
			}
			if n := e.store.inserts.Load() - before; n != 0 {
				t.Fatalf("a rejected request reached the store (%d inserts)", n)
			}
		})
	}
	if n := e.store.inserts.Load(); n != 0 {
		t.Fatalf("malformed requests reached the store %d times", n)
	}
	if n := e.storeTotal(t); n != 0 {
		t.Fatalf("store holds %d jobs after only malformed requests", n)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("upstream got %d requests from malformed submissions", n)
	}
	// The same environment still accepts a good request.
	e.waitStatus(t, e.submit(t, validJSON), "completed")
}

// paddedJob returns a valid job request whose encoding is exactly size bytes.
func paddedJob(t *testing.T, target string, size int) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"user_id": "u", "idempotent_key": fmt.Sprintf("k%d", size), "url": target, "body": ""})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > size {
		t.Fatalf("minimal request is %d bytes, more than %d", len(b), size)
	}
	return append(b, bytes.Repeat([]byte(" "), size-len(b))...)
}

func requireTooLarge(t *testing.T, status int, ct string, b []byte, limit int64) {
	t.Helper()
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413; body %s", status, b)
	}
	if ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	m := decodeObject(t, b)
	requireKeys(t, "413 body", m, "error", "limit_bytes")
	if m["error"] != "request body too large" || m["limit_bytes"] != float64(limit) {
		t.Fatalf("413 body %s, want error \"request body too large\" and limit_bytes %d", b, limit)
	}
}

func TestPostJobBodyTooLarge(t *testing.T) {
	const limit = 512
	e := newEnv(t, envOptions{maxBody: limit})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))

	t.Run("with Content-Length", func(t *testing.T) {
		body := jobFor("u", "big", up.url("/x"))
		body["body"] = strings.Repeat("a", 4*limit)
		resp, b := e.post(t, body)
		requireTooLarge(t, resp.StatusCode, resp.Header.Get("Content-Type"), b, limit)
	})

	t.Run("chunked without Content-Length", func(t *testing.T) {
		raw := paddedJob(t, up.url("/x"), 4*limit)
		conn, err := net.DialTimeout("tcp", e.srv.Listener.Addr().String(), waitFor)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(waitFor))
		var req bytes.Buffer
		req.WriteString("POST /jobs HTTP/1.1\r\nHost: aquifer.test\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
		for chunk := range chunks(raw, 100) {
			fmt.Fprintf(&req, "%x\r\n%s\r\n", len(chunk), chunk)
		}
		req.WriteString("0\r\n\r\n")
		if _, err := conn.Write(req.Bytes()); err != nil {
			t.Fatalf("write: %v", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read body: %v", err)
		}
		requireTooLarge(t, resp.StatusCode, resp.Header.Get("Content-Type"), b, limit)
	})

	if n := e.store.inserts.Load(); n != 0 {
		t.Fatalf("oversized requests wrote %d rows", n)
	}

	t.Run("exactly at the limit is accepted", func(t *testing.T) {
		raw := paddedJob(t, up.url("/x"), limit)
		resp, b := e.post(t, raw)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("body of exactly %d bytes: status %d, want 201; body %s", limit, resp.StatusCode, b)
		}
		// One byte more is rejected, by Content-Length and when chunked.
		raw = paddedJob(t, up.url("/x"), limit+1)
		resp, b = e.post(t, raw)
		requireTooLarge(t, resp.StatusCode, resp.Header.Get("Content-Type"), b, limit)
		resp, b = e.request(t, http.MethodPost, "/jobs", io.MultiReader(bytes.NewReader(raw)), "Content-Type", "application/json")
		requireTooLarge(t, resp.StatusCode, resp.Header.Get("Content-Type"), b, limit)
	})
	if n := e.store.inserts.Load(); n != 1 {
		t.Fatalf("store inserts = %d, want 1 (only the request at the limit)", n)
	}
}

// chunks yields b in pieces of at most n bytes.
func chunks(b []byte, n int) func(func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for len(b) > 0 {
			k := min(n, len(b))
			if !yield(b[:k]) {
				return
			}
			b = b[k:]
		}
	}
}

func TestPostJobNoBodyLimit(t *testing.T) {
	e := newEnv(t, envOptions{maxBody: 0})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))

	big := jobFor("u", "big", up.url("/x"))
	big["body"] = strings.Repeat("z", 3<<20/2) // 1.5 MiB, above any usual default
	id := e.submit(t, big)
	e.waitStatus(t, id, "completed")
	reqs := up.requests()
	if len(reqs) != 1 || len(reqs[0].Body) != 3<<20/2 {
		t.Fatalf("upstream got %d requests (body %d bytes), want one with the 1.5 MiB body", len(reqs), len(reqs[0].Body))
	}
}

// ---------------------------------------------------------------------------
// GET /jobs/{id}
// ---------------------------------------------------------------------------

func TestGetJobNotFound(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, path := range []string{
		"/jobs/0123456789abcdef0123456789abcdef", // well formed, unknown
		"/jobs/0123456789ABCDEF0123456789ABCDEF", // upper case
		"/jobs/0123456789abcdef",                 // short
		"/jobs/not-a-job-id",
		"/jobs/0123456789abcdef0123456789abcdeg",
		"/jobs/%20",
	} {
		resp, b := e.request(t, http.MethodGet, path, nil)
		m := requireJSONError(t, resp, b, http.StatusNotFound)
		if m["error"] != "job not found" {
			t.Errorf("GET %s: error %q, want \"job not found\"", path, m["error"])
		}
	}
}

func TestGetCompletedJob(t *testing.T) {
	e := newEnv(t, envOptions{})
	const upstreamBody = `{"thing":1,"note":"<ok> & done"}`
	up := newUpstream(t, false, fixed(201, "application/json; charset=utf-8", upstreamBody))

	secrets := map[string]string{
		"Authorization":   "Bearer sekrit-authz-1",
		"X-Api-Key":       "sekrit-apikey-2",
		"x-refresh-token": "sekrit-token-3",
		"X-Client-Secret": "sekrit-secret-4",
		"X-Custom-Key":    "sekrit-key-5",
		"Cookie":          "sid=sekrit-cookie-6",
	}
	headers := map[string]any{"Accept": "application/json", "X-Trace": "trace-7"}
	for k, v := range secrets {
		headers[k] = v
	}
	const requestBody = "REQUEST-BODY-MARKER-91f3"
	before := time.Now().UnixMilli()
	id := e.submit(t, map[string]any{
		"user_id": "acct-7", "idempotent_key": "get-1", "url": up.url("/v1/things"), "method": "post",
		"headers": headers, "body": requestBody,
	})
	after := time.Now().UnixMilli()
	m, raw := e.waitStatus(t, id, "completed")

	for _, k := range []string{"job_id", "status", "url", "method", "created_at", "updated_at", "attempts",
		"response_status", "body", "content_type", "headers", "user_id"} {
		if _, ok := m[k]; !ok {
			t.Errorf("GET body lacks %q: %s", k, raw)
		}
	}
	if m["job_id"] != id || m["url"] != up.url("/v1/things") || m["method"] != "POST" || m["user_id"] != "acct-7" {
		t.Errorf("identity fields wrong: %s", raw)
	}
	created, _ := m["created_at"].(float64)
	if int64(created) < before || int64(created) > after {
		t.Errorf("created_at %v is not the submission time in ms (between %d and %d)", m["created_at"], before, after)
	}
	if updated, _ := m["updated_at"].(float64); updated < created {
		t.Errorf("updated_at %v before created_at %v", m["updated_at"], m["created_at"])
	}
	if m["attempts"] != float64(1) || m["response_status"] != float64(201) {
		t.Errorf("attempts %v response_status %v, want 1 and 201", m["attempts"], m["response_status"])
	}
	if m["body"] != upstreamBody || m["content_type"] != "application/json; charset=utf-8" {
		t.Errorf("body %q content_type %q, want the upstream's", m["body"], m["content_type"])
	}
	if _, ok := m["body_encoding"]; ok {
		t.Errorf("UTF-8 body has body_encoding: %s", raw)
	}
	if !strings.Contains(string(raw), "<ok> & done") {
		t.Errorf("body is HTML-escaped: %s", raw)
	}

	// Secrets are redacted, the rest shown; nothing secret anywhere in clear.
	shown, _ := m["headers"].(map[string]any)
	for k := range secrets {
		if shown[k] != domain.Redacted {
			t.Errorf("header %s shown as %v, want %q", k, shown[k], domain.Redacted)
		}
	}
	if shown["Accept"] != "application/json" || shown["X-Trace"] != "trace-7" {
		t.Errorf("ordinary headers not shown as sent: %v", shown)
	}
	if strings.Contains(string(raw), "sekrit") {
		t.Errorf("a secret header value appears in the response: %s", raw)
	}
	if strings.Contains(string(raw), requestBody) {
		t.Errorf("the request body is echoed: %s", raw)
	}

	// The upstream got the real values and the body.
	reqs := up.requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream got %d requests, want 1", len(reqs))
	}
	if got := reqs[0].Header.Get("Authorization"); got != secrets["Authorization"] {
		t.Errorf("upstream Authorization %q, want %q", got, secrets["Authorization"])
	}
	if string(reqs[0].Body) != requestBody || reqs[0].Method != "POST" {
		t.Errorf("upstream got %s %q", reqs[0].Method, reqs[0].Body)
	}

	// HEAD answers like GET, without a body.
	resp, b := e.request(t, http.MethodHead, "/jobs/"+id, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || len(b) != 0 {
		t.Errorf("HEAD: status %d, Content-Type %q, %d body bytes; want 200, application/json, none",
			resp.StatusCode, resp.Header.Get("Content-Type"), len(b))
	}
	resp, b = e.request(t, http.MethodHead, "/jobs/0123456789abcdef0123456789abcdef", nil)
	if resp.StatusCode != http.StatusNotFound || len(b) != 0 {
		t.Errorf("HEAD unknown job: status %d, %d body bytes; want 404, none", resp.StatusCode, len(b))
	}
}

func TestGetJobBinaryBody(t *testing.T) {
	e := newEnv(t, envOptions{})
	binary := []byte{0xff, 0xfe, 0x00, 0x80, 'a', 0xc3}
	up := newUpstream(t, false, func(recorded) response { return response{200, "application/octet-stream", binary} })

	id := e.submit(t, jobFor("u", "bin", up.url("/bin")))
	m, raw := e.waitStatus(t, id, "completed")
	if m["body_encoding"] != "base64" || m["body"] != base64.StdEncoding.EncodeToString(binary) {
		t.Fatalf("non-UTF-8 body: got body %v encoding %v, want base64 %q; %s",
			m["body"], m["body_encoding"], base64.StdEncoding.EncodeToString(binary), raw)
	}
	if m["content_type"] != "application/octet-stream" {
		t.Fatalf("content_type %v", m["content_type"])
	}
}

func TestGetFailedJob(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(503, "text/plain", "try later"))

	id := e.submit(t, jobFor("u", "fail", up.url("/f")))
	m, raw := e.waitStatus(t, id, "failed")
	if m["attempts"] != float64(2) || m["response_status"] != float64(503) || m["body"] != "try later" {
		t.Fatalf("failed job: %s, want attempts 2, response_status 503, body \"try later\"", raw)
	}
	if r, _ := m["reason"].(string); !strings.Contains(r, "503") {
		t.Fatalf("reason %q does not say what happened", r)
	}
	if n := len(up.requests()); n != 2 {
		t.Fatalf("upstream got %d attempts, want 2", n)
	}
}

// TestGetJobRedactsSecretURLParameters: url and webhook_url are shown with
// secret query values redacted (the rest of the URL as sent); the reason of a
// transport error names the address, not the URL.
func TestGetJobRedactsSecretURLParameters(t *testing.T) {
	e := newEnv(t, envOptions{})
	hook := newUpstream(t, false, fixed(204, "", ""))
	j := jobFor("u", "q", "http://127.0.0.1:1/p?access_token=s3cr3t-a&x=1&Signature=s3cr3t-b")
	j["webhook_url"] = hook.url("/h?sig=s3cr3t-c&y=%20")
	id := e.submit(t, j)
	m, raw := e.waitStatus(t, id, "failed")
	if strings.Contains(string(raw), "s3cr3t") {
		t.Fatalf("GET shows a secret: %s", raw)
	}
	if want := "http://127.0.0.1:1/p?access_token=[redacted]&x=1&Signature=[redacted]"; m["url"] != want {
		t.Errorf("url %q, want %q", m["url"], want)
	}
	if want := hook.url("/h?sig=[redacted]&y=%20"); m["webhook_url"] != want {
		t.Errorf("webhook_url %q, want %q", m["webhook_url"], want)
	}
	if want := "dial tcp 127.0.0.1:1: connect: connection refused"; m["reason"] != want {
		t.Errorf("reason %q, want %q", m["reason"], want)
	}
}

// ---------------------------------------------------------------------------
// Routing
// ---------------------------------------------------------------------------

func TestUnknownRouteAndWrongMethod(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.h.Router().Get("/mounted-later", func(http.ResponseWriter, *http.Request) {})
	for _, c := range []struct {
		method, path string
		status       int
		allow        string // the 405's Allow header
	}{
		{http.MethodGet, "/", http.StatusNotFound, ""},
		{http.MethodGet, "/nope", http.StatusNotFound, ""},
		{http.MethodPost, "/job", http.StatusNotFound, ""},
		{http.MethodGet, "/jobs/0123456789abcdef0123456789abcdef/stream/more", http.StatusNotFound, ""},
		{http.MethodDelete, "/jobs", http.StatusMethodNotAllowed, "GET, POST"},
		{http.MethodPut, "/jobs", http.StatusMethodNotAllowed, "GET, POST"},
		{http.MethodGet, "/jobs/0123456789abcdef0123456789abcdef/retry", http.StatusMethodNotAllowed, "POST"},
		{http.MethodPut, "/jobs/retry", http.StatusMethodNotAllowed, "GET, HEAD, POST, DELETE"}, // and /jobs/{id}'s
		{http.MethodPost, "/operations", http.StatusMethodNotAllowed, "GET"},
		{http.MethodDelete, "/lanes/pool:p", http.StatusMethodNotAllowed, "GET"},
		{http.MethodGet, "/lanes/pool:p/pause", http.StatusMethodNotAllowed, "POST"},
		{http.MethodPut, "/jobs/abc", http.StatusMethodNotAllowed, "GET, HEAD, DELETE"},
		{http.MethodPut, "/jobs/0123456789abcdef0123456789abcdef", http.StatusMethodNotAllowed, "GET, HEAD, DELETE"},
		{http.MethodPost, "/jobs/0123456789abcdef0123456789abcdef", http.StatusMethodNotAllowed, "GET, HEAD, DELETE"},
		{http.MethodPost, "/jobs/0123456789abcdef0123456789abcdef/stream", http.StatusMethodNotAllowed, "GET"},
		{http.MethodPost, "/health", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodGet, "/pools/p/members", http.StatusMethodNotAllowed, "POST"},
		{http.MethodPut, "/pools/p/members/m", http.StatusMethodNotAllowed, "DELETE"},
		{http.MethodPost, "/l8/challenge/", http.StatusNotFound, ""},
		{http.MethodGet, "/l8/challenge", http.StatusMethodNotAllowed, "POST"},
		{http.MethodPost, "/mounted-later", http.StatusMethodNotAllowed, "GET"},
	} {
		resp, b := e.request(t, c.method, c.path, strings.NewReader("{}"))
		m := requireJSONError(t, resp, b, c.status)
		want := "not found"
		if c.status == http.StatusMethodNotAllowed {
			want = "method not allowed"
		}
		if m["error"] != want {
			t.Errorf("%s %s: error %q, want %q", c.method, c.path, m["error"], want)
		}
		if got := resp.Header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
	if n := e.store.inserts.Load(); n != 0 {
		t.Fatalf("routing errors wrote %d rows", n)
	}
}

// ---------------------------------------------------------------------------
// Webhooks
// ---------------------------------------------------------------------------

func TestWebhookDeliveredOncePerJob(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, func(r recorded) response {
		if r.Path == "/fail" {
			return response{500, "text/plain", []byte("exploded")}
		}
		return response{200, "text/plain", []byte("result of " + r.Path)}
	})
	hook := newUpstream(t, false, fixed(204, "", ""))

	jobs := map[string]string{} // job id -> path
	for _, p := range []string{"/a", "/b", "/c", "/fail"} {
		j := jobFor("u", "hook"+p, up.url(p))
		j["webhook_url"] = hook.url("/hook")
		jobs[e.submit(t, j)] = p
	}
	for id, p := range jobs {
		want := "completed"
		if p == "/fail" {
			want = "failed"
		}
		e.waitStatus(t, id, want)
		// A duplicate of a finished job must not trigger another delivery.
		j := jobFor("u", "hook"+p, up.url(p))
		j["webhook_url"] = hook.url("/hook")
		if resp, b := e.post(t, j); resp.StatusCode != http.StatusOK {
			t.Fatalf("duplicate: status %d body %s", resp.StatusCode, b)
		}
	}
	// Every webhook job is finished once nothing is queued or in flight:
	// forward jobs and their webhook jobs are committed together.
	eventually(t, "all webhook deliveries", func() bool {
		return len(hook.requests()) >= len(jobs) && e.storeTotal(t) == 0
	})

	got := map[string]int{}
	for _, r := range hook.requests() {
		if r.Method != http.MethodPost || r.Path != "/hook" {
			t.Errorf("webhook request %s %s, want POST /hook", r.Method, r.Path)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("webhook Content-Type %q, want application/json", ct)
		}
		var p map[string]any
		if err := json.Unmarshal(r.Body, &p); err != nil {
			t.Fatalf("webhook body %q is not JSON: %v", r.Body, err)
		}
		id, _ := p["job_id"].(string)
		got[id]++
		path, ok := jobs[id]
		if !ok {
			t.Fatalf("webhook for unknown job %q: %s", id, r.Body)
		}
		if path == "/fail" {
			requireKeys(t, "failed webhook payload", p, "body", "job_id", "reason", "response_status", "status")
			if p["status"] != "failed" || p["response_status"] != float64(500) || p["body"] != "exploded" ||
				!strings.Contains(p["reason"].(string), "500") {
				t.Errorf("failed webhook payload %s", r.Body)
			}
			continue
		}
		requireKeys(t, "completed webhook payload", p, "body", "job_id", "response_status", "status")
		if p["status"] != "completed" || p["response_status"] != float64(200) || p["body"] != "result of "+path {
			t.Errorf("completed webhook payload %s", r.Body)
		}
	}
	for id := range jobs {
		if got[id] != 1 {
			t.Errorf("job %s (%s): %d webhook deliveries, want exactly 1", id, jobs[id], got[id])
		}
	}
	if len(hook.requests()) != len(jobs) {
		t.Errorf("receiver got %d requests, want %d", len(hook.requests()), len(jobs))
	}
}

// TestGetJobReportsWebhookDelivery checks the "webhook" object: pending while
// the receiver fails, then failed with the receiver's last answer once the
// retries are spent; absent for a job without webhook_url.
func TestGetJobReportsWebhookDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	target := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	hook := newUpstream(t, false, fixed(503, "text/plain", "receiver down"))
	job := jobFor("u", "wh", target.url("/x"))
	job["webhook_url"] = hook.url("/hook")
	id := e.submit(t, job)
	var got map[string]any
	eventually(t, "webhook delivery to fail", func() bool {
		_, got, _ = e.getJob(t, id)
		w, _ := got["webhook"].(map[string]any)
		return w != nil && w["status"] == "failed"
	})
	w := got["webhook"].(map[string]any)
	if got["status"] != "completed" || w["attempts"] != float64(2) || w["response_status"] != float64(503) ||
		!strings.Contains(w["reason"].(string), "503") {
		t.Fatalf("job with a failed webhook = %v", got)
	}
	plain := e.submit(t, jobFor("u", "nohook", target.url("/y")))
	got, _ = e.waitStatus(t, plain, "completed")
	if _, ok := got["webhook"]; ok {
		t.Fatalf("job without webhook_url reports a webhook: %v", got)
	}
}

// TestPostJobAdmissionRejection checks the 429 of admission control: the
// JSON body naming the limit, a Retry-After that doubles per consecutive
// rejection, nothing stored — and a duplicate of an accepted job still
// answered 200.
func TestPostJobAdmissionRejection(t *testing.T) {
	t.Parallel()
	var heap atomic.Int64
	e := newEnv(t, envOptions{admission: app.AdmissionConfig{MemoryLimitMB: 64, SampleEvery: time.Nanosecond,
		Memory: func() int64 { return heap.Load() }}})
	target := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	accepted := e.submit(t, jobFor("u", "before", target.url("/a")))
	heap.Store(100 << 20)
	before := e.store.inserts.Load()
	for i, want := range []string{"5", "10", "20"} {
		resp, b := e.post(t, jobFor("u", fmt.Sprint("shed", i), target.url("/b")))
		m := requireJSONError(t, resp, b, http.StatusTooManyRequests)
		if resp.Header.Get("Retry-After") != want {
			t.Fatalf("rejection %d: Retry-After %q, want %s", i+1, resp.Header.Get("Retry-After"), want)
		}
		requireKeys(t, "429 body", m, "error", "limit_reason", "limit", "current")
		if m["limit_reason"] != "memory" || m["limit"] != float64(64) || m["current"] != float64(100) ||
			m["error"] != "admission rejected: memory at 100 exceeds limit 64" {
			t.Fatalf("429 body = %s", b)
		}
	}
	if after := e.store.inserts.Load(); after != before {
		t.Fatalf("rejected submissions wrote %d rows", after-before)
	}
	resp, b := e.post(t, jobFor("u", "before", target.url("/a")))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), accepted) {
		t.Fatalf("duplicate under pressure: %d %s", resp.StatusCode, b)
	}
	_, health := e.request(t, http.MethodGet, "/health", nil)
	adm := decodeObject(t, health)["admission"].(map[string]any)
	requireKeys(t, "admission health", adm, "enabled", "memory_mb", "memory_limit_mb", "max_body_bytes", "db_bytes",
		"db_max_bytes", "retry_after_seconds", "rejecting", "limit_reason", "rejected_total")
	if adm["rejecting"] != true || adm["memory_mb"] != float64(100) || adm["retry_after_seconds"] != float64(20) {
		t.Fatalf("admission health = %v", adm)
	}
	heap.Store(1 << 20) // pressure gone: admitted again, streak reset
	e.submit(t, jobFor("u", "after", target.url("/c")))
	heap.Store(100 << 20)
	resp, _ = e.post(t, jobFor("u", "shed-again", target.url("/d")))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "5" {
		t.Fatalf("after an admitted job: %d Retry-After %q, want 429 with 5", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestPostJobLoadHeaders checks the autoscaling headers on POST /jobs answers.
func TestPostJobLoadHeaders(t *testing.T) {
	t.Parallel()
	target := newUpstream(t, true, fixed(200, "text/plain", "ok")) // gated: jobs stay put
	e := newEnv(t, envOptions{hosts: map[string]domain.Rate{target.hostPort: {RPS: 12.5, MaxConcurrent: 1}}})
	for i := range 3 {
		resp, b := e.post(t, jobFor("u", fmt.Sprint("l", i), target.url("/x")))
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("submit: %d %s", resp.StatusCode, b)
		}
		for _, ns := range []string{"X-Aqueduct-", "X-Aquifer-"} {
			for _, name := range []string{"Total-Jobs", "Queue-Depth"} {
				if _, err := strconv.Atoi(resp.Header.Get(ns + name)); err != nil {
					t.Fatalf("%s%s = %q", ns, name, resp.Header.Get(ns+name))
				}
			}
			if got := resp.Header.Get(ns + "Flow-Rate"); got != "12.50" {
				t.Fatalf("%sFlow-Rate = %q, want 12.50", ns, got)
			}
		}
	}
}
