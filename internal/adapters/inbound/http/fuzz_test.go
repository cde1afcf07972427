package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	httpapi "github.com/aquiferhq/aquifer/internal/adapters/inbound/http"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// Seed corpus: testdata/fuzz/FuzzJobIDPaths. Plain `go test` replays it;
// explore with
//
//	go test -run '^$' -fuzz FuzzJobIDPaths -fuzztime 60s ./internal/adapters/inbound/http/

// fuzzKnownID is the one job the fuzzed API holds: finished, so its stream
// is a short catch-up that ends by itself.
const fuzzKnownID = "0190a1b2c3d4e5f60718293a4b5c6d7e"

// hostileAPI is the REST handler over a real app.Service on the memory
// store, built once per fuzz target or test.
type hostileAPI struct {
	svc   *app.Service
	store *insertCounter
	h     *httpapi.Handler
}

// insertCounter is the memory store counting Insert calls: every row a
// submission writes goes through Insert.
type insertCounter struct {
	*memory.Store
	inserts atomic.Int64
}

func (s *insertCounter) Insert(ctx context.Context, j *domain.Job) (*domain.Job, bool, error) {
	s.inserts.Add(1)
	return s.Store.Insert(ctx, j)
}

// newHostileAPI builds the API, with one completed job (fuzzKnownID) when
// withJob is set. Its upstream and the service's client are loopback only.
func newHostileAPI(tb testing.TB, withJob bool) *hostileAPI {
	tb.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "done")
	}))
	store := &insertCounter{Store: memory.New(nil)}
	svc, err := app.New(app.Config{
		Store:        store,
		Doer:         loopbackOnlyClient(),
		MaxBodyBytes: 4096,
		Rates:        app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 8}},
	})
	if err != nil {
		tb.Fatalf("app.New: %v", err)
	}
	if err := svc.Start(context.Background()); err != nil {
		tb.Fatalf("Start: %v", err)
	}
	h := httpapi.New(svc, httpapi.Options{MaxBodyBytes: 4096, KeepAlive: time.Hour})
	tb.Cleanup(func() {
		h.CloseStreams()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
		up.Close()
	})
	api := &hostileAPI{svc: svc, store: store, h: h}
	if withJob {
		ctx := context.Background()
		_, err := svc.Enqueue(ctx, &domain.JobRequest{ID: fuzzKnownID, UserID: "u", IdempotentKey: "k", URL: up.URL + "/x"})
		if err != nil {
			tb.Fatalf("Enqueue: %v", err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			j, err := svc.Get(ctx, fuzzKnownID)
			if err == nil && j.Status == domain.StatusCompleted {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("job did not complete: %+v %v", j, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return api
}

// loopbackOnlyClient dials nothing but loopback addresses.
func loopbackOnlyClient() *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return nil, fmt.Errorf("refusing to dial non-loopback %s", addr)
			}
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// jobOps are the job-id routes FuzzJobIDPaths exercises, picked by op.
var jobOps = [...]struct{ method, suffix string }{
	{http.MethodGet, ""},
	{http.MethodGet, "/stream"},
	{http.MethodHead, ""},
	{http.MethodDelete, ""},
}

// FuzzJobIDPaths sends GET /jobs/{id}, GET /jobs/{id}/stream (SSE), HEAD and
// DELETE with arbitrary ids. The only job is fuzzKnownID (finished): every
// other id is a 404 (400 or 405 where the path no longer matches a route),
// always with a JSON error, never a 5xx or a panic.
func FuzzJobIDPaths(f *testing.F) {
	api := newHostileAPI(f, true)
	f.Fuzz(func(t *testing.T, op uint8, id string, escaped bool, rawQuery string) {
		o := jobOps[int(op)%len(jobOps)]
		u := &url.URL{Path: "/jobs/" + id + o.suffix, RawQuery: rawQuery}
		if escaped {
			u.RawPath = "/jobs/" + url.PathEscape(id) + o.suffix
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r := (&http.Request{Method: o.method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Body: http.NoBody, Host: "aquifer.test", RequestURI: u.RequestURI()}).WithContext(ctx)
		w := httptest.NewRecorder()
		api.h.ServeHTTP(w, r)
		if ctx.Err() != nil {
			t.Fatalf("%s %q did not finish", o.method, u)
		}

		// chi routes on the path as sent (RawPath when set): the known job
		// is reached only by its exact paths, and any other single segment
		// after /jobs/ is an id that does not exist.
		path := u.Path
		if escaped {
			path = u.RawPath
		}
		rest, _ := strings.CutPrefix(path, "/jobs/")
		seg, tail, _ := strings.Cut(rest, "/")
		switch {
		case w.Code >= 500:
			t.Fatalf("%s %q: %d %q", o.method, u, w.Code, w.Body.String())
		case rest == fuzzKnownID:
			checkKnownJob(t, o.method, "", w)
			return
		case rest == fuzzKnownID+"/stream" && o.method == http.MethodGet:
			checkKnownJob(t, o.method, "/stream", w)
			return
		case w.Code < 400:
			t.Fatalf("%s %q (no such job): %d %q", o.method, u, w.Code, w.Body.String())
		case seg != "" && seg != fuzzKnownID && (rest == seg || tail == "stream" && o.method == http.MethodGet) &&
			w.Code != http.StatusNotFound:
			t.Fatalf("%s %q: %d, want 404 for an unknown id; body %q", o.method, u, w.Code, w.Body.String())
		}
		checkJSONError(t, w)
	})
}

func checkKnownJob(t *testing.T, method, suffix string, w *httptest.ResponseRecorder) {
	t.Helper()
	switch {
	case method == http.MethodDelete:
		if w.Code != http.StatusConflict {
			t.Fatalf("DELETE of a finished job: %d %q", w.Code, w.Body.String())
		}
		checkJSONError(t, w)
	case suffix == "/stream":
		body := w.Body.String()
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/event-stream" ||
			!strings.HasPrefix(body, "event: queued\n") || !strings.Contains(body, "event: completed\n") {
			t.Fatalf("stream of a finished job: %d %q", w.Code, body)
		}
	default:
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s of the known job: %d %q", method, w.Code, w.Body.String())
		}
	}
}

func checkJSONError(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%d with Content-Type %q: %q", w.Code, ct, w.Body.String())
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
		t.Fatalf("%d body is not a JSON error (%v): %q", w.Code, err, w.Body.String())
	}
}
