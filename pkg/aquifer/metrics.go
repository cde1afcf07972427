package aquifer

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	prommetrics "github.com/aquiferhq/aquifer/internal/adapters/outbound/prometheus"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Metrics receives what Aquifer counts: submissions, dispatch attempts,
// finished jobs and webhook deliveries. Implementations must be safe for
// concurrent use, cheap and non-blocking (they are called on hot paths).
// Upstream labels are lane keys (scheme://host:port or pool:<id>), never
// URLs or job ids. Use NewPrometheusMetrics, NopMetrics, or your own.
type Metrics = ports.Metrics

// NopMetrics discards everything; it is the default.
type NopMetrics = ports.NopMetrics

// Tracer follows a job's W3C trace: its enqueue, its wait in its lane, each
// dispatch attempt and each webhook delivery (see ports.Tracer for the span
// structure). Use NopTracer or your own; aquiferd uses OpenTelemetry.
type Tracer = ports.Tracer

// NopTracer emits no spans and sends each attempt a child traceparent of
// the job's trace; it is the default.
type NopTracer = ports.NopTracer

// PrometheusOptions configure NewPrometheusMetrics. The zero value is
// ready to use.
type PrometheusOptions struct {
	// MaxUpstreams caps how many distinct destinations get their own
	// series; later ones share the label value "other". Default 1,000.
	MaxUpstreams int
	// ScrapeTimeout bounds one scrape; a slower one answers 503.
	// Default 10s.
	ScrapeTimeout time.Duration
	// NoRuntimeCollectors leaves out the Go runtime and process metrics.
	NoRuntimeCollectors bool
}

// PrometheusMetrics are Aquifer's metrics in Prometheus form
// (docs/METRICS.md), on a registry of their own. Pass them as
// Options.Metrics: Aquifer then adds gauges read from its health at scrape
// time (lanes, queue depth, admission, pools). Serve them with Handler; the
// built-in HTTP adapter and Aquifer.Handler serve them at GET /metrics. One
// PrometheusMetrics serves one Aquifer.
type PrometheusMetrics struct {
	m *prommetrics.Metrics
}

var _ Metrics = (*PrometheusMetrics)(nil)

// NewPrometheusMetrics returns Prometheus metrics with every counter at zero.
func NewPrometheusMetrics(o PrometheusOptions) *PrometheusMetrics {
	return &PrometheusMetrics{m: prommetrics.New(prommetrics.Options{MaxUpstreams: o.MaxUpstreams,
		ScrapeTimeout: o.ScrapeTimeout, NoRuntimeCollectors: o.NoRuntimeCollectors})}
}

// Handler serves the metrics in the Prometheus text format.
func (p *PrometheusMetrics) Handler() http.Handler { return p.m.Handler() }

// Gatherer returns the registry, to merge Aquifer's metrics into another
// exposition (for example with prometheus.Gatherers).
func (p *PrometheusMetrics) Gatherer() prometheus.Gatherer { return p.m.Gatherer() }

// JobAccepted implements Metrics.
func (p *PrometheusMetrics) JobAccepted(upstream string) { p.m.JobAccepted(upstream) }

// JobDuplicate implements Metrics.
func (p *PrometheusMetrics) JobDuplicate(upstream string) { p.m.JobDuplicate(upstream) }

// JobRejected implements Metrics.
func (p *PrometheusMetrics) JobRejected(reason string) { p.m.JobRejected(reason) }

// Dispatched implements Metrics.
func (p *PrometheusMetrics) Dispatched(upstream, outcome string, status int, took time.Duration) {
	p.m.Dispatched(upstream, outcome, status, took)
}

// JobFinished implements Metrics.
func (p *PrometheusMetrics) JobFinished(upstream, status string) { p.m.JobFinished(upstream, status) }

// WebhookDelivered implements Metrics.
func (p *PrometheusMetrics) WebhookDelivered(upstream string) { p.m.WebhookDelivered(upstream) }

// WebhookFailed implements Metrics.
func (p *PrometheusMetrics) WebhookFailed(upstream string) { p.m.WebhookFailed(upstream) }

// CircuitChanged implements Metrics.
func (p *PrometheusMetrics) CircuitChanged(upstream, state string) {
	p.m.CircuitChanged(upstream, state)
}
