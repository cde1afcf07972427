package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// upstream is a loopback HTTP server whose answers the test scripts and
// whose traffic it records.
type upstream struct {
	*httptest.Server
	clock    *testClock // arrivals are recorded on it
	mu       sync.Mutex
	hits     []hit
	handle   func(w http.ResponseWriter, r *http.Request, n int) // n: 1-based hit number
	running  atomic.Int64
	maxConc  atomic.Int64
	received chan hit
}

type hit struct {
	at      time.Time // on the test's clock
	method  string
	path    string
	headers http.Header
	body    string
}

func newUpstream(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) *upstream {
	t.Helper()
	u := &upstream{clock: clockOf(t), handle: handle, received: make(chan hit, 10000)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cur := u.running.Add(1)
		defer u.running.Add(-1)
		for {
			m := u.maxConc.Load()
			if cur <= m || u.maxConc.CompareAndSwap(m, cur) {
				break
			}
		}
		body, _ := io.ReadAll(r.Body)
		h := hit{at: u.clock.now(), method: r.Method, path: r.URL.Path, headers: r.Header.Clone(), body: string(body)}
		u.mu.Lock()
		u.hits = append(u.hits, h)
		n := len(u.hits)
		u.mu.Unlock()
		if u.handle != nil {
			u.handle(w, r, n)
		} else {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "ok")
		}
		u.received <- h
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.hits)
}

func (u *upstream) snapshot() []hit {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]hit(nil), u.hits...)
}

// hooks receives webhooks and decodes their payloads.
type hooks struct {
	*upstream
}

func newHooks(t *testing.T) *hooks {
	return &hooks{newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusNoContent) })}
}

func (h *hooks) payloads(t *testing.T) map[string]app.WebhookPayload {
	t.Helper()
	out := map[string]app.WebhookPayload{}
	for _, x := range h.snapshot() {
		var p app.WebhookPayload
		if err := json.Unmarshal([]byte(x.body), &p); err != nil {
			t.Fatalf("webhook body %q is not JSON: %v", x.body, err)
		}
		if _, dup := out[p.JobID]; dup {
			t.Errorf("webhook for %s delivered twice", p.JobID)
		}
		out[p.JobID] = p
	}
	return out
}

type bundle struct {
	svc   *app.Service
	store *memory.Store
	logs  *observer.ObservedLogs
}

// noJitter makes paced waits exact: every start lands on its slot.
func noJitter() float64 { return 0 }

// setup starts a Service on an in-memory store with fast retries, on the
// test's clock (see clock_test.go), without jitter. mutate may adjust the
// config before start.
func setup(t *testing.T, mutate func(*app.Config)) *bundle {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	tc := clockOf(t)
	cfg := app.Config{
		Store:  newStore(t),
		Doer:   &http.Client{},
		Clock:  tc.clock(),
		Logger: zap.New(core),
		Rates:  app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 16}},
		Retry:  app.RetryPolicy{Attempts: 5, Backoff: []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}},
		Rand:   noJitter,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	client := cfg.Doer
	cfg.Doer = tc.doer(cfg.Doer)
	svc, err := app.New(cfg)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		stopService(t, svc)
		if c, ok := client.(*http.Client); ok {
			c.CloseIdleConnections()
		}
	})
	ms, _ := cfg.Store.(*memory.Store)
	if w, ok := cfg.Store.(interface{ Unwrap() *memory.Store }); ok {
		ms = w.Unwrap()
	}
	return &bundle{svc: svc, store: ms, logs: logs}
}

func (b *bundle) enqueue(t *testing.T, req *domain.JobRequest) domain.JobID {
	t.Helper()
	res, err := b.svc.Enqueue(t.Context(), req)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if res.Duplicate {
		t.Fatalf("Enqueue(%s): unexpected duplicate", req.IdempotentKey)
	}
	return res.JobID
}

func (b *bundle) waitStatus(t *testing.T, id domain.JobID, want domain.Status) *domain.Job {
	t.Helper()
	var j *domain.Job
	waitFor(t, fmt.Sprintf("job %s to be %s", id, want), func() bool {
		var err error
		j, err = b.svc.Get(t.Context(), id)
		return err == nil && j.Status == want
	})
	return j
}

func req(key, url string) *domain.JobRequest {
	return &domain.JobRequest{UserID: "u1", IdempotentKey: key, URL: url, Method: "POST",
		Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"k":"` + key + `"}`}
}

var _ ports.JobStore = (*memory.Store)(nil)
