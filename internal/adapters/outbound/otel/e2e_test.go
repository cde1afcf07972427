package oteltrace_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	oteltrace "github.com/aquiferhq/aquifer/internal/adapters/outbound/otel"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/clocktest"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// TestMain fails the package if a test leaves goroutines behind (the
// batch span processor and the exporter's connections included).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// The submitter's trace context (the W3C spec's example).
const (
	submitterTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	submitterSpan  = "00f067aa0ba902b7"
	submitterTS    = "vendor=abc"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// recorder is an HTTP server (a job's target, or a webhook receiver) that
// records the W3C headers of each request and answers with the status
// answer picks for the 1-based request n.
type recorder struct {
	*httptest.Server
	mu      sync.Mutex
	parents []string
	states  []string
}

func newRecorder(t *testing.T, answer func(n int) int) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.parents = append(rec.parents, r.Header.Get("traceparent"))
		rec.states = append(rec.states, r.Header.Get("tracestate"))
		n := len(rec.parents)
		rec.mu.Unlock()
		w.WriteHeader(answer(n))
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (r *recorder) seen() (parents, states []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.parents...), append([]string(nil), r.states...)
}

// rig is a real service on a fake clock with the OTLP tracer exporting to
// an in-test collector.
type rig struct {
	svc    *app.Service
	drv    *clocktest.Driver
	clk    *clocktest.Clock
	tracer *oteltrace.Tracer
	coll   *collector
	client *http.Client
}

func newRig(t *testing.T) *rig {
	t.Helper()
	coll := newCollector(t)
	ctx := context.Background()
	tracer, err := oteltrace.New(ctx, oteltrace.Options{Endpoint: coll.TracesURL(), ServiceName: "aquiferd-test",
		ServiceVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.New(t0)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	svc, err := app.New(app.Config{
		Store:  memory.New(clk.Now),
		Doer:   clk.Doer(client),
		Clock:  clk,
		Rates:  app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 4}},
		Retry:  app.RetryPolicy{Attempts: 3, Backoff: []time.Duration{time.Second}},
		Tracer: tracer,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r := &rig{svc: svc, drv: clocktest.NewDriver(t, clk), clk: clk, tracer: tracer, coll: coll, client: client}
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops the service and then flushes the tracer, as aquiferd does:
// every span the service ended is at the collector when it returns.
func (r *rig) stop(t *testing.T) {
	t.Helper()
	if r.svc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.svc.Stop(ctx); err != nil {
		t.Errorf("stop service: %v", err)
	}
	if err := r.tracer.Shutdown(ctx); err != nil {
		t.Errorf("shut the tracer down: %v", err)
	}
	r.client.CloseIdleConnections()
	r.svc = nil
}

// waitDone moves the clock until job id is terminal and its webhook (if
// any) is no longer pending.
func (r *rig) waitDone(t *testing.T, id domain.JobID) *domain.Job {
	t.Helper()
	var j *domain.Job
	r.drv.Until("job "+string(id)+" done", func() bool {
		var err error
		j, err = r.svc.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("get job: %v", err)
		}
		return j.Status.Terminal() && (j.Delivery == nil || j.Delivery.Status != domain.DeliveryPending)
	})
	return j
}

func one(t *testing.T, c *collector, name string) *tracepb.Span {
	t.Helper()
	spans := c.named(name)
	if len(spans) != 1 {
		t.Fatalf("collector got %d %s spans, want 1", len(spans), name)
	}
	return spans[0]
}

func unixNano(tm time.Time) uint64 { return uint64(tm.UnixNano()) }

// TestSpansReachACollectorWithTheRightStructure runs a job with a webhook
// from a submitter's trace through a real service and checks, at a real
// OTLP receiver, the structure the messaging conventions ask for: enqueue
// under the submitter, each attempt and delivery under enqueue, the wait
// a root of its own linked to enqueue; and that the target and the
// receiver continue the submitter's trace under the attempt's span.
func TestSpansReachACollectorWithTheRightStructure(t *testing.T) {
	target := newRecorder(t, func(int) int { return http.StatusOK })
	receiver := newRecorder(t, func(int) int { return http.StatusNoContent })
	r := newRig(t)

	res, err := r.svc.Enqueue(context.Background(), &domain.JobRequest{
		UserID: "u", IdempotentKey: "k1", URL: target.URL + "/work?token=s3cret", Method: "POST", Body: "{}",
		WebhookURL: receiver.URL + "/hook",
		Options: domain.OptionsRequest{TraceParent: "00-" + submitterTrace + "-" + submitterSpan + "-01",
			TraceState: submitterTS},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := r.waitDone(t, res.JobID)
	if done.Status != domain.StatusCompleted || done.Delivery.Status != domain.DeliveryDelivered {
		t.Fatalf("job %s, delivery %s; want completed and delivered", done.Status, done.Delivery.Status)
	}
	r.stop(t)
	c := r.coll

	enq := one(t, c, oteltrace.SpanEnqueue)
	if traceID(enq) != submitterTrace || parentID(enq) != submitterSpan {
		t.Errorf("enqueue span in trace %s under %s, want trace %s under the submitter's span %s",
			traceID(enq), parentID(enq), submitterTrace, submitterSpan)
	}
	if enq.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Errorf("enqueue kind %v, want producer", enq.GetKind())
	}
	if got := attrString(enq.GetAttributes(), "messaging.message.id"); got != string(res.JobID) {
		t.Errorf("enqueue messaging.message.id %q, want %s", got, res.JobID)
	}
	if got := attrString(enq.GetAttributes(), "messaging.destination.name"); got != string(done.Queue) {
		t.Errorf("enqueue messaging.destination.name %q, want the job's queue %s", got, done.Queue)
	}
	if dup, ok := attrBool(enq.GetAttributes(), "aquifer.duplicate"); !ok || dup {
		t.Errorf("enqueue aquifer.duplicate %v (present %v), want false", dup, ok)
	}
	if enq.GetStartTimeUnixNano() != unixNano(t0) {
		t.Errorf("enqueue started at %d, want the service clock's %d", enq.GetStartTimeUnixNano(), unixNano(t0))
	}
	if got := c.serviceOf(enq); got != "aquiferd-test" {
		t.Errorf("resource service.name %q, want aquiferd-test", got)
	}
	// What the job stored is the enqueue span's context.
	if want := "00-" + submitterTrace + "-" + spanID(enq) + "-01"; done.TraceParent != want || done.TraceState != submitterTS {
		t.Errorf("job stored %q / %q, want %q / %q", done.TraceParent, done.TraceState, want, submitterTS)
	}

	disp := one(t, c, oteltrace.SpanDispatch)
	if traceID(disp) != submitterTrace || parentID(disp) != spanID(enq) {
		t.Errorf("dispatch span in trace %s under %s, want under the enqueue span %s", traceID(disp), parentID(disp), spanID(enq))
	}
	if disp.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("dispatch kind %v, want client", disp.GetKind())
	}
	if got, _ := attrInt(disp.GetAttributes(), "http.response.status_code"); got != 200 {
		t.Errorf("dispatch http.response.status_code %d, want 200", got)
	}
	if got := attrString(disp.GetAttributes(), "url.full"); got != target.URL+"/work?token="+domain.Redacted {
		t.Errorf("dispatch url.full %q, want the URL with its token redacted", got)
	}
	if disp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("dispatch status %v, want no error", disp.GetStatus())
	}
	parents, states := target.seen()
	if len(parents) != 1 {
		t.Fatalf("target got %d requests, want 1", len(parents))
	}
	if want := "00-" + submitterTrace + "-" + spanID(disp) + "-01"; parents[0] != want || states[0] != submitterTS {
		t.Errorf("target saw traceparent %q tracestate %q, want %q %q (the submitter's trace under the dispatch span)",
			parents[0], states[0], want, submitterTS)
	}

	hook := one(t, c, oteltrace.SpanWebhook)
	if traceID(hook) != submitterTrace || parentID(hook) != spanID(enq) {
		t.Errorf("webhook span in trace %s under %s, want under the enqueue span %s", traceID(hook), parentID(hook), spanID(enq))
	}
	if got, _ := attrInt(hook.GetAttributes(), "http.response.status_code"); got != 204 {
		t.Errorf("webhook http.response.status_code %d, want 204", got)
	}
	parents, _ = receiver.seen()
	if len(parents) != 1 {
		t.Fatalf("receiver got %d deliveries, want 1", len(parents))
	}
	if want := "00-" + submitterTrace + "-" + spanID(hook) + "-01"; parents[0] != want {
		t.Errorf("receiver saw traceparent %q, want %q (the submitter's trace under the webhook span)", parents[0], want)
	}

	wait := one(t, c, oteltrace.SpanWait)
	if len(wait.GetParentSpanId()) != 0 {
		t.Errorf("wait span has parent %s, want none", parentID(wait))
	}
	if traceID(wait) == submitterTrace {
		t.Error("wait span is in the job's trace; want a root of its own")
	}
	links := wait.GetLinks()
	if len(links) != 1 || hexOf(links[0].GetTraceId()) != submitterTrace || hexOf(links[0].GetSpanId()) != spanID(enq) {
		t.Errorf("wait span links %v, want one link to the enqueue span %s", links, spanID(enq))
	}
	if wait.GetStartTimeUnixNano() != unixNano(done.DueAt()) || wait.GetEndTimeUnixNano() != disp.GetStartTimeUnixNano() {
		t.Errorf("wait span %d..%d, want due (%d) to the first attempt (%d)", wait.GetStartTimeUnixNano(),
			wait.GetEndTimeUnixNano(), unixNano(done.DueAt()), disp.GetStartTimeUnixNano())
	}
}

// TestRetriedAttemptsAreSiblingSpans fails the first attempt with a 503:
// two dispatch spans under the enqueue span, the first with error status,
// the second starting the backoff (on the service's clock) after the first
// ended; the target sees each under its own span; one wait span only.
func TestRetriedAttemptsAreSiblingSpans(t *testing.T) {
	target := newRecorder(t, func(n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	r := newRig(t)
	res, err := r.svc.Enqueue(context.Background(), &domain.JobRequest{
		UserID: "u", IdempotentKey: "k2", URL: target.URL, Method: "GET",
		Options: domain.OptionsRequest{TraceParent: "00-" + submitterTrace + "-" + submitterSpan + "-01"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if done := r.waitDone(t, res.JobID); done.Status != domain.StatusCompleted || done.Attempts != 2 {
		t.Fatalf("job %s after %d attempts, want completed after 2", done.Status, done.Attempts)
	}
	r.stop(t)
	c := r.coll

	enq := one(t, c, oteltrace.SpanEnqueue)
	disp := c.named(oteltrace.SpanDispatch)
	if len(disp) != 2 {
		t.Fatalf("collector got %d dispatch spans, want 2", len(disp))
	}
	for i, s := range disp {
		if parentID(s) != spanID(enq) || traceID(s) != submitterTrace {
			t.Errorf("attempt %d span under %s in %s, want under the enqueue span %s", i+1, parentID(s), traceID(s), spanID(enq))
		}
		if n, _ := attrInt(s.GetAttributes(), "aquifer.attempt"); n != int64(i+1) {
			t.Errorf("span %d: aquifer.attempt %d", i+1, n)
		}
	}
	first, second := disp[0], disp[1]
	if st := first.GetStatus(); st.GetCode() != tracepb.Status_STATUS_CODE_ERROR || st.GetMessage() != "upstream returned 503" {
		t.Errorf("first attempt status %v, want error \"upstream returned 503\"", st)
	}
	if got, _ := attrInt(first.GetAttributes(), "http.response.status_code"); got != 503 {
		t.Errorf("first attempt http.response.status_code %d, want 503", got)
	}
	if got := attrString(first.GetAttributes(), "error.type"); got != "503" {
		t.Errorf("first attempt error.type %q, want 503", got)
	}
	if st := second.GetStatus(); st.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("second attempt status %v, want no error", st)
	}
	if gap := time.Duration(second.GetStartTimeUnixNano() - first.GetEndTimeUnixNano()); gap != time.Second {
		t.Errorf("second attempt began %v after the first ended, want the 1s backoff", gap)
	}
	parents, _ := target.seen()
	if len(parents) != 2 {
		t.Fatalf("target got %d requests, want 2", len(parents))
	}
	for i, s := range disp {
		if want := "00-" + submitterTrace + "-" + spanID(s) + "-01"; parents[i] != want {
			t.Errorf("request %d carried %q, want %q", i+1, parents[i], want)
		}
	}
	if waits := c.named(oteltrace.SpanWait); len(waits) != 1 {
		t.Errorf("collector got %d wait spans, want 1 (the wait before the first attempt)", len(waits))
	}
	if len(c.named(oteltrace.SpanWebhook)) != 0 {
		t.Error("a job without webhook_url has a webhook span")
	}
}

// TestUntracedJobsGetARootTrace submits without a traceparent, and again
// (a duplicate): with the exporter on every job is traced from its
// enqueue, and the duplicate's enqueue span says so.
func TestUntracedJobsGetARootTrace(t *testing.T) {
	target := newRecorder(t, func(int) int { return http.StatusOK })
	r := newRig(t)
	req := func() *domain.JobRequest {
		return &domain.JobRequest{UserID: "u", IdempotentKey: "k3", URL: target.URL, Method: "POST"}
	}
	res, err := r.svc.Enqueue(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	r.waitDone(t, res.JobID)
	again, err := r.svc.Enqueue(context.Background(), req())
	if err != nil || !again.Duplicate {
		t.Fatalf("second submission: %+v %v, want a duplicate", again, err)
	}
	r.stop(t)
	c := r.coll

	enqs := c.named(oteltrace.SpanEnqueue)
	if len(enqs) != 2 {
		t.Fatalf("collector got %d enqueue spans, want 2", len(enqs))
	}
	root := enqs[0]
	if len(root.GetParentSpanId()) != 0 {
		t.Errorf("enqueue of an untraced job has parent %s, want a root", parentID(root))
	}
	if dup, _ := attrBool(root.GetAttributes(), "aquifer.duplicate"); dup {
		t.Error("first submission marked duplicate")
	}
	if dup, _ := attrBool(enqs[1].GetAttributes(), "aquifer.duplicate"); !dup {
		t.Error("second submission not marked duplicate")
	}
	disp := one(t, c, oteltrace.SpanDispatch)
	if traceID(disp) != traceID(root) || parentID(disp) != spanID(root) {
		t.Errorf("dispatch span under %s in %s, want under the root enqueue span %s", parentID(disp), traceID(disp), spanID(root))
	}
	parents, _ := target.seen()
	if want := "00-" + traceID(root) + "-" + spanID(disp) + "-01"; len(parents) != 1 || parents[0] != want {
		t.Errorf("target saw %q, want [%s]", parents, want)
	}
}
