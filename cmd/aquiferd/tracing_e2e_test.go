package main

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpCollector is an OTLP/HTTP trace receiver: it decodes each POST
// /v1/traces and keeps the spans, with the service.name they came under.
type otlpCollector struct {
	*httptest.Server
	mu      sync.Mutex
	posts   int
	spans   []*tracepb.Span
	service []string
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	t.Helper()
	c := &otlpCollector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(raw, &req) != nil {
			t.Errorf("collector: %s %s is not an OTLP/HTTP protobuf export", r.Method, r.URL.Path)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.posts++
		for _, rs := range req.GetResourceSpans() {
			svc := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					svc = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					c.spans, c.service = append(c.spans, s), append(c.service, svc)
				}
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.Close)
	return c
}

// byName returns the spans named name and the service.name of the first.
func (c *otlpCollector) byName(name string) ([]*tracepb.Span, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	svc := ""
	for i, s := range c.spans {
		if s.GetName() == name {
			if out == nil {
				svc = c.service[i]
			}
			out = append(out, s)
		}
	}
	return out, svc
}

// runDaemonOnce runs aquiferd in this process with env, submits one job to
// target and waits until target has it, then stops the daemon and waits
// for Run to return: everything it flushes at shutdown has arrived then.
// It returns the daemon's logs.
func runDaemonOnce(t *testing.T, env map[string]string, targetURL string, hits func() int) string {
	t.Helper()
	port := freePort(t)
	env["PORT"] = strconv.Itoa(port)
	env["AQUIFER_DATA_DIR"] = t.TempDir()
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard, logs)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), `"aquiferd started`) {
		select {
		case err := <-done:
			t.Fatalf("Run returned before starting: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the daemon did not start:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Post("http://127.0.0.1:"+env["PORT"]+"/jobs", "application/json",
		strings.NewReader(`{"user_id":"u","idempotent_key":"trace-1","url":"`+targetURL+`/work","method":"POST"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /jobs: %d", resp.StatusCode)
	}
	for hits() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the job never reached the target:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop within 30s")
	}
	return logs.String()
}

// TestTracingExportsSpansToTheConfiguredCollector runs aquiferd with
// AQUIFER_OTEL_EXPORTER=otlp: the spans of a job reach the collector
// named by AQUIFER_OTEL_ENDPOINT (flushed at shutdown at the latest),
// under AQUIFER_OTEL_SERVICE_NAME, and the target continues their trace.
func TestTracingExportsSpansToTheConfiguredCollector(t *testing.T) {
	t.Parallel()
	coll := newOTLPCollector(t)
	var mu sync.Mutex
	var parents []string
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parents = append(parents, r.Header.Get("traceparent"))
		mu.Unlock()
	}))
	defer target.Close()
	hits := func() int { mu.Lock(); defer mu.Unlock(); return len(parents) }

	logs := runDaemonOnce(t, map[string]string{"AQUIFER_OTEL_EXPORTER": "otlp", "AQUIFER_OTEL_ENDPOINT": coll.URL,
		"AQUIFER_OTEL_SERVICE_NAME": "aquiferd-e2e"}, target.URL, hits)
	if !strings.Contains(logs, `"tracing: exporting spans over OTLP/HTTP"`) || !strings.Contains(logs, coll.URL+"/v1/traces") {
		t.Errorf("the logs do not say where spans go:\n%s", logs)
	}

	enq, svc := coll.byName("aquifer.enqueue")
	disp, _ := coll.byName("aquifer.dispatch")
	waits, _ := coll.byName("aquifer.wait")
	if len(enq) != 1 || len(disp) != 1 || len(waits) != 1 {
		t.Fatalf("collector got %d enqueue, %d dispatch, %d wait spans; want one each", len(enq), len(disp), len(waits))
	}
	if svc != "aquiferd-e2e" {
		t.Errorf("service.name %q, want aquiferd-e2e", svc)
	}
	traceID, dispID := hex.EncodeToString(enq[0].GetTraceId()), hex.EncodeToString(disp[0].GetSpanId())
	if got := hex.EncodeToString(disp[0].GetParentSpanId()); got != hex.EncodeToString(enq[0].GetSpanId()) {
		t.Errorf("dispatch span under %s, want under the enqueue span", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "00-" + traceID + "-" + dispID + "-01"; parents[0] != want {
		t.Errorf("target saw traceparent %q, want %q", parents[0], want)
	}
}

// TestTracingOffSendsNothing: with the exporter off (the default) nothing
// is exported, even with the SDK's endpoint variable pointing at a
// collector, and a job without trace context goes out without one.
func TestTracingOffSendsNothing(t *testing.T) {
	t.Parallel()
	coll := newOTLPCollector(t)
	var mu sync.Mutex
	var parents []string
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parents = append(parents, r.Header.Get("traceparent"))
		mu.Unlock()
	}))
	defer target.Close()
	hits := func() int { mu.Lock(); defer mu.Unlock(); return len(parents) }

	logs := runDaemonOnce(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": coll.URL}, target.URL, hits)
	if strings.Contains(logs, "tracing: exporting spans") {
		t.Errorf("tracing is off but the logs say spans are exported:\n%s", logs)
	}
	coll.mu.Lock()
	posts := coll.posts
	coll.mu.Unlock()
	if posts != 0 {
		t.Errorf("collector got %d exports with tracing off", posts)
	}
	mu.Lock()
	defer mu.Unlock()
	if parents[0] != "" {
		t.Errorf("target saw traceparent %q for a job without trace context, want none", parents[0])
	}
}
