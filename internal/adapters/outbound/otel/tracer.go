// Package oteltrace implements ports.Tracer with the OpenTelemetry Go SDK
// and exports the spans over OTLP/HTTP (protobuf) to a collector. aquiferd
// builds it only when AQUIFER_OTEL_EXPORTER=otlp; otherwise the core keeps
// ports.NopTracer and nothing of the SDK runs.
//
// The spans follow the OpenTelemetry messaging conventions (a job is a
// message, its lane the destination):
//
//	submitter span
//	└── aquifer.enqueue   (producer)  the durable write; its context is what the job stores
//	    ├── aquifer.dispatch (client) one per attempt; the target gets its traceparent
//	    └── aquifer.webhook  (client) one per delivery attempt; so does the receiver
//	aquifer.wait          (consumer)  a root of its own, from due to the first attempt,
//	                                  with a link (not a parent) to aquifer.enqueue
//
// Every span takes the times the core passes (its clock, which tests
// fake), never the wall clock. Sampling is the SDK's: parent-based,
// always-on for roots, unless OTEL_TRACES_SAMPLER says otherwise.
//
// Nothing here is global: the package never sets OpenTelemetry's global
// tracer provider, propagator or error handler, so two tracers in one
// process (tests, embedders) do not meet.
package oteltrace

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Span names. They are fixed: job ids and URLs go in attributes, so span
// names stay a small set a backend can group by.
const (
	SpanEnqueue  = "aquifer.enqueue"
	SpanWait     = "aquifer.wait"
	SpanDispatch = "aquifer.dispatch"
	SpanWebhook  = "aquifer.webhook"
)

// Attribute keys of Aquifer's own (the rest are the semantic conventions').
const (
	// AttrDuplicate is set on aquifer.enqueue: true when the submission
	// matched an existing job (same user_id and idempotent_key) and
	// nothing was written.
	AttrDuplicate = attribute.Key("aquifer.duplicate")
	// AttrAttempt is the attempt number (1 for the first) on
	// aquifer.dispatch and aquifer.webhook, and the attempt the wait ended
	// with on aquifer.wait.
	AttrAttempt = attribute.Key("aquifer.attempt")
	// AttrPool names the pool of a pool job.
	AttrPool = attribute.Key("aquifer.pool")
)

// messagingSystem is messaging.system on every span.
const messagingSystem = "aquifer"

// scopeName is the instrumentation scope the spans are reported under.
const scopeName = "github.com/aquiferhq/aquifer"

// Options configure New.
type Options struct {
	// Endpoint is the full OTLP/HTTP traces URL spans are POSTed to, e.g.
	// http://localhost:4318/v1/traces (the path is used as it is); http
	// sends in the clear, https uses TLS. Required. The exporter's other
	// OTEL_EXPORTER_OTLP_* settings (headers, timeout, compression,
	// certificates) still apply.
	Endpoint string
	// ServiceName is the resource's service.name. Required.
	ServiceName string
	// ServiceVersion and InstanceID, when set, are service.version and
	// service.instance.id.
	ServiceVersion string
	InstanceID     string
	// Logger receives export failures (a collector that is down); default
	// none. Spans that could not be exported are dropped, never retried
	// beyond the exporter's own retry, and never hold the core up.
	Logger *zap.Logger
	// BatchTimeout is the longest a finished span waits before it is sent;
	// default the SDK's (5s, or OTEL_BSP_SCHEDULE_DELAY).
	BatchTimeout time.Duration
}

// Tracer is the OpenTelemetry implementation of ports.Tracer. Its methods
// are safe for concurrent use and never block: spans are handed to a
// batch span processor, which drops them when its queue is full.
type Tracer struct {
	tp   *sdktrace.TracerProvider
	tr   trace.Tracer
	prop propagation.TraceContext
}

var _ ports.Tracer = (*Tracer)(nil)

// New builds a tracer that exports to o.Endpoint. The resource is the
// SDK's default one (telemetry.sdk.*, and OTEL_RESOURCE_ATTRIBUTES) with
// service.name and the rest from o on top. Nothing is sent until the first
// span ends; an unreachable collector is not an error here.
func New(ctx context.Context, o Options) (*Tracer, error) {
	if o.ServiceName == "" {
		return nil, errors.New("oteltrace: Options.ServiceName is required")
	}
	if err := checkEndpoint(o.Endpoint); err != nil {
		return nil, err
	}
	res, err := newResource(o)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(o.Endpoint))
	if err != nil {
		return nil, fmt.Errorf("oteltrace: OTLP exporter: %w", err)
	}
	var bsp []sdktrace.BatchSpanProcessorOption
	if o.BatchTimeout > 0 {
		bsp = append(bsp, sdktrace.WithBatchTimeout(o.BatchTimeout))
	}
	return newTracer(sdktrace.NewBatchSpanProcessor(&loggingExporter{SpanExporter: exp, log: o.Logger}, bsp...), res), nil
}

// newTracer is a tracer whose finished spans go to sp; New gives it the
// batching OTLP exporter, the package's tests an in-memory one.
func newTracer(sp sdktrace.SpanProcessor, res *resource.Resource) *Tracer {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithResource(res))
	return &Tracer{tp: tp, tr: tp.Tracer(scopeName)}
}

// newResource is the SDK's default resource with o's service attributes
// on top (they win over OTEL_SERVICE_NAME: AQUIFER_OTEL_SERVICE_NAME is the
// setting that names the service).
func newResource(o Options) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{semconv.ServiceName(o.ServiceName)}
	if o.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(o.ServiceVersion))
	}
	if o.InstanceID != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(o.InstanceID))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("oteltrace: resource: %w", err)
	}
	return res, nil
}

// checkEndpoint accepts an absolute http or https URL with a host: the
// exporter itself would quietly fall back to its default on anything else.
func checkEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("oteltrace: endpoint %q must be an absolute http or https URL (like http://localhost:4318/v1/traces)", endpoint)
	}
	return nil
}

// Shutdown ends the tracer: the spans still queued are exported, within
// ctx, and later spans are dropped. Call it after the core has stopped, so
// the last attempts' spans are in the flush.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("oteltrace: flushing spans: %w", err)
	}
	return nil
}

// ForceFlush exports every span ended so far, within ctx.
func (t *Tracer) ForceFlush(ctx context.Context) error { return t.tp.ForceFlush(ctx) }

// Enqueue implements ports.Tracer: it starts aquifer.enqueue as a child of
// the submitter's span (j.TraceParent/TraceState), or as a new root when
// the job has none, and returns the span's own context for the job to
// store, so every later span and request of the job hangs under it.
func (t *Tracer) Enqueue(j *domain.Job, start time.Time) (string, string, func(bool, error, time.Time)) {
	parent := t.remote(j.TraceParent, j.TraceState)
	attrs := append(messageAttrs(j), semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("enqueue"))
	ctx, span := t.tr.Start(parent, SpanEnqueue, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	traceparent, tracestate := t.inject(ctx)
	return traceparent, tracestate, func(fresh bool, err error, at time.Time) {
		if err != nil {
			span.RecordError(err, trace.WithTimestamp(at))
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(AttrDuplicate.Bool(!fresh))
		}
		span.End(trace.WithTimestamp(at))
	}
}

// Waited implements ports.Tracer: aquifer.wait spans from to, a new
// root linked to the job's stored (enqueue) context, as the messaging
// conventions advise for the time a message sits in a queue. When the
// stored trace is not sampled, the wait is not recorded either (it would
// be a trace of its own pointing at nothing).
func (t *Tracer) Waited(j *domain.Job, from, to time.Time, attempt int) {
	sc := t.spanContext(j.TraceParent, j.TraceState)
	if sc.IsValid() && !sc.IsSampled() {
		return
	}
	attrs := append(messageAttrs(j), semconv.MessagingOperationTypeReceive, semconv.MessagingOperationName("wait"),
		AttrAttempt.Int(attempt))
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(from), trace.WithAttributes(attrs...)}
	if sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	_, span := t.tr.Start(context.Background(), SpanWait, opts...)
	span.End(trace.WithTimestamp(to))
}

// Attempt implements ports.Tracer: aquifer.dispatch (or aquifer.webhook
// for a delivery) as a child of the job's stored context, or a new root
// for a job stored without one. The returned traceparent is this span's,
// so the target's (or receiver's) server span is its child.
func (t *Tracer) Attempt(j *domain.Job, delivery bool, n int, start time.Time) (string, func(int, string, time.Time)) {
	name, method, target := SpanDispatch, j.Method, j.URL
	if delivery {
		name, method, target = SpanWebhook, http.MethodPost, j.WebhookURL
	}
	attrs := append(messageAttrs(j), AttrAttempt.Int(n))
	attrs = append(attrs, requestAttrs(method, target)...)
	ctx, span := t.tr.Start(t.remote(j.TraceParent, j.TraceState), name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	traceparent, _ := t.inject(ctx)
	return traceparent, func(status int, reason string, at time.Time) {
		if status > 0 {
			span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		}
		switch {
		case reason != "":
			span.SetAttributes(errorType(status))
			span.SetStatus(codes.Error, reason)
		case status >= 400: // a client span's 4xx is an error too (HTTP conventions)
			span.SetAttributes(errorType(status))
			span.SetStatus(codes.Error, "HTTP "+strconv.Itoa(status))
		}
		span.End(trace.WithTimestamp(at))
	}
}

// remote returns a context holding the W3C context traceparent/tracestate
// describe as the remote parent, or context.Background (a new root) when
// traceparent is empty or not one the propagator accepts.
func (t *Tracer) remote(traceparent, tracestate string) context.Context {
	ctx := context.Background()
	if traceparent == "" {
		return ctx
	}
	return t.prop.Extract(ctx, &carrier{traceparent: traceparent, tracestate: tracestate})
}

// spanContext is the remote span context of traceparent/tracestate; not
// valid when there is none.
func (t *Tracer) spanContext(traceparent, tracestate string) trace.SpanContext {
	return trace.SpanContextFromContext(t.remote(traceparent, tracestate))
}

// inject renders the span context in ctx as W3C headers. A span the
// sampler dropped still has a valid context (flags 00), so the trace goes
// on downstream either way.
func (t *Tracer) inject(ctx context.Context) (traceparent, tracestate string) {
	var c carrier
	t.prop.Inject(ctx, &c)
	return c.traceparent, c.tracestate
}

// messageAttrs are the messaging attributes every span of j carries.
func messageAttrs(j *domain.Job) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, semconv.MessagingSystemKey.String(messagingSystem),
		semconv.MessagingDestinationName(string(j.Queue)), semconv.MessagingMessageID(string(j.ID)))
	if j.PoolID != "" {
		attrs = append(attrs, AttrPool.String(j.PoolID))
	}
	return attrs
}

// requestAttrs are the HTTP client attributes of a request to target:
// url.full with its secrets redacted (domain.RedactURL), server.address
// and server.port.
func requestAttrs(method, target string) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 5)
	if knownMethods[method] {
		attrs = append(attrs, semconv.HTTPRequestMethodKey.String(method))
	} else {
		attrs = append(attrs, semconv.HTTPRequestMethodKey.String("_OTHER"), semconv.HTTPRequestMethodOriginal(method))
	}
	if target == "" {
		return attrs
	}
	attrs = append(attrs, semconv.URLFull(domain.RedactURL(target)))
	if u, err := url.Parse(target); err == nil && u.Hostname() != "" {
		attrs = append(attrs, semconv.ServerAddress(u.Hostname()))
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		if p, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, semconv.ServerPort(p))
		}
	}
	return attrs
}

// knownMethods are the methods http.request.method names as they are; any
// other is "_OTHER", with the original in http.request.method_original.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true, http.MethodDelete: true,
	http.MethodConnect: true, http.MethodOptions: true, http.MethodTrace: true, http.MethodPatch: true,
}

// errorType is error.type of a failed attempt: the status code when there
// was a response, "_OTHER" (no response: a transport error, a refused
// destination) otherwise.
func errorType(status int) attribute.KeyValue {
	if status > 0 {
		return semconv.ErrorTypeKey.String(strconv.Itoa(status))
	}
	return semconv.ErrorTypeOther
}

// carrier is a propagation.TextMapCarrier holding just the two W3C Trace
// Context headers, so extracting and injecting allocate no header map.
type carrier struct {
	traceparent, tracestate string
}

// Get implements propagation.TextMapCarrier.
func (c carrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.traceparent
	case "tracestate":
		return c.tracestate
	}
	return ""
}

// Set implements propagation.TextMapCarrier; other keys are ignored.
func (c *carrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.traceparent = value
	case "tracestate":
		c.tracestate = value
	}
}

// Keys implements propagation.TextMapCarrier.
func (c carrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// loggingExporter reports failed exports to the logger and returns nil, so
// the SDK does not also print them through OpenTelemetry's global error
// handler (the standard library's log, unstructured, on stderr).
type loggingExporter struct {
	sdktrace.SpanExporter
	log *zap.Logger
}

// ExportSpans implements sdktrace.SpanExporter.
func (e *loggingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := e.SpanExporter.ExportSpans(ctx, spans); err != nil && e.log != nil {
		e.log.Warn("could not export trace spans; they are dropped", zap.Int("spans", len(spans)), zap.Error(err))
	}
	return nil
}
