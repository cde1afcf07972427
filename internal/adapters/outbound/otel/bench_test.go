package oteltrace

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aquiferhq/aquifer/internal/ports"
)

// benchJob runs the calls the core makes for one job with a webhook:
// enqueue, the wait, one attempt and one delivery.
func benchJob(b *testing.B, tr ports.Tracer) {
	j := testJob(submitterTP, submitterTS)
	b.ReportAllocs()
	for b.Loop() {
		j.TraceParent, j.TraceState = submitterTP, submitterTS
		tp, ts, end := tr.Enqueue(j, t0)
		end(true, nil, t0)
		j.TraceParent, j.TraceState = tp, ts
		tr.Waited(j, t0, t0.Add(time.Second), 1)
		_, endAttempt := tr.Attempt(j, false, 1, t0)
		endAttempt(200, "", t0)
		_, endDelivery := tr.Attempt(j, true, 1, t0)
		endDelivery(204, "", t0)
	}
}

// BenchmarkPerJobNop is the cost with tracing off (the default).
func BenchmarkPerJobNop(b *testing.B) { benchJob(b, ports.NopTracer{}) }

// BenchmarkPerJobOTel is the cost with the exporter on: four spans per
// job into the batch processor (the export itself runs on its own
// goroutine; here it discards).
func BenchmarkPerJobOTel(b *testing.B) {
	tr := newTracer(sdktrace.NewBatchSpanProcessor(tracetest.NewNoopExporter()), resource.Empty())
	defer func() { _ = tr.Shutdown(context.Background()) }()
	benchJob(b, tr)
}
