package ports

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Tracer continues a submitter's W3C trace through a job's life. The app
// calls it at each step; the OpenTelemetry adapter (AQUIFER_OTEL_EXPORTER=
// otlp) emits spans, and NopTracer only passes the trace context on. Every
// method must be cheap and must not block.
//
// The structure, after the OpenTelemetry messaging conventions: the
// enqueue span is a child of the submitter's span; each attempt and each
// webhook delivery is a child of the enqueue span (so the target and the
// receiver see the submitter's trace); the wait in the lane is a span of its
// own that links to the enqueue span instead of having it as its parent.
type Tracer interface {
	// Enqueue begins the enqueue span of job j (before its durable write)
	// and returns the trace context to store with it — the enqueue span's,
	// or the submitter's as it came ("" when the job has none) — and the
	// function that ends the span once the write is done (fresh false: the
	// job was a duplicate and nothing was written).
	Enqueue(j *domain.Job, start time.Time) (traceparent, tracestate string, end func(fresh bool, err error, at time.Time))
	// Waited records j's wait in its lane, from when it was due to when
	// its attempt n began.
	Waited(j *domain.Job, from, to time.Time, attempt int)
	// Attempt begins attempt n of j's dispatch (delivery false) or of its
	// webhook delivery (delivery true) at start, and returns the
	// traceparent to send with it ("" when the job has no trace) and the
	// function that ends the attempt's span with the response status (0:
	// none) and, for a failure, its reason.
	Attempt(j *domain.Job, delivery bool, n int, start time.Time) (traceparent string, end func(status int, reason string, at time.Time))
}

// NopTracer emits nothing; it sends each attempt a child of the job's
// stored trace context (a fresh span id under the same trace id), so the
// trace continues even without an exporter.
type NopTracer struct{}

// Enqueue implements Tracer: the submitter's context is kept as it is.
func (NopTracer) Enqueue(j *domain.Job, _ time.Time) (string, string, func(bool, error, time.Time)) {
	return j.TraceParent, j.TraceState, nopEnqueued
}

func nopEnqueued(bool, error, time.Time) {}

// Waited implements Tracer.
func (NopTracer) Waited(*domain.Job, time.Time, time.Time, int) {}

// Attempt implements Tracer.
func (NopTracer) Attempt(j *domain.Job, _ bool, _ int, _ time.Time) (string, func(int, string, time.Time)) {
	return ChildTraceParent(j.TraceParent), nopEnd
}

func nopEnd(int, string, time.Time) {}

// ChildTraceParent returns a traceparent of the same trace as parent with a
// new random span id, version 00 and parent's flags; "" if parent is "".
// parent must be valid (domain.ValidTraceParent).
func ChildTraceParent(parent string) string {
	if len(parent) < 55 {
		return ""
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	if id == [8]byte{} {
		id[7] = 1 // an all-zero span id is invalid
	}
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	b = append(b, parent[3:35]...)
	b = append(b, '-')
	b = hex.AppendEncode(b, id[:])
	b = append(b, '-')
	b = append(b, parent[53:55]...)
	return string(b)
}
