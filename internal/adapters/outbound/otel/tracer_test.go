package oteltrace

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// The submitter's context the tests start from (the W3C spec's example).
const (
	submitterTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	submitterSpan  = "00f067aa0ba902b7"
	submitterTP    = "00-" + submitterTrace + "-" + submitterSpan + "-01"
	submitterTS    = "vendor=abc,other=1"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// newTestTracer is a tracer whose spans are recorded in memory as they end.
func newTestTracer(t *testing.T) (*Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tr := newTracer(sdktrace.NewSimpleSpanProcessor(exp), resource.Empty())
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, exp
}

func testJob(traceparent, tracestate string) *domain.Job {
	return &domain.Job{ID: "job-1", Method: "PUT", URL: "https://api.example.com:8443/v1/items?api_key=s3cret&x=1",
		WebhookURL: "http://hooks.example.com/done", Queue: "https://api.example.com:8443",
		JobOptions: domain.JobOptions{TraceParent: traceparent, TraceState: tracestate}}
}

// parse splits a traceparent into trace id, span id and flags.
func parse(t *testing.T, tp string) (traceID, spanID, flags string) {
	t.Helper()
	if !domain.ValidTraceParent(tp) || !strings.HasPrefix(tp, "00-") {
		t.Fatalf("traceparent %q is not a valid version-00 traceparent", tp)
	}
	return tp[3:35], tp[36:52], tp[53:55]
}

func only(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s span, got %d (all: %v)", name, len(found), names(exp.GetSpans()))
	}
	return found[0]
}

func names(spans tracetest.SpanStubs) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}

func attr(s tracetest.SpanStub, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, s tracetest.SpanStub, key attribute.Key, want any) {
	t.Helper()
	v, ok := attr(s, key)
	if !ok {
		t.Errorf("%s: no attribute %s", s.Name, key)
		return
	}
	if got := v.AsInterface(); got != want {
		t.Errorf("%s: %s = %v (%T), want %v (%T)", s.Name, key, got, got, want, want)
	}
}

func TestEnqueueContinuesTheSubmittersTrace(t *testing.T) {
	tr, exp := newTestTracer(t)
	j := testJob(submitterTP, submitterTS)
	tp, ts, end := tr.Enqueue(j, t0)
	end(true, nil, t0.Add(3*time.Millisecond))

	s := only(t, exp, SpanEnqueue)
	traceID, spanID, flags := parse(t, tp)
	if traceID != submitterTrace || flags != "01" {
		t.Errorf("stored traceparent %s: want trace %s, sampled", tp, submitterTrace)
	}
	if spanID != s.SpanContext.SpanID().String() {
		t.Errorf("stored traceparent %s names span %s; the enqueue span is %s", tp, spanID, s.SpanContext.SpanID())
	}
	if ts != submitterTS {
		t.Errorf("stored tracestate %q, want the submitter's %q", ts, submitterTS)
	}
	if got := s.Parent.SpanID().String(); got != submitterSpan || !s.Parent.IsRemote() {
		t.Errorf("enqueue parent %s (remote %v), want the submitter's span %s", got, s.Parent.IsRemote(), submitterSpan)
	}
	if s.SpanKind != trace.SpanKindProducer {
		t.Errorf("kind %v, want producer", s.SpanKind)
	}
	if !s.StartTime.Equal(t0) || !s.EndTime.Equal(t0.Add(3*time.Millisecond)) {
		t.Errorf("span %v..%v, want the times passed in", s.StartTime, s.EndTime)
	}
	wantAttr(t, s, "messaging.system", "aquifer")
	wantAttr(t, s, "messaging.operation.type", "send")
	wantAttr(t, s, "messaging.destination.name", "https://api.example.com:8443")
	wantAttr(t, s, "messaging.message.id", "job-1")
	wantAttr(t, s, AttrDuplicate, false)
	if s.Status.Code != codes.Unset {
		t.Errorf("status %v, want unset", s.Status)
	}
}

func TestEnqueueDuplicateAndFailure(t *testing.T) {
	tr, exp := newTestTracer(t)
	_, _, end := tr.Enqueue(testJob(submitterTP, ""), t0)
	end(false, nil, t0)
	wantAttr(t, only(t, exp, SpanEnqueue), AttrDuplicate, true)

	exp.Reset()
	_, _, end = tr.Enqueue(testJob(submitterTP, ""), t0)
	end(false, errors.New("store jobs: disk full"), t0)
	s := only(t, exp, SpanEnqueue)
	if s.Status.Code != codes.Error || s.Status.Description != "store jobs: disk full" {
		t.Errorf("status %+v, want error with the write's error", s.Status)
	}
	if _, ok := attr(s, AttrDuplicate); ok {
		t.Error("a failed write is not a duplicate; aquifer.duplicate should be absent")
	}
	if len(s.Events) != 1 || s.Events[0].Name != "exception" {
		t.Errorf("events %v, want the recorded error", s.Events)
	}
}

func TestEnqueueWithoutContextStartsARoot(t *testing.T) {
	tr, exp := newTestTracer(t)
	tp, ts, end := tr.Enqueue(testJob("", ""), t0)
	end(true, nil, t0)
	s := only(t, exp, SpanEnqueue)
	if s.Parent.IsValid() {
		t.Errorf("parent %v, want a root", s.Parent)
	}
	traceID, spanID, flags := parse(t, tp)
	if traceID != s.SpanContext.TraceID().String() || spanID != s.SpanContext.SpanID().String() || flags != "01" {
		t.Errorf("stored traceparent %s, want the root enqueue span %s", tp, s.SpanContext.SpanID())
	}
	if ts != "" {
		t.Errorf("tracestate %q, want none", ts)
	}
}

// An unsampled submitter trace (flags 00) stays unsampled: no spans, but
// the context still goes on so the target continues the same trace.
func TestUnsampledTraceRecordsNothingAndStillPropagates(t *testing.T) {
	tr, exp := newTestTracer(t)
	unsampled := "00-" + submitterTrace + "-" + submitterSpan + "-00"
	tp, _, end := tr.Enqueue(testJob(unsampled, ""), t0)
	end(true, nil, t0)
	traceID, _, flags := parse(t, tp)
	if traceID != submitterTrace || flags != "00" {
		t.Errorf("stored traceparent %s, want trace %s unsampled", tp, submitterTrace)
	}
	j := testJob(tp, "")
	tr.Waited(j, t0, t0.Add(time.Second), 1)
	out, endAttempt := tr.Attempt(j, false, 1, t0)
	endAttempt(200, "", t0)
	if traceID, _, flags := parse(t, out); traceID != submitterTrace || flags != "00" {
		t.Errorf("attempt traceparent %s, want trace %s unsampled", out, submitterTrace)
	}
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("recorded %v, want nothing for an unsampled trace", names(spans))
	}
}

func TestWaitedIsARootLinkedToTheStoredContext(t *testing.T) {
	tr, exp := newTestTracer(t)
	stored := "00-" + submitterTrace + "-b7ad6b7169203331-01"
	tr.Waited(testJob(stored, submitterTS), t0, t0.Add(2*time.Second), 1)
	s := only(t, exp, SpanWait)
	if s.Parent.IsValid() {
		t.Errorf("parent %v, want none (the wait links to the enqueue span instead)", s.Parent)
	}
	if s.SpanContext.TraceID().String() == submitterTrace {
		t.Error("the wait span is in the job's trace; want a trace of its own")
	}
	if len(s.Links) != 1 {
		t.Fatalf("links %v, want one", s.Links)
	}
	l := s.Links[0].SpanContext
	if l.TraceID().String() != submitterTrace || l.SpanID().String() != "b7ad6b7169203331" {
		t.Errorf("link to %s/%s, want the stored context", l.TraceID(), l.SpanID())
	}
	if s.SpanKind != trace.SpanKindConsumer {
		t.Errorf("kind %v, want consumer", s.SpanKind)
	}
	if !s.StartTime.Equal(t0) || !s.EndTime.Equal(t0.Add(2*time.Second)) {
		t.Errorf("span %v..%v, want due..first attempt", s.StartTime, s.EndTime)
	}
	wantAttr(t, s, AttrAttempt, int64(1))
	wantAttr(t, s, "messaging.operation.type", "receive")

	exp.Reset()
	tr.Waited(testJob("", ""), t0, t0.Add(time.Second), 1)
	if s := only(t, exp, SpanWait); len(s.Links) != 0 || s.Parent.IsValid() {
		t.Errorf("a job without trace context: links %v parent %v, want a bare root", s.Links, s.Parent)
	}
}

func TestAttemptIsAChildOfTheStoredContext(t *testing.T) {
	tr, exp := newTestTracer(t)
	stored := "00-" + submitterTrace + "-b7ad6b7169203331-01"
	j := testJob(stored, submitterTS)
	tp, end := tr.Attempt(j, false, 2, t0)
	end(200, "", t0.Add(40*time.Millisecond))

	s := only(t, exp, SpanDispatch)
	if got := s.Parent.SpanID().String(); got != "b7ad6b7169203331" || s.SpanContext.TraceID().String() != submitterTrace {
		t.Errorf("dispatch span parent %s in trace %s, want the stored span in the job's trace", got, s.SpanContext.TraceID())
	}
	traceID, spanID, _ := parse(t, tp)
	if traceID != submitterTrace || spanID != s.SpanContext.SpanID().String() {
		t.Errorf("header %s, want this span (%s) as the target's parent", tp, s.SpanContext.SpanID())
	}
	if s.SpanKind != trace.SpanKindClient {
		t.Errorf("kind %v, want client", s.SpanKind)
	}
	if !s.StartTime.Equal(t0) || !s.EndTime.Equal(t0.Add(40*time.Millisecond)) {
		t.Errorf("span %v..%v, want the times passed in", s.StartTime, s.EndTime)
	}
	wantAttr(t, s, "http.request.method", "PUT")
	wantAttr(t, s, "server.address", "api.example.com")
	wantAttr(t, s, "server.port", int64(8443))
	wantAttr(t, s, "url.full", "https://api.example.com:8443/v1/items?api_key="+domain.Redacted+"&x=1")
	wantAttr(t, s, "http.response.status_code", int64(200))
	wantAttr(t, s, AttrAttempt, int64(2))
	wantAttr(t, s, "messaging.message.id", "job-1")
	if s.Status.Code != codes.Unset {
		t.Errorf("status %+v, want unset for a 200", s.Status)
	}
}

func TestAttemptFailures(t *testing.T) {
	tr, exp := newTestTracer(t)
	j := testJob(submitterTP, "")
	for _, c := range []struct {
		status    int
		reason    string
		wantDesc  string
		errorType string
	}{
		{503, "upstream returned 503", "upstream returned 503", "503"},
		{0, "dial tcp 127.0.0.1:1: connect: connection refused", "dial tcp 127.0.0.1:1: connect: connection refused", "_OTHER"},
		{404, "", "HTTP 404", "404"},
	} {
		exp.Reset()
		_, end := tr.Attempt(j, false, 1, t0)
		end(c.status, c.reason, t0)
		s := only(t, exp, SpanDispatch)
		if s.Status.Code != codes.Error || s.Status.Description != c.wantDesc {
			t.Errorf("status %d %q: span status %+v, want error %q", c.status, c.reason, s.Status, c.wantDesc)
		}
		wantAttr(t, s, "error.type", c.errorType)
		if _, ok := attr(s, "http.response.status_code"); ok != (c.status > 0) {
			t.Errorf("status %d: http.response.status_code present %v", c.status, ok)
		}
	}
}

func TestWebhookAttempt(t *testing.T) {
	tr, exp := newTestTracer(t)
	stored := "00-" + submitterTrace + "-b7ad6b7169203331-01"
	tp, end := tr.Attempt(testJob(stored, ""), true, 1, t0)
	end(204, "", t0)
	s := only(t, exp, SpanWebhook)
	if s.Parent.SpanID().String() != "b7ad6b7169203331" {
		t.Errorf("webhook parent %s, want the stored span", s.Parent.SpanID())
	}
	if _, spanID, _ := parse(t, tp); spanID != s.SpanContext.SpanID().String() {
		t.Errorf("header %s, want the webhook span %s as parent", tp, s.SpanContext.SpanID())
	}
	wantAttr(t, s, "http.request.method", "POST")
	wantAttr(t, s, "url.full", "http://hooks.example.com/done")
	wantAttr(t, s, "server.port", int64(80))
}

// A job stored without a usable context (before tracing was on) gets a
// root attempt span, and the header continues that one.
func TestAttemptWithoutContextStartsARoot(t *testing.T) {
	tr, exp := newTestTracer(t)
	for _, tp := range []string{"", "00-zz-not-a-traceparent"} {
		exp.Reset()
		out, end := tr.Attempt(testJob(tp, ""), false, 1, t0)
		end(200, "", t0)
		s := only(t, exp, SpanDispatch)
		if s.Parent.IsValid() {
			t.Errorf("stored %q: parent %v, want a root", tp, s.Parent)
		}
		traceID, spanID, _ := parse(t, out)
		if traceID != s.SpanContext.TraceID().String() || spanID != s.SpanContext.SpanID().String() {
			t.Errorf("stored %q: header %s, want the root span's context", tp, out)
		}
	}
}

func TestMethodOutsideTheKnownSet(t *testing.T) {
	tr, exp := newTestTracer(t)
	j := testJob("", "")
	j.Method = "PURGE"
	_, end := tr.Attempt(j, false, 1, t0)
	end(200, "", t0)
	s := only(t, exp, SpanDispatch)
	wantAttr(t, s, "http.request.method", "_OTHER")
	wantAttr(t, s, "http.request.method_original", "PURGE")
}

func TestNewChecksOptions(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Endpoint: "http://localhost:4318/v1/traces"}, "ServiceName is required"},
		{Options{ServiceName: "s"}, "must be an absolute http or https URL"},
		{Options{ServiceName: "s", Endpoint: "localhost:4318"}, "must be an absolute http or https URL"},
		{Options{ServiceName: "s", Endpoint: "grpc://localhost:4317"}, "must be an absolute http or https URL"},
	} {
		tr, err := New(ctx, c.o)
		if err == nil {
			_ = tr.Shutdown(ctx)
			t.Errorf("%+v: no error, want %q", c.o, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %q, want %q", c.o, err, c.want)
		}
	}
}

func TestResourceNamesTheService(t *testing.T) {
	res, err := newResource(Options{ServiceName: "aquiferd-eu", ServiceVersion: "1.2.3", InstanceID: "host:8080"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"service.name": "aquiferd-eu", "service.version": "1.2.3", "service.instance.id": "host:8080",
		"telemetry.sdk.language": "go"}
	got := map[string]string{}
	for _, kv := range res.Attributes() {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("resource %s = %q, want %q", k, got[k], v)
		}
	}
}

// NopTracer and this tracer agree on what a child traceparent looks like:
// same trace, flags kept, a span id of its own.
func TestHeadersMatchTheNopTracersShape(t *testing.T) {
	tr, _ := newTestTracer(t)
	out, end := tr.Attempt(testJob(submitterTP, ""), false, 1, t0)
	end(200, "", t0)
	nop := ports.ChildTraceParent(submitterTP)
	if len(out) != len(nop) || out[:36] != nop[:36] || out[52:] != nop[52:] {
		t.Errorf("otel header %s and nop header %s differ beyond the span id", out, nop)
	}
}
