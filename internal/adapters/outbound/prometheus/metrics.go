// Package prommetrics implements ports.Metrics with the Prometheus client
// and serves the result, together with gauges read from the service's
// health at scrape time, on an http.Handler for GET /metrics.
//
// Everything lives on the adapter's own registry, never the global default,
// so two daemons in one process (tests) do not collide. Label values are
// bounded: upstream labels are lane keys (scheme://host:port or pool:<id>,
// never a full URL or a job id) and at most Options.MaxUpstreams distinct
// ones get their own series; later ones are counted under "other". The
// metric list is docs/METRICS.md.
package prommetrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

const namespace = "aquifer"

// Options configure the adapter. The zero value is ready to use.
type Options struct {
	// MaxUpstreams caps how many distinct upstream label values get their
	// own series; the rest share the value "other". Default 1,000.
	MaxUpstreams int
	// ScrapeTimeout bounds one scrape (the health read included); a slower
	// one answers 503. Default 10s.
	ScrapeTimeout time.Duration
	// DurationBuckets are the dispatch-latency histogram's upper bounds in
	// seconds. Default 5 ms … 60 s (see DefaultDurationBuckets).
	DurationBuckets []float64
	// NoRuntimeCollectors leaves out the Go runtime and process collectors
	// (for tests that compare whole expositions).
	NoRuntimeCollectors bool
}

// DefaultDurationBuckets are the dispatch-latency buckets: 5 ms to the
// default request timeout (30 s) and beyond.
var DefaultDurationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// maxSmallLabels caps each label set the application names (outcomes,
// statuses, reasons): they come from code, not callers, but a bug there must
// not grow memory either.
const maxSmallLabels = 16

// Metrics is the Prometheus implementation of ports.Metrics. Its methods are
// safe for concurrent use and do not block beyond a short mutex.
type Metrics struct {
	opts      Options
	reg       *prometheus.Registry
	upstreams *labelCap
	outcomes  *labelCap
	statuses  *labelCap
	reasons   *labelCap

	accepted  *prometheus.CounterVec
	duplicate *prometheus.CounterVec
	rejected  *prometheus.CounterVec
	attempts  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	finished  *prometheus.CounterVec
	webhooks  *prometheus.CounterVec
	circuits  *prometheus.CounterVec
}

var _ ports.Metrics = (*Metrics)(nil)

// New returns the adapter with its counters registered on a fresh registry
// (plus the Go runtime and process collectors). Call CollectHealth to add
// the gauges.
func New(opts Options) *Metrics {
	if opts.MaxUpstreams <= 0 {
		opts.MaxUpstreams = 1000
	}
	if opts.ScrapeTimeout <= 0 {
		opts.ScrapeTimeout = 10 * time.Second
	}
	if len(opts.DurationBuckets) == 0 {
		opts.DurationBuckets = DefaultDurationBuckets
	}
	m := &Metrics{opts: opts, reg: prometheus.NewRegistry(),
		upstreams: newLabelCap(opts.MaxUpstreams), outcomes: newLabelCap(maxSmallLabels),
		statuses: newLabelCap(maxSmallLabels), reasons: newLabelCap(maxSmallLabels)}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	m.accepted = counter("jobs_accepted_total", "Jobs accepted (stored durably), by upstream.", "upstream")
	m.duplicate = counter("jobs_duplicate_total",
		"Submissions answered with an existing job (same user_id and idempotent_key), by upstream.", "upstream")
	m.rejected = counter("jobs_rejected_total", "Submissions shed by admission control, by the limit hit (memory, db_size).", "reason")
	m.attempts = counter("dispatch_attempts_total",
		"Dispatch attempts by upstream, outcome (completed, retry, deferred, held, failed) and response code class (1xx…5xx, none).",
		"upstream", "outcome", "code_class")
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "dispatch_duration_seconds",
		Help: "Duration of dispatch attempts, from sending the request to reading the response, by upstream.", Buckets: opts.DurationBuckets},
		[]string{"upstream"})
	m.reg.MustRegister(m.duration)
	m.finished = counter("jobs_finished_total", "Jobs that reached a terminal status (completed, failed), by upstream.", "upstream", "status")
	m.webhooks = counter("webhooks_total",
		"Finished webhook deliveries by the receiver's upstream and result (delivered, failed).", "upstream", "result")
	m.circuits = counter("lane_circuit_transitions_total",
		"Outage circuits changing state, by upstream and the state entered: open (destination found down), closed (it answered again).",
		"upstream", "state")
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "metrics_upstream_labels",
		Help: "Distinct upstream label values in use; at the cap, new upstreams are counted as \"other\"."},
		func() float64 { return float64(m.upstreams.size()) }))
	// Known reasons start at zero, so rate() works before the first one.
	for _, r := range []string{domain.LimitMemory, domain.LimitDBSize} {
		m.rejected.WithLabelValues(m.reasons.value(r))
	}
	if !opts.NoRuntimeCollectors {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// CollectHealth adds the gauges read from health at every scrape: lanes,
// job counts, admission, pools, drain and cluster state. Call it once, with
// the service's Health method, before serving.
func (m *Metrics) CollectHealth(health func(context.Context) *app.Health) error {
	return m.reg.Register(newHealthCollector(health, m.upstreams, m.opts.ScrapeTimeout))
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError, // a failing collector leaves the rest readable
		Registry:            m.reg,                    // counts those errors
		MaxRequestsInFlight: 4,                        // every scrape reads the store: do not let scrapers pile up
		Timeout:             m.opts.ScrapeTimeout,
	})
}

// Gatherer returns the registry, for tests and for embedding Aquifer's
// metrics in another exposition.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// JobAccepted implements ports.Metrics.
func (m *Metrics) JobAccepted(upstream string) {
	m.accepted.WithLabelValues(m.upstreams.value(upstream)).Inc()
}

// JobDuplicate implements ports.Metrics.
func (m *Metrics) JobDuplicate(upstream string) {
	m.duplicate.WithLabelValues(m.upstreams.value(upstream)).Inc()
}

// JobRejected implements ports.Metrics.
func (m *Metrics) JobRejected(reason string) {
	m.rejected.WithLabelValues(m.reasons.value(reason)).Inc()
}

// Dispatched implements ports.Metrics.
func (m *Metrics) Dispatched(upstream, outcome string, status int, took time.Duration) {
	u := m.upstreams.value(upstream)
	m.attempts.WithLabelValues(u, m.outcomes.value(outcome), codeClass(status)).Inc()
	m.duration.WithLabelValues(u).Observe(took.Seconds())
}

// JobFinished implements ports.Metrics.
func (m *Metrics) JobFinished(upstream, status string) {
	m.finished.WithLabelValues(m.upstreams.value(upstream), m.statuses.value(status)).Inc()
}

// WebhookDelivered implements ports.Metrics.
func (m *Metrics) WebhookDelivered(upstream string) {
	m.webhooks.WithLabelValues(m.upstreams.value(upstream), "delivered").Inc()
}

// WebhookFailed implements ports.Metrics.
func (m *Metrics) WebhookFailed(upstream string) {
	m.webhooks.WithLabelValues(m.upstreams.value(upstream), "failed").Inc()
}

// CircuitChanged implements ports.Metrics.
func (m *Metrics) CircuitChanged(upstream, state string) {
	m.circuits.WithLabelValues(m.upstreams.value(upstream), m.outcomes.value(state)).Inc()
}
