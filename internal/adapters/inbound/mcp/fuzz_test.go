package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	mcpadapter "github.com/aquiferhq/aquifer/internal/adapters/inbound/mcp"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// Seed corpus: testdata/fuzz/FuzzMCPHTTP. Plain `go test` replays it;
// explore with
//
//	go test -run '^$' -fuzz FuzzMCPHTTP -fuzztime 60s ./internal/adapters/inbound/mcp/

const fuzzMaxBody = 4096

// fuzzCore is the application as far as MCP can see it, without a store:
// Enqueue validates like the real one and answers a fixed job; every job
// read, cancel or retry is a 404, every listing empty and every lane idle;
// the L8 challenge is the real identity's answer. It
// records requests that should never have reached it.
type fuzzCore struct {
	id     *l8.Identity
	nonces *l8.Nonces

	mu  sync.Mutex
	bad []string
}

func (c *fuzzCore) Enqueue(_ context.Context, req *domain.JobRequest) (*app.EnqueueResult, error) {
	if len(req.Body) > fuzzMaxBody {
		c.mu.Lock()
		c.bad = append(c.bad, fmt.Sprintf("a %d-byte body reached Enqueue", len(req.Body)))
		c.mu.Unlock()
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return &app.EnqueueResult{JobID: "0190a1b2c3d4e5f60718293a4b5c6d7e", Status: domain.StatusQueued}, nil
}

// EnqueueBatch answers each request as Enqueue would.
func (c *fuzzCore) EnqueueBatch(ctx context.Context, reqs []*domain.JobRequest) ([]app.BatchItem, error) {
	out := make([]app.BatchItem, len(reqs))
	for i, req := range reqs {
		out[i].Result, out[i].Err = c.Enqueue(ctx, req)
	}
	return out, nil
}

func (c *fuzzCore) Get(context.Context, domain.JobID) (*domain.Job, error) {
	return nil, domain.ErrNotFound
}

func (c *fuzzCore) Cancel(context.Context, domain.JobID) (*domain.Job, error) {
	return nil, domain.ErrNotFound
}

func (c *fuzzCore) Subscribe(context.Context, domain.JobID) (*domain.Job, *app.Subscription, error) {
	return nil, nil, domain.ErrNotFound
}

func (c *fuzzCore) Health(context.Context) *app.Health { return &app.Health{Status: "ok"} }

func (c *fuzzCore) L8Metadata() *l8.Metadata {
	m := c.id.Metadata()
	return &m
}

func (c *fuzzCore) L8Challenge(_ context.Context, ch *l8.ChallengeRequest) (*l8.ChallengeResponse, error) {
	resp, err := c.id.Answer(ch, time.Now(), c.nonces)
	if err != nil {
		return nil, domain.Invalid("", "%s", err.Error())
	}
	return resp, nil
}

func (c *fuzzCore) ListJobs(context.Context, *app.JobQuery) (*app.JobPage, error) {
	return &app.JobPage{Counts: map[domain.Status]int64{}}, nil
}

func (c *fuzzCore) Retry(context.Context, domain.JobID) (*domain.Job, error) {
	return nil, domain.ErrNotFound
}

func (c *fuzzCore) Lanes(context.Context) ([]*app.LaneView, error) { return nil, nil }

func (c *fuzzCore) Lane(_ context.Context, dest string) (*app.LaneView, error) {
	return &app.LaneView{Destination: domain.UpstreamKey(dest)}, nil
}

func (c *fuzzCore) PauseLane(_ context.Context, dest, reason string) (*app.LaneView, error) {
	return &app.LaneView{Destination: domain.UpstreamKey(dest), Paused: &domain.LanePause{Upstream: domain.UpstreamKey(dest), Reason: reason}}, nil
}

func (c *fuzzCore) ResumeLane(_ context.Context, dest string) (*app.LaneView, error) {
	return &app.LaneView{Destination: domain.UpstreamKey(dest)}, nil
}

func (c *fuzzCore) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.bad...)
}

// mcpSession is an initialized streamable HTTP session on the adapter's
// handler, served in-process.
type mcpSession struct {
	h       http.Handler
	id      string
	version string
}

func (s *mcpSession) post(body []byte, withSession bool) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	if withSession && s.id != "" {
		r.Header.Set("Mcp-Session-Id", s.id)
		r.Header.Set("Mcp-Protocol-Version", s.version)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, r.WithContext(ctx))
	return w
}

func (s *mcpSession) end(sessionID string) {
	r := httptest.NewRequest(http.MethodDelete, "/mcp", nil)
	r.Header.Set("Mcp-Session-Id", sessionID)
	s.h.ServeHTTP(httptest.NewRecorder(), r)
}

func newMCPSession(tb testing.TB) (*mcpSession, *fuzzCore) {
	tb.Helper()
	core := &fuzzCore{id: l8.NewIdentity(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))), nonces: l8.NewNonces(0)}
	srv := mcpadapter.New(core, mcpadapter.Options{Version: "fuzz", MaxBodyBytes: fuzzMaxBody, SessionTimeout: time.Minute})
	s := &mcpSession{h: srv.HTTPHandler()}
	w := s.post([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18",`+
		`"capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}`), false)
	s.id = w.Header().Get("Mcp-Session-Id")
	if w.Code != http.StatusOK || s.id == "" {
		tb.Fatalf("initialize: %d %q (session %q)", w.Code, w.Body.String(), s.id)
	}
	var init struct {
		Result struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
	}
	for _, m := range rpcMessages(tb, w) {
		_ = json.Unmarshal(m, &init)
	}
	s.version = init.Result.ProtocolVersion
	if w := s.post([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), true); w.Code >= 300 {
		tb.Fatalf("initialized: %d %q", w.Code, w.Body.String())
	}
	tb.Cleanup(func() {
		s.end(s.id)
		srv.Close()
	})
	return s, core
}

// rpcMessages returns the JSON-RPC messages of a response: the body itself
// for application/json, the data of each event for text/event-stream. Each
// must be a JSON object.
func rpcMessages(tb testing.TB, w *httptest.ResponseRecorder) []json.RawMessage {
	tb.Helper()
	var out []json.RawMessage
	body := w.Body.Bytes()
	switch ct := w.Header().Get("Content-Type"); {
	case strings.HasPrefix(ct, "application/json"):
		if len(bytes.TrimSpace(body)) > 0 {
			out = append(out, json.RawMessage(bytes.TrimSpace(body)))
		}
	case strings.HasPrefix(ct, "text/event-stream"):
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				out = append(out, json.RawMessage(strings.TrimSpace(data)))
			}
		}
	}
	for _, m := range out {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(m, &obj); err != nil {
			tb.Fatalf("response message is not a JSON object (%v): %q", err, m)
		}
		if string(obj["jsonrpc"]) != `"2.0"` {
			tb.Fatalf("response message without jsonrpc 2.0: %q", m)
		}
		_, hasResult := obj["result"]
		_, hasError := obj["error"]
		_, hasMethod := obj["method"]
		if hasResult && hasError || !hasResult && !hasError && !hasMethod {
			tb.Fatalf("response message is neither a result, an error nor a request: %q", m)
		}
	}
	return out
}

// FuzzMCPHTTP posts arbitrary bodies to /mcp, inside an initialized session
// or outside any, and checks that the adapter never panics or answers 5xx,
// that whatever it answers is well-formed JSON-RPC, and that nothing over
// the body limit or invalid is enqueued.
func FuzzMCPHTTP(f *testing.F) {
	s, core := newMCPSession(f)
	f.Fuzz(func(t *testing.T, body []byte, withSession bool) {
		w := s.post(body, withSession)
		if id := w.Header().Get("Mcp-Session-Id"); id != "" && id != s.id {
			defer s.end(id) // the body was an initialize: a new session, closed again
		}
		if w.Code >= 500 {
			t.Fatalf("%d %q for %q", w.Code, w.Body.String(), body)
		}
		if w.Code < 300 {
			rpcMessages(t, w)
		}
		if bad := core.violations(); len(bad) > 0 {
			t.Fatalf("%v (body %q)", bad, body)
		}
	})
}
