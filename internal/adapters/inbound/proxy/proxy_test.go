package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/proxy"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

const wait = 10 * time.Second

// target is a scripted upstream: answer decides each response from the
// 1-based request number.
type target struct {
	*httptest.Server
	n      atomic.Int64
	answer func(w http.ResponseWriter, r *http.Request, n int64)
}

func newTarget(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, n int64)) *target {
	t.Helper()
	tg := &target{answer: answer}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := tg.n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		tg.answer(w, r, n)
	}))
	t.Cleanup(tg.Close)
	return tg
}

type env struct {
	svc *app.Service
	srv *httptest.Server
	h   *proxy.Handler
}

func newEnv(t *testing.T, mutate func(*app.Config)) *env {
	t.Helper()
	cfg := app.Config{
		Store: memory.New(nil),
		Doer:  &http.Client{Transport: &http.Transport{DisableCompression: true}},
		Rates: app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 4}},
		Retry: app.RetryPolicy{Attempts: 3, Backoff: []time.Duration{20 * time.Millisecond}},
		Proxy: app.ProxyConfig{DirectTimeout: 300 * time.Millisecond, DefaultCooldown: 50 * time.Millisecond, BreakerMultiplier: 0.1},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	svc, err := app.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := proxy.New(svc, proxy.Options{MaxBodyBytes: 4096, KeepAlive: time.Second})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.CloseStreams()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = svc.Stop(ctx)
		cfg.Doer.(*http.Client).CloseIdleConnections()
	})
	return &env{svc: svc, srv: srv, h: h}
}

func job(key, url string) string {
	return fmt.Sprintf(`{"user_id":"u","idempotent_key":%q,"url":%q,"method":"POST","body":"payload"}`, key, url)
}

func (e *env) post(t *testing.T, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(e.srv.URL, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

type frame struct {
	event string
	data  map[string]any
}

// frames reads an SSE body to its end.
func frames(t *testing.T, resp *http.Response) []frame {
	t.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("want an SSE stream, got %d %q: %s", resp.StatusCode, ct, b)
	}
	var out []frame
	sc := bufio.NewScanner(resp.Body)
	var cur frame
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("bad data line %q: %v", line, err)
			}
		case line == "" && cur.event != "":
			out = append(out, cur)
			cur = frame{}
		}
	}
	return out
}

func requireFallback(t *testing.T, fs []frame, reason string, upstreamStatus int, final string) string {
	t.Helper()
	if len(fs) == 0 || fs[0].event != "proxy_fallback" {
		t.Fatalf("frames %v: want proxy_fallback first", fs)
	}
	if fs[0].data["reason"] != reason {
		t.Fatalf("fallback reason %v, want %s", fs[0].data["reason"], reason)
	}
	got, _ := fs[0].data["upstream_status"].(float64)
	if int(got) != upstreamStatus {
		t.Fatalf("upstream_status %v, want %d", fs[0].data["upstream_status"], upstreamStatus)
	}
	if last := fs[len(fs)-1]; last.event != final {
		t.Fatalf("stream ended with %v, want %s", fs, final)
	}
	id, _ := fs[0].data["job_id"].(string)
	return id
}

func TestDirectSuccessIsRelayedVerbatim(t *testing.T) {
	body := []byte("\x00\x01binary\xffbody")
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request, _ int64) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Custom", "a")
		w.Header().Add("X-Custom", "b")
		w.Header().Set("Set-Cookie", "s=1")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(body)
	})
	e := newEnv(t, nil)
	resp := e.post(t, job("d1", tg.URL+"/x"))
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || !bytes.Equal(got, body) {
		t.Fatalf("relayed %d %q, want 202 %q", resp.StatusCode, got, body)
	}
	if h := resp.Header.Values("X-Custom"); len(h) != 2 || h[0] != "a" || h[1] != "b" || resp.Header.Get("Set-Cookie") != "s=1" ||
		resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("headers not relayed verbatim: %v", resp.Header)
	}
	id := domain.JobID(resp.Header.Get(proxy.HeaderJobID))
	j, err := e.svc.Get(t.Context(), id)
	if err != nil || j.Status != domain.StatusCompleted || j.Result.ResponseStatus != 202 || !bytes.Equal(j.Result.Body, body) {
		t.Fatalf("job after a direct success: %+v %v", j, err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := tg.n.Load(); n != 1 {
		t.Fatalf("upstream got %d requests; a direct success must not also go through the queue", n)
	}
	// A 4xx is a direct answer too.
	tg.answer = func(w http.ResponseWriter, _ *http.Request, _ int64) { http.Error(w, "nope", http.StatusNotFound) }
	resp = e.post(t, job("d2", tg.URL+"/x"))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a 404 was not relayed: %d", resp.StatusCode)
	}
}

func TestOverloadFallsBack(t *testing.T) {
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + closed.Addr().String()
	closed.Close()
	cases := []struct {
		name     string
		first    func(w http.ResponseWriter, r *http.Request)
		reason   string
		upstream int
	}{
		{"429", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		}, app.FallbackOverloaded, 429},
		{"503", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }, app.FallbackOverloaded, 503},
		{"500", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }, app.FallbackOverloaded, 500},
		{"orca", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Endpoint-Load-Metrics", "TEXT named_metrics.kv_cache_utilization=0.85")
			w.WriteHeader(http.StatusOK)
		}, app.FallbackOverloaded, 200},
		{"timeout", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(time.Second):
			case <-r.Context().Done():
			}
		}, app.FallbackUnreachable, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				if n == 1 {
					c.first(w, r)
					return
				}
				fmt.Fprint(w, "later ok")
			})
			e := newEnv(t, nil)
			resp := e.post(t, job("o-"+c.name, tg.URL+"/x"))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("fallback status %d", resp.StatusCode)
			}
			id := requireFallback(t, frames(t, resp), c.reason, c.upstream, "completed")
			j, err := e.svc.Get(t.Context(), domain.JobID(id))
			if err != nil || string(j.Result.Body) != "later ok" {
				t.Fatalf("the queued job's result: %+v %v", j, err)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		e := newEnv(t, func(c *app.Config) { c.Retry.Attempts = 1 })
		resp := e.post(t, job("dead", deadURL+"/x"))
		requireFallback(t, frames(t, resp), app.FallbackUnreachable, 0, "failed")
	})
}

func TestQueueModeLastsUntilTheBacklogDrains(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request, n int64) {
		switch n {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable) // overloaded: breaker opens for 50 ms
		case 2:
			<-release // the queued job holds the backlog
			fmt.Fprint(w, "queued ok")
		default:
			fmt.Fprint(w, "direct ok")
		}
	})
	e := newEnv(t, func(c *app.Config) {
		c.Rates = app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 1}}
	})
	defer once.Do(func() { close(release) })

	first := e.post(t, job("q1", tg.URL+"/x"))
	done := make(chan []frame, 1)
	go func() { done <- frames(t, first) }()
	deadline := time.Now().Add(wait)
	for tg.n.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the fallback job never reached the upstream")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // well past the 50 ms breaker: only the backlog keeps queue mode on

	second := e.post(t, job("q2", tg.URL+"/x"))
	if ph := e.svc.Health(t.Context()).Proxy[tg.URL]; ph.Mode != "queue" || !ph.Backlog || ph.BreakerUntilMS != 0 {
		t.Fatalf("/health proxy mode %+v: want queue mode held by the backlog alone", ph)
	}
	once.Do(func() { close(release) })
	requireFallback(t, <-done, app.FallbackOverloaded, 503, "completed")
	requireFallback(t, frames(t, second), app.FallbackDegraded, 0, "completed")

	// Drained, breaker closed: direct again.
	deadline = time.Now().Add(wait)
	for {
		resp := e.post(t, job(fmt.Sprint("q3-", time.Now().UnixNano()), tg.URL+"/x"))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && string(b) == "direct ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the destination never left queue mode after its backlog drained: %d %s", resp.StatusCode, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestQueueActiveHeaderAsksForQueuing(t *testing.T) {
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request, n int64) {
		if n == 1 {
			w.Header().Set("X-Aqueduct-Queue-Active", "true")
		}
		fmt.Fprint(w, "ok")
	})
	e := newEnv(t, func(c *app.Config) { c.Proxy.DefaultCooldown = time.Minute })
	resp := e.post(t, job("qa1", tg.URL+"/x"))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "ok" {
		t.Fatalf("the answer asking for queuing was not relayed: %d %s", resp.StatusCode, b)
	}
	requireFallback(t, frames(t, e.post(t, job("qa2", tg.URL+"/x"))), app.FallbackDegraded, 0, "completed")
}

func TestProxyDuplicatesAndPools(t *testing.T) {
	release := make(chan struct{})
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request, n int64) {
		if n == 2 {
			<-release
		}
		fmt.Fprint(w, "ok")
	})
	e := newEnv(t, func(c *app.Config) {
		c.Rates = app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 1}}
	})
	resp := e.post(t, job("dup", tg.URL+"/x"))
	resp.Body.Close()
	resp = e.post(t, job("dup", tg.URL+"/x"))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if resp.StatusCode != http.StatusOK || m["duplicate"] != true || m["status"] != "completed" {
		t.Fatalf("duplicate of a finished job: %d %s", resp.StatusCode, b)
	}

	// A duplicate of a job still running streams that job.
	slow := make(chan *http.Response, 1)
	go func() { slow <- e.post(t, job("dup2", tg.URL+"/x")) }()
	deadline := time.Now().Add(wait)
	for tg.n.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("second job never arrived")
		}
		time.Sleep(5 * time.Millisecond)
	}
	again := e.post(t, job("dup2", tg.URL+"/x"))
	close(release)
	fs := frames(t, again)
	if len(fs) == 0 || fs[0].event != "queued" || fs[len(fs)-1].event != "completed" {
		t.Fatalf("duplicate of a running job: frames %v", fs)
	}
	r := <-slow
	r.Body.Close()

	// A pool job never goes direct. (No member: it waits; read the first frame only.)
	pool := e.post(t, `{"user_id":"u","idempotent_key":"p1","pool_id":"nobody"}`)
	defer pool.Body.Close()
	br := bufio.NewReader(pool.Body)
	l1, _ := br.ReadString('\n')
	l2, _ := br.ReadString('\n')
	if l1 != "event: proxy_fallback\n" || !strings.Contains(l2, `"reason":"pool_routed"`) {
		t.Fatalf("pool job: %q %q", l1, l2)
	}
}

func TestProxyBadInput(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		body   string
		status int
	}{
		{`{`, http.StatusBadRequest},
		{`{"user_id":"u","idempotent_key":"k"}`, http.StatusBadRequest},
		{`{"user_id":"u","idempotent_key":"k","url":"ftp://x"}`, http.StatusBadRequest},
		{`{"user_id":"u","idempotent_key":"k","url":"http://a.test","body":"` + strings.Repeat("x", 5000) + `"}`, http.StatusRequestEntityTooLarge},
	} {
		resp := e.post(t, c.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]any
		if resp.StatusCode != c.status || json.Unmarshal(b, &m) != nil || m["error"] == nil {
			t.Errorf("%.40s: %d %s, want %d with an error", c.body, resp.StatusCode, b, c.status)
		}
	}
	resp, err := http.Get(e.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /proxy: %d", resp.StatusCode)
	}
}

func TestProxiedJobContinuesTheCallersTrace(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	seen := make(chan string, 1)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		seen <- r.Header.Get("Traceparent")
		w.WriteHeader(http.StatusOK)
	})
	e := newEnv(t, nil)
	req, err := http.NewRequest(http.MethodPost, e.srv.URL, strings.NewReader(job("traced", tg.URL+"/x")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Traceparent", parent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := <-seen
	if len(got) != 55 || got[3:35] != parent[3:35] || got[36:52] == parent[36:52] {
		t.Fatalf("target saw traceparent %q; want the caller's trace (%s) with a span of its own", got, parent[3:35])
	}
	j, err := e.svc.Get(t.Context(), domain.JobID(resp.Header.Get(proxy.HeaderJobID)))
	if err != nil || j.TraceParent != parent {
		t.Fatalf("stored trace context %q, %v; want the caller's", j.TraceParent, err)
	}
}

func TestProxyRefusesSchedulingOptions(t *testing.T) {
	tg := newTarget(t, nil)
	e := newEnv(t, nil)
	for field, extra := range map[string]string{"delay_seconds": `,"delay_seconds":5`, "not_before": `,"not_before":"2099-01-01T00:00:00Z"`} {
		body := strings.TrimSuffix(job("sched-"+field, tg.URL+"/x"), "}") + extra + "}"
		resp := e.post(t, body)
		var out struct {
			Error, Field string
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || out.Field != field {
			t.Fatalf("%s: %d %+v, want 400 naming the field", field, resp.StatusCode, out)
		}
	}
	if n := tg.n.Load(); n != 0 {
		t.Fatalf("target got %d requests", n)
	}
}
