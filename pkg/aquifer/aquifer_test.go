package aquifer_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// closeCounter is a store that counts Close calls.
type closeCounter struct {
	aquifer.Store
	closes atomic.Int32
}

func (c *closeCounter) Close() error {
	c.closes.Add(1)
	return c.Store.Close()
}

// recorder is an adapter that logs its lifecycle calls into a shared list.
type recorder struct {
	name     string
	startErr error
	log      *[]string
	mu       *sync.Mutex
}

func (r *recorder) Name() string { return r.name }

func (r *recorder) Start(context.Context, *aquifer.Aquifer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.log = append(*r.log, "start "+r.name)
	return r.startErr
}

func (r *recorder) Stop(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.log = append(*r.log, "stop "+r.name)
	return nil
}

func newRecorders(names ...string) ([]aquifer.Adapter, *[]string) {
	var log []string
	var mu sync.Mutex
	out := make([]aquifer.Adapter, 0, len(names))
	for _, n := range names {
		out = append(out, &recorder{name: n, log: &log, mu: &mu})
	}
	return out, &log
}

func start(t *testing.T, o aquifer.Options) *aquifer.Aquifer {
	t.Helper()
	aq, err := aquifer.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := aq.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := aq.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return aq
}

func echo(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestNewReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := aquifer.New(aquifer.Options{
		L8:       aquifer.L8Options{PrivateKey: make(ed25519.PrivateKey, 12)},
		Tenants:  []aquifer.Tenant{{Name: "a"}, {Name: "a"}, {}},
		Adapters: []aquifer.Adapter{nil},
	})
	if err == nil {
		t.Fatal("New accepted invalid options")
	}
	for _, want := range []string{"Options.Store is required", "12 bytes, want 64", `duplicate name "a"`,
		"Tenants[2]: Name is required", "Adapters[0] is nil"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}

func TestNewClosesAHandedOverStoreWhenItFails(t *testing.T) {
	t.Parallel()
	for _, hand := range []bool{true, false} {
		store := &closeCounter{Store: aquifer.NewMemoryStore()}
		_, err := aquifer.New(aquifer.Options{Store: store, CloseStore: hand, Tenants: []aquifer.Tenant{{}}})
		if err == nil {
			t.Fatal("New accepted a tenant without a name")
		}
		want := int32(0)
		if hand {
			want = 1
		}
		if got := store.closes.Load(); got != want {
			t.Errorf("CloseStore=%v: store closed %d times, want %d", hand, got, want)
		}
		_ = store.Store.Close()
	}
}

func TestAdaptersStartInOrderAndStopInReverse(t *testing.T) {
	t.Parallel()
	adapters, log := newRecorders("a", "b", "c")
	store := &closeCounter{Store: aquifer.NewMemoryStore()}
	aq, err := aquifer.New(aquifer.Options{Store: store, CloseStore: true, Adapters: adapters})
	if err != nil {
		t.Fatal(err)
	}
	if err := aq.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := aq.Start(t.Context()); err != nil { // idempotent
		t.Fatal(err)
	}
	for range 2 { // Stop is idempotent
		if err := aq.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(*log, want) {
		t.Errorf("lifecycle %q, want %q", *log, want)
	}
	if n := store.closes.Load(); n != 1 {
		t.Errorf("store closed %d times, want 1", n)
	}
	if err := aq.Start(t.Context()); !errors.Is(err, aquifer.ErrClosed) {
		t.Errorf("Start after Stop: %v, want ErrClosed", err)
	}
}

func TestFailedStartStopsWhatStarted(t *testing.T) {
	t.Parallel()
	adapters, log := newRecorders("a", "bad", "c")
	adapters[1].(*recorder).startErr = errors.New("port taken")
	store := &closeCounter{Store: aquifer.NewMemoryStore()}
	aq, err := aquifer.New(aquifer.Options{Store: store, CloseStore: true, Adapters: adapters})
	if err != nil {
		t.Fatal(err)
	}
	err = aq.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "start adapter bad: port taken") {
		t.Fatalf("Start: %v, want the adapter's error", err)
	}
	// Every adapter is stopped, started or not (Adapter.Stop's contract).
	want := []string{"start a", "start bad", "stop c", "stop bad", "stop a"}
	if !slices.Equal(*log, want) {
		t.Errorf("lifecycle %q, want %q", *log, want)
	}
	if n := store.closes.Load(); n != 1 {
		t.Errorf("store closed %d times, want 1", n)
	}
	if err := aq.Start(t.Context()); !errors.Is(err, aquifer.ErrClosed) {
		t.Errorf("Start after a failed Start: %v, want ErrClosed", err)
	}
	if err := aq.Stop(t.Context()); err != nil {
		t.Errorf("Stop after a failed Start: %v", err)
	}
}

func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	adapters, log := newRecorders("a")
	aq, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true, Adapters: adapters})
	if err != nil {
		t.Fatal(err)
	}
	if err := aq.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*log, []string{"stop a"}) {
		t.Errorf("lifecycle %q, want only the stop", *log)
	}
}

func TestJobsEnqueuedBeforeStartRunAfterIt(t *testing.T) {
	t.Parallel()
	dest := echo(t)
	aq, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = aq.Stop(context.Background()) })
	res, err := aq.Enqueue(t.Context(), &aquifer.JobRequest{UserID: "u", IdempotentKey: "early", URL: dest.URL + "/early"})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := aq.Get(t.Context(), res.JobID); err != nil || j.Status != aquifer.StatusQueued {
		t.Fatalf("before Start: %v, %v; want queued", j, err)
	}
	if err := aq.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	j, err := aq.Wait(ctx, res.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != aquifer.StatusCompleted || string(j.Result.Body) != "GET /early" {
		t.Errorf("job %s, body %q", j.Status, j.Result.Body)
	}
}

func TestErrorsAreClassified(t *testing.T) {
	t.Parallel()
	// Not started: nothing is sent, the jobs stay queued.
	aq, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true,
		Tenants: []aquifer.Tenant{{Name: "small", MaxQueued: 1}, {Name: "other"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = aq.Stop(context.Background()) })
	ctx := t.Context()
	small := aquifer.WithTenant(ctx, "small")

	_, err = aq.Enqueue(small, &aquifer.JobRequest{UserID: "u", IdempotentKey: "k", URL: "http://127.0.0.1:1/a", Method: "B@D"})
	if aquifer.ErrorCode(err) != aquifer.CodeInvalid || aquifer.ErrorField(err) != "method" {
		t.Errorf("bad method: code %q field %q (%v)", aquifer.ErrorCode(err), aquifer.ErrorField(err), err)
	}
	first, err := aq.Enqueue(small, &aquifer.JobRequest{UserID: "u", IdempotentKey: "1", URL: "http://127.0.0.1:1/a"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = aq.Enqueue(small, &aquifer.JobRequest{UserID: "u", IdempotentKey: "2", URL: "http://127.0.0.1:1/b"})
	if aquifer.ErrorCode(err) != aquifer.CodeRejected {
		t.Errorf("over quota: %v, want %s", err, aquifer.CodeRejected)
	}
	if d, ok := aquifer.RetryAfter(err); !ok || d <= 0 {
		t.Errorf("over quota: RetryAfter %v %v", d, ok)
	}

	// Tenants see only their own jobs; the operator sees all.
	if _, err := aq.Get(aquifer.WithTenant(ctx, "other"), first.JobID); !aquifer.IsNotFound(err) || !errors.Is(err, aquifer.ErrNotFound) {
		t.Errorf("another tenant's job: %v, want not found", err)
	}
	if _, err := aq.Get(ctx, first.JobID); err != nil {
		t.Errorf("operator: %v", err)
	}
	if _, err := aq.Get(ctx, aquifer.JobID(strings.Repeat("0", 32))); !aquifer.IsNotFound(err) {
		t.Errorf("unknown job: %v", err)
	}

	// Cancel a queued job; the second cancel conflicts.
	j, err := aq.Cancel(small, first.JobID)
	if err != nil || j.Status != aquifer.StatusFailed || j.Result.Reason != "canceled" {
		t.Fatalf("cancel: %+v, %v", j, err)
	}
	if _, err := aq.Cancel(small, first.JobID); aquifer.ErrorCode(err) != aquifer.CodeConflict {
		t.Errorf("second cancel: %v, want %s", err, aquifer.CodeConflict)
	}
	if got := aquifer.ErrorMessage(errors.New("secret detail")); got != "internal error" {
		t.Errorf("ErrorMessage of an unclassified error: %q", got)
	}
	if aquifer.ErrorCode(nil) != "" || aquifer.ErrorCode(errors.New("x")) != aquifer.CodeInternal {
		t.Error("ErrorCode of nil or an unknown error")
	}
}

func TestWaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	t.Cleanup(stuck.Close)
	aq := start(t, aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true})
	t.Cleanup(func() { close(release) }) // runs first: Stop then finds the attempt done
	res, err := aq.Enqueue(t.Context(), &aquifer.JobRequest{UserID: "u", IdempotentKey: "k", URL: stuck.URL + "/never",
		Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	// The destination does not answer until the test ends.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := aq.Wait(ctx, res.JobID); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait: %v, want its context's error", err)
	}
}

func TestPrometheusMetricsAreServed(t *testing.T) {
	t.Parallel()
	dest := echo(t)
	prom := aquifer.NewPrometheusMetrics(aquifer.PrometheusOptions{NoRuntimeCollectors: true})
	aq := start(t, aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true, Metrics: prom,
		Rates: aquifer.RateTable{Defaults: aquifer.Rate{RPS: 50, MaxConcurrent: 2}}})
	for i := range 3 {
		res, err := aq.Enqueue(t.Context(), &aquifer.JobRequest{UserID: "u", IdempotentKey: fmt.Sprint(i), URL: dest.URL + "/m"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := aq.Wait(t.Context(), res.JobID); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(aq.Handler(aquifer.HTTPOptions{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	lane := dest.URL // the upstream label is the lane: scheme://host:port
	for _, want := range []string{
		fmt.Sprintf(`aquifer_jobs_accepted_total{upstream=%q} 3`, lane),
		fmt.Sprintf(`aquifer_jobs_finished_total{status="completed",upstream=%q} 3`, lane),
		"aquifer_store_up 1",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
	// One PrometheusMetrics serves one Aquifer.
	if _, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true, Metrics: prom}); err == nil {
		t.Error("a second Aquifer shared the PrometheusMetrics")
	}
}

func TestL8KeyPathSignsWithAKeptKey(t *testing.T) {
	t.Parallel()
	keyPath := filepath.Join(t.TempDir(), "keys", "l8.key")
	publicKey := func() string {
		aq, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true,
			L8: aquifer.L8Options{KeyPath: keyPath}})
		if err != nil {
			t.Fatal(err)
		}
		defer aq.Stop(t.Context())
		return aq.Health(t.Context()).L8PublicKey
	}
	first := publicKey()
	if first == "" {
		t.Fatal("no L8 public key in Health with a KeyPath")
	}
	if fi, err := os.Stat(keyPath); err != nil || fi.Size() != ed25519.PrivateKeySize || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", fi, err)
	}
	if again := publicKey(); again != first {
		t.Errorf("restart changed the key: %s, then %s", first, again)
	}
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	priv[40] ^= 1 // the public half no longer matches the seed
	if _, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true,
		L8: aquifer.L8Options{PrivateKey: priv}}); err == nil || !strings.Contains(err.Error(), "L8.PrivateKey") {
		t.Errorf("an inconsistent key: %v", err)
	}
	aq, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true})
	if err != nil {
		t.Fatal(err)
	}
	defer aq.Stop(t.Context())
	if k := aq.Health(t.Context()).L8PublicKey; k != "" {
		t.Errorf("signing is on without a key: %s", k)
	}
}

func TestHTTPAdapter(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	clash := aquifer.NewHTTPAdapter(taken.Addr().String(), aquifer.HTTPOptions{})
	aq, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true, Adapters: []aquifer.Adapter{clash}})
	if err != nil {
		t.Fatal(err)
	}
	if err := aq.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "start adapter http: listen on") {
		t.Errorf("Start on a taken port: %v", err)
	}

	front := aquifer.NewHTTPAdapter("127.0.0.1:0", aquifer.HTTPOptions{PoolToken: "s3cret"})
	if front.Addr() != nil {
		t.Error("Addr before Start")
	}
	start(t, aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true, Adapters: []aquifer.Adapter{front}})
	base := "http://" + front.Addr().String()
	for path, want := range map[string]int{"/health": 200, "/jobs/nope": 404, "/nowhere": 404, "/metrics": 404} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Post(base+"/pools/p/members", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("pool registration without the pool token: %d, want 401", resp.StatusCode)
	}
}
