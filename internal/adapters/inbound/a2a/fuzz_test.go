package a2aagent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	a2aagent "github.com/aquiferhq/aquifer/internal/adapters/inbound/a2a"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// Seed corpus: testdata/fuzz/FuzzA2AJSONRPC. Plain `go test` replays it;
// explore with
//
//	go test -run '^$' -fuzz FuzzA2AJSONRPC -fuzztime 60s ./internal/adapters/inbound/a2a/

const fuzzA2AMaxBody = 4096

// fuzzA2ACore is the application as A2A sees it, without a store: every
// valid submission is a duplicate of one fixed job (so no execution
// outlives its request), every read or cancel a 404. It records requests
// that should never have reached it.
type fuzzA2ACore struct {
	mu  sync.Mutex
	bad []string
}

func (c *fuzzA2ACore) Enqueue(_ context.Context, req *domain.JobRequest) (*app.EnqueueResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(req.Body) > fuzzA2AMaxBody {
		c.bad = append(c.bad, fmt.Sprintf("a %d-byte body reached Enqueue", len(req.Body)))
	}
	if !domain.ValidJobID(string(req.ID)) {
		c.bad = append(c.bad, fmt.Sprintf("job id %q reached Enqueue", req.ID))
	}
	if err := req.Validate(); err != nil {
		c.bad = append(c.bad, fmt.Sprintf("an invalid request reached Enqueue: %v", err))
		return nil, err
	}
	return &app.EnqueueResult{JobID: "0190a1b2c3d4e5f60718293a4b5c6d7e", Status: domain.StatusQueued, Duplicate: true}, nil
}

func (c *fuzzA2ACore) Get(context.Context, domain.JobID) (*domain.Job, error) {
	return nil, domain.ErrNotFound
}

func (c *fuzzA2ACore) Subscribe(context.Context, domain.JobID) (*domain.Job, *app.Subscription, error) {
	return nil, nil, domain.ErrNotFound
}

func (c *fuzzA2ACore) Cancel(context.Context, domain.JobID) (*domain.Job, error) {
	return nil, domain.ErrNotFound
}

func (c *fuzzA2ACore) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.bad...)
}

// FuzzA2AJSONRPC posts arbitrary bodies to the agent's JSON-RPC endpoint.
// It never panics or answers 5xx; every answer is well-formed JSON-RPC (a
// JSON object, or SSE events carrying them) with exactly one of result and
// error, echoing the request's id; and nothing invalid or over the body
// limit reaches the application.
func FuzzA2AJSONRPC(f *testing.F) {
	core := &fuzzA2ACore{}
	agent, err := a2aagent.New(core, a2aagent.Options{PublicURL: "http://127.0.0.1:1", PushDir: filepath.Join(f.TempDir(), "push"),
		Version: "fuzz", MaxBodyBytes: fuzzA2AMaxBody})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(agent.Close)
	h := agent.JSONRPCHandler()
	f.Fuzz(func(t *testing.T, body []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r := httptest.NewRequest(http.MethodPost, a2aagent.JSONRPCPath, bytes.NewReader(body)).WithContext(ctx)
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if ctx.Err() != nil {
			t.Fatalf("request did not finish: %q", body)
		}
		if w.Code >= 500 {
			t.Fatalf("%d %q for %q", w.Code, w.Body.String(), body)
		}
		for _, m := range a2aMessages(t, w) {
			checkRPCAnswer(t, body, m)
		}
		if bad := core.violations(); len(bad) > 0 {
			t.Fatalf("%v (body %q)", bad, body)
		}
	})
}

// a2aMessages splits a response into its JSON-RPC messages.
func a2aMessages(t *testing.T, w *httptest.ResponseRecorder) []json.RawMessage {
	t.Helper()
	body := bytes.TrimSpace(w.Body.Bytes())
	ct := w.Header().Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		var out []json.RawMessage
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				out = append(out, json.RawMessage(strings.TrimSpace(data)))
			}
		}
		return out
	case len(body) == 0:
		return nil // a notification: no answer
	case strings.HasPrefix(ct, "application/json"):
		return []json.RawMessage{body}
	}
	t.Fatalf("answer with Content-Type %q: %q", ct, body)
	return nil
}

func checkRPCAnswer(t *testing.T, req []byte, m json.RawMessage) {
	t.Helper()
	var ans map[string]json.RawMessage
	if err := json.Unmarshal(m, &ans); err != nil {
		t.Fatalf("answer is not a JSON object (%v): %q", err, m)
	}
	_, hasResult := ans["result"]
	rpcErr, hasError := ans["error"]
	if string(ans["jsonrpc"]) != `"2.0"` || hasResult == hasError {
		t.Fatalf("not a JSON-RPC 2.0 answer with one of result and error: %q", m)
	}
	if hasError {
		var e struct {
			Code    *int   `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(rpcErr, &e); err != nil || e.Code == nil || e.Message == "" {
			t.Fatalf("malformed error object %q (%v)", rpcErr, err)
		}
		if (*e.Code == -32700 || *e.Code == -32600) && string(ans["id"]) == "null" {
			return // a parse error or an invalid request may answer id null (JSON-RPC 2.0 §5)
		}
	}
	// A request whose id is a string or a number gets it back.
	var env map[string]json.RawMessage
	if json.Unmarshal(req, &env) != nil {
		return
	}
	var sent any
	if json.Unmarshal(env["id"], &sent) != nil {
		return
	}
	switch sent.(type) {
	case string, float64:
		var got any
		_ = json.Unmarshal(ans["id"], &got)
		if !reflect.DeepEqual(got, sent) {
			t.Fatalf("request id %s answered with id %s: %q", env["id"], ans["id"], m)
		}
	}
}
