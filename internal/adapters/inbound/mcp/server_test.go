package mcp_test

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	mcpadapter "github.com/aquiferhq/aquifer/internal/adapters/inbound/mcp"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
)

const waitFor = 10 * time.Second

type env struct {
	svc *app.Service
	srv *mcpadapter.Server
	cs  *sdk.ClientSession
}

type envOptions struct {
	identity      *l8.Identity
	maxBody       int64
	maxConcurrent int // per destination; default 8
	tenants       []app.Tenant
}

// newEnv runs a real app.Service on the memory store behind the MCP server,
// and connects an SDK client over the in-memory transport.
func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	svc, err := app.New(app.Config{
		Store:   memory.New(nil),
		Doer:    loopbackClient(),
		Retry:   app.RetryPolicy{Attempts: 2, Backoff: []time.Duration{10 * time.Millisecond}},
		Rates:   app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: cmp.Or(o.maxConcurrent, 8)}},
		L8:      app.L8Config{Identity: o.identity},
		Tenants: o.tenants,
	})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	srv := mcpadapter.New(svc, mcpadapter.Options{Version: "test", MaxBodyBytes: o.maxBody})
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.SDK().Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() {
		srv.Close()
		_ = cs.Close()
		_ = ss.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = svc.Stop(ctx)
	})
	return &env{svc: svc, srv: srv, cs: cs}
}

func loopbackClient() *http.Client {
	d := &net.Dialer{Timeout: waitFor}
	return &http.Client{Transport: &http.Transport{
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

// upstream answers every request with 200 and a JSON body, after release is
// closed (nil: at once).
func upstream(t *testing.T, release <-chan struct{}) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if release != nil {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"echo":%q}`, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// call invokes a tool and decodes its structured content into out (when the
// call succeeded). It fails the test on protocol errors.
func (e *env) call(t *testing.T, name string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	res, err := e.cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	if !res.IsError && out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return res
}

func errorText(t *testing.T, res *sdk.CallToolResult) string {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a tool error, got success: %+v", res.StructuredContent)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type enqueued struct {
	JobID       string `json:"job_id"`
	Status      string `json:"status"`
	Duplicate   bool   `json:"duplicate"`
	ResourceURI string `json:"resource_uri"`
}

type jobDoc struct {
	JobID          string            `json:"job_id"`
	Status         string            `json:"status"`
	URL            string            `json:"url"`
	Method         string            `json:"method"`
	Headers        map[string]string `json:"headers"`
	Attempts       int               `json:"attempts"`
	ResponseStatus *int              `json:"response_status"`
	Body           *string           `json:"body"`
	ContentType    string            `json:"content_type"`
}

func TestListToolsAndTemplates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	tools, err := e.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*sdk.Tool{}
	for _, tool := range tools.Tools {
		byName[tool.Name] = tool
	}
	for _, name := range []string{"aquifer_enqueue_job", "aquifer_enqueue_batch", "aquifer_get_job", "aquifer_cancel_job", "aquifer_health", "aquifer_l8_metadata", "aquifer_l8_challenge"} {
		tool := byName[name]
		if tool == nil {
			t.Errorf("tool %s missing", name)
			continue
		}
		if len(tool.Description) < 80 {
			t.Errorf("%s: description too thin for an agent to act on: %q", name, tool.Description)
		}
		if tool.OutputSchema == nil {
			t.Errorf("%s: no output schema", name)
		}
	}
	if len(tools.Tools) != 12 { // these seven and the operator's five (operator_test.go)
		t.Errorf("want 12 tools, got %d", len(tools.Tools))
	}

	schema := func(name string) map[string]any {
		b, _ := json.Marshal(byName[name].InputSchema)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return m
	}
	enq := schema("aquifer_enqueue_job")
	if req := fmt.Sprint(enq["required"]); req != "[user_id idempotent_key]" {
		t.Errorf("enqueue required = %s", req)
	}
	props := enq["properties"].(map[string]any)
	for _, f := range []string{"user_id", "idempotent_key", "url", "pool_id", "method", "headers", "body", "webhook_url"} {
		if props[f] == nil {
			t.Errorf("enqueue schema lacks %s", f)
		}
	}
	if req := fmt.Sprint(schema("aquifer_cancel_job")["required"]); req != "[job_id]" {
		t.Errorf("cancel required = %s", req)
	}
	if a := byName["aquifer_cancel_job"].Annotations; a == nil || a.DestructiveHint == nil || !*a.DestructiveHint || a.ReadOnlyHint {
		t.Errorf("cancel annotations = %+v: it changes a job for good", a)
	}
	wait := schema("aquifer_get_job")["properties"].(map[string]any)["wait_seconds"].(map[string]any)
	if wait["minimum"] != 0.0 {
		t.Errorf("wait_seconds schema = %v", wait)
	}

	tmpl, err := e.cs.ListResourceTemplates(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tmpl.ResourceTemplates) != 1 || tmpl.ResourceTemplates[0].URITemplate != "aquifer://jobs/{job_id}" {
		t.Fatalf("templates = %+v", tmpl.ResourceTemplates)
	}
}

func TestEnqueueWaitAndReadResource(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	up := upstream(t, nil)

	var out enqueued
	res := e.call(t, "aquifer_enqueue_job", map[string]any{
		"user_id": "agent-1", "idempotent_key": "k-1", "url": up.URL + "/things", "method": "post",
		"headers": map[string]string{"Authorization": "Bearer secret"}, "body": `{"a":1}`,
	}, &out)
	if res.IsError || !domain.ValidJobID(out.JobID) || out.Duplicate || out.ResourceURI != "aquifer://jobs/"+out.JobID {
		t.Fatalf("enqueue: %+v %+v", res, out)
	}

	var job jobDoc
	res = e.call(t, "aquifer_get_job", map[string]any{"job_id": out.JobID, "wait_seconds": 10}, &job)
	if res.IsError || job.Status != "completed" || job.ResponseStatus == nil || *job.ResponseStatus != 200 {
		t.Fatalf("get_job: %+v", job)
	}
	if job.Body == nil || *job.Body != `{"echo":"/things"}` || job.ContentType != "application/json" || job.Method != "POST" {
		t.Fatalf("result: body=%v content_type=%q method=%q", job.Body, job.ContentType, job.Method)
	}
	if job.Headers["Authorization"] == "Bearer secret" {
		t.Fatal("secret header echoed")
	}

	// The same key again: the same job, marked duplicate.
	var dup enqueued
	e.call(t, "aquifer_enqueue_job", map[string]any{"user_id": "agent-1", "idempotent_key": "k-1", "url": up.URL + "/other"}, &dup)
	if !dup.Duplicate || dup.JobID != out.JobID || dup.Status != "completed" {
		t.Fatalf("duplicate: %+v", dup)
	}

	rr, err := e.cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: out.ResourceURI})
	if err != nil {
		t.Fatal(err)
	}
	if len(rr.Contents) != 1 || rr.Contents[0].MIMEType != "application/json" {
		t.Fatalf("resource: %+v", rr.Contents)
	}
	var doc jobDoc
	if err := json.Unmarshal([]byte(rr.Contents[0].Text), &doc); err != nil || doc.JobID != out.JobID || doc.Status != "completed" {
		t.Fatalf("resource text %q: %v", rr.Contents[0].Text, err)
	}
}

func TestGetJobWaitEndsWithCurrentState(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	release := make(chan struct{})
	up := upstream(t, release)
	defer close(release)

	var out enqueued
	e.call(t, "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "slow", "url": up.URL}, &out)
	start := time.Now()
	var job jobDoc
	res := e.call(t, "aquifer_get_job", map[string]any{"job_id": out.JobID, "wait_seconds": 0.3}, &job)
	if res.IsError || job.Status == "completed" || job.Status == "failed" {
		t.Fatalf("want an unfinished job, got %+v", job)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("wait took %v, want about 0.3s", d)
	}
}

func TestGetJobWaitWakesOnCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	release := make(chan struct{})
	up := upstream(t, release)

	var out enqueued
	e.call(t, "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "gated", "url": up.URL}, &out)
	go func() {
		time.Sleep(100 * time.Millisecond) // let the long-poll start waiting
		close(release)
	}()
	start := time.Now()
	var job jobDoc
	e.call(t, "aquifer_get_job", map[string]any{"job_id": out.JobID, "wait_seconds": 60}, &job)
	if job.Status != "completed" {
		t.Fatalf("status %q", job.Status)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("long-poll answered after %v; it should wake on the job's completion", d)
	}
}

func TestCloseEndsLongPolls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	release := make(chan struct{})
	defer close(release)
	up := upstream(t, release)
	var out enqueued
	e.call(t, "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "c", "url": up.URL}, &out)
	go func() {
		time.Sleep(100 * time.Millisecond)
		e.srv.Close()
	}()
	start := time.Now()
	var job jobDoc
	res := e.call(t, "aquifer_get_job", map[string]any{"job_id": out.JobID, "wait_seconds": 60}, &job)
	if res.IsError || job.JobID != out.JobID {
		t.Fatalf("get_job after close: %+v", res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close did not end the long-poll (%v)", d)
	}
}

func TestToolErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{maxBody: 16})
	cases := []struct {
		name, tool string
		args       map[string]any
		want       string
	}{
		{"missing user_id (schema)", "aquifer_enqueue_job", map[string]any{"idempotent_key": "k", "url": "http://127.0.0.1:1/"}, "invalid user_id: user_id is required"},
		{"blank user_id (core)", "aquifer_enqueue_job", map[string]any{"user_id": " ", "idempotent_key": "k", "url": "http://127.0.0.1:1/"}, "invalid user_id: user_id is required"},
		{"bad url", "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "k", "url": "ftp://x"}, "invalid url: url must be an absolute http or https URL"},
		{"url and pool", "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "k", "url": "http://127.0.0.1:1/", "pool_id": "p"}, "mutually exclusive"},
		{"unknown field", "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "k", "url": "http://127.0.0.1:1/", "wait_seconds": 3},
			"invalid arguments: unknown argument wait_seconds; aquifer_enqueue_job takes user_id, idempotent_key, url, pool_id, method, headers, body, webhook_url, not_before, delay_seconds, deadline, max_wait_seconds, priority, retry, timeout_seconds, traceparent and tracestate"},
		{"wrong type", "aquifer_enqueue_job", map[string]any{"user_id": 7, "idempotent_key": "k", "url": "http://127.0.0.1:1/"}, "invalid user_id: user_id must be a string, not a number"},
		{"null", "aquifer_enqueue_job", map[string]any{"user_id": nil, "idempotent_key": "k", "url": "http://127.0.0.1:1/"}, "invalid user_id: user_id must be a string, not null"},
		{"headers not an object", "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "k", "url": "http://127.0.0.1:1/", "headers": []any{}},
			"invalid headers: headers must be an object, not an array"},
		{"header value not a string", "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "k", "url": "http://127.0.0.1:1/", "headers": map[string]any{"a": 1}},
			`invalid headers: every value of headers must be a string; the value of "a" is a number`},
		{"no arguments to a tool with required ones", "aquifer_get_job", nil, "invalid job_id: job_id is required"},
		{"unknown argument to a tool without arguments", "aquifer_health", map[string]any{"verbose": true}, "invalid arguments: aquifer_health takes no arguments; verbose is unknown"},
		{"fractional timestamp", "aquifer_l8_challenge", map[string]any{"challenge_id": "c", "nonce": "n", "timestamp": 1.5, "sender_public_key": "k", "signature": "s"},
			"invalid timestamp: timestamp must be a whole number (digits only), not 1.5"},
		{"timestamp out of range", "aquifer_l8_challenge", map[string]any{"challenge_id": "c", "nonce": "n", "timestamp": json.RawMessage("123456789012345678901234567890"), "sender_public_key": "k", "signature": "s"},
			"invalid timestamp: the number 123456789012345678901234567890 is out of range"},
		{"body too large", "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "k", "url": "http://127.0.0.1:1/", "body": strings.Repeat("x", 17)}, "more than the limit of 16 bytes"},
		{"unknown job", "aquifer_get_job", map[string]any{"job_id": strings.Repeat("a", 32)}, "job not found"},
		{"garbage job id", "aquifer_get_job", map[string]any{"job_id": "nope", "wait_seconds": 1}, "job not found"},
		{"empty job id", "aquifer_get_job", map[string]any{"job_id": ""}, "job_id is required"},
		{"negative wait", "aquifer_get_job", map[string]any{"job_id": strings.Repeat("a", 32), "wait_seconds": -1}, "invalid wait_seconds: wait_seconds must be at least 0, not -1"},
		{"wait not a number", "aquifer_get_job", map[string]any{"job_id": strings.Repeat("a", 32), "wait_seconds": "5"}, "invalid wait_seconds: wait_seconds must be a number, not a string"},
		{"cancel unknown job", "aquifer_cancel_job", map[string]any{"job_id": strings.Repeat("a", 32)}, "job not found (unknown id, or the job expired)"},
		{"cancel garbage id", "aquifer_cancel_job", map[string]any{"job_id": "nope"}, "job not found"},
		{"cancel empty id", "aquifer_cancel_job", map[string]any{"job_id": ""}, "invalid job_id: job_id is required"},
		{"cancel without id", "aquifer_cancel_job", map[string]any{}, "invalid job_id: job_id is required"},
		{"l8 off", "aquifer_l8_metadata", nil, "L8 is not enabled"},
		{"l8 challenge off", "aquifer_l8_challenge", map[string]any{"challenge_id": "c", "nonce": "n", "timestamp": 1, "sender_public_key": "k", "signature": "s"}, "L8 is not enabled"},
		{"l8 challenge incomplete", "aquifer_l8_challenge", map[string]any{"challenge_id": "c"}, "invalid arguments: nonce, timestamp, sender_public_key and signature are required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := e.call(t, c.tool, c.args, nil)
			msg := errorText(t, res)
			t.Logf("%s: %s", c.name, msg)
			if !strings.Contains(msg, c.want) {
				t.Fatalf("error %q does not mention %q", msg, c.want)
			}
			for _, jargon := range []string{"validating", "/properties/", "map[", "has type", "0.000000"} {
				if strings.Contains(msg, jargon) {
					t.Fatalf("error %q speaks validator (%q), not words", msg, jargon)
				}
			}
		})
	}

	if _, err := e.cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: "aquifer://jobs/" + strings.Repeat("b", 32)}); err == nil {
		t.Error("reading an unknown job resource succeeded")
	}
	if _, err := e.cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: "aquifer://jobs/NOT-AN-ID"}); err == nil {
		t.Error("reading a malformed job resource succeeded")
	}
}

func TestHealthAndL8Tools(t *testing.T) {
	t.Parallel()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	id := l8.NewIdentity(priv)
	e := newEnv(t, envOptions{identity: id})

	var h struct {
		Status string `json:"status"`
		Store  struct {
			OK bool `json:"ok"`
		} `json:"store"`
		L8PublicKey string `json:"l8_public_key"`
	}
	if res := e.call(t, "aquifer_health", nil, &h); res.IsError || h.Status != "ok" || !h.Store.OK || h.L8PublicKey != id.PublicKeyBase64() {
		t.Fatalf("health: %+v %+v", res, h)
	}

	var m l8.Metadata
	if res := e.call(t, "aquifer_l8_metadata", map[string]any{}, &m); res.IsError || m.PublicKey != id.PublicKeyBase64() {
		t.Fatalf("metadata: %+v", m)
	}

	// A well-formed challenge from another identity gets Aquifer's proof.
	_, otherPriv, _ := ed25519.GenerateKey(nil)
	other := l8.NewIdentity(otherPriv)
	ch := other.NewChallenge(time.Now())
	args := map[string]any{"challenge_id": ch.ChallengeID, "nonce": ch.Nonce, "timestamp": ch.Timestamp,
		"sender_public_key": ch.SenderPublicKey, "signature": ch.Signature}
	var resp l8.ChallengeResponse
	if res := e.call(t, "aquifer_l8_challenge", args, &resp); res.IsError || resp.ReceiverPublicKey != id.PublicKeyBase64() || resp.ChallengeID != ch.ChallengeID {
		t.Fatalf("challenge: %+v %+v", res, resp)
	}
	// Replaying the nonce is refused with the protocol's reason.
	if msg := errorText(t, e.call(t, "aquifer_l8_challenge", args, nil)); !strings.Contains(strings.ToLower(msg), "nonce") {
		t.Fatalf("replay error %q", msg)
	}
}

func TestStreamableHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	hs := httptest.NewServer(e.srv.HTTPHandler())
	t.Cleanup(hs.Close)
	up := upstream(t, nil)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "http-client", Version: "1"}, nil).
		Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "aquifer_enqueue_job", Arguments: map[string]any{
		"user_id": "h", "idempotent_key": "h-1", "url": up.URL + "/via-http"}})
	if err != nil || res.IsError {
		t.Fatalf("enqueue over HTTP: %v %+v", err, res)
	}
	id := res.StructuredContent.(map[string]any)["job_id"].(string)
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "aquifer_get_job", Arguments: map[string]any{"job_id": id, "wait_seconds": 10}})
	if err != nil || res.IsError {
		t.Fatalf("get over HTTP: %v %+v", err, res)
	}
	if st := res.StructuredContent.(map[string]any)["status"]; st != "completed" {
		t.Fatalf("status %v", st)
	}
}
