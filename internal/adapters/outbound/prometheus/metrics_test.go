package prommetrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	prommetrics "github.com/aquiferhq/aquifer/internal/adapters/outbound/prometheus"
	"github.com/aquiferhq/aquifer/internal/ports"
)

var _ ports.Metrics = (*prommetrics.Metrics)(nil)

const (
	hostA = "https://a.example:443"
	hostB = "http://b.example:8080"
)

func TestCountersAddUp(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true, DurationBuckets: []float64{0.1, 1}})
	m.JobAccepted(hostA)
	m.JobAccepted(hostA)
	m.JobAccepted(hostB)
	m.JobDuplicate(hostA)
	m.JobRejected("memory")
	m.Dispatched(hostA, "completed", 200, 50*time.Millisecond)
	m.Dispatched(hostA, "retry", 503, 500*time.Millisecond)
	m.Dispatched(hostA, "completed", 404, 2*time.Second)
	m.Dispatched(hostB, "failed", 0, 10*time.Millisecond)
	m.JobFinished(hostA, "completed")
	m.JobFinished(hostA, "completed")
	m.JobFinished(hostB, "failed")
	m.WebhookDelivered(hostB)
	m.WebhookFailed(hostB)

	want := `
# HELP aquifer_jobs_accepted_total Jobs accepted (stored durably), by upstream.
# TYPE aquifer_jobs_accepted_total counter
aquifer_jobs_accepted_total{upstream="http://b.example:8080"} 1
aquifer_jobs_accepted_total{upstream="https://a.example:443"} 2
# HELP aquifer_jobs_duplicate_total Submissions answered with an existing job (same user_id and idempotent_key), by upstream.
# TYPE aquifer_jobs_duplicate_total counter
aquifer_jobs_duplicate_total{upstream="https://a.example:443"} 1
# HELP aquifer_jobs_rejected_total Submissions shed by admission control, by the limit hit (memory, db_size).
# TYPE aquifer_jobs_rejected_total counter
aquifer_jobs_rejected_total{reason="db_size"} 0
aquifer_jobs_rejected_total{reason="memory"} 1
# HELP aquifer_dispatch_attempts_total Dispatch attempts by upstream, outcome (completed, retry, deferred, held, failed) and response code class (1xx…5xx, none).
# TYPE aquifer_dispatch_attempts_total counter
aquifer_dispatch_attempts_total{code_class="2xx",outcome="completed",upstream="https://a.example:443"} 1
aquifer_dispatch_attempts_total{code_class="4xx",outcome="completed",upstream="https://a.example:443"} 1
aquifer_dispatch_attempts_total{code_class="5xx",outcome="retry",upstream="https://a.example:443"} 1
aquifer_dispatch_attempts_total{code_class="none",outcome="failed",upstream="http://b.example:8080"} 1
# HELP aquifer_dispatch_duration_seconds Duration of dispatch attempts, from sending the request to reading the response, by upstream.
# TYPE aquifer_dispatch_duration_seconds histogram
aquifer_dispatch_duration_seconds_bucket{upstream="http://b.example:8080",le="0.1"} 1
aquifer_dispatch_duration_seconds_bucket{upstream="http://b.example:8080",le="1"} 1
aquifer_dispatch_duration_seconds_bucket{upstream="http://b.example:8080",le="+Inf"} 1
aquifer_dispatch_duration_seconds_sum{upstream="http://b.example:8080"} 0.01
aquifer_dispatch_duration_seconds_count{upstream="http://b.example:8080"} 1
aquifer_dispatch_duration_seconds_bucket{upstream="https://a.example:443",le="0.1"} 1
aquifer_dispatch_duration_seconds_bucket{upstream="https://a.example:443",le="1"} 2
aquifer_dispatch_duration_seconds_bucket{upstream="https://a.example:443",le="+Inf"} 3
aquifer_dispatch_duration_seconds_sum{upstream="https://a.example:443"} 2.55
aquifer_dispatch_duration_seconds_count{upstream="https://a.example:443"} 3
# HELP aquifer_jobs_finished_total Jobs that reached a terminal status (completed, failed), by upstream.
# TYPE aquifer_jobs_finished_total counter
aquifer_jobs_finished_total{status="completed",upstream="https://a.example:443"} 2
aquifer_jobs_finished_total{status="failed",upstream="http://b.example:8080"} 1
# HELP aquifer_webhooks_total Finished webhook deliveries by the receiver's upstream and result (delivered, failed).
# TYPE aquifer_webhooks_total counter
aquifer_webhooks_total{result="delivered",upstream="http://b.example:8080"} 1
aquifer_webhooks_total{result="failed",upstream="http://b.example:8080"} 1
# HELP aquifer_metrics_upstream_labels Distinct upstream label values in use; at the cap, new upstreams are counted as "other".
# TYPE aquifer_metrics_upstream_labels gauge
aquifer_metrics_upstream_labels 2
`
	err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want),
		"aquifer_jobs_accepted_total", "aquifer_jobs_duplicate_total", "aquifer_jobs_rejected_total",
		"aquifer_dispatch_attempts_total", "aquifer_dispatch_duration_seconds", "aquifer_jobs_finished_total",
		"aquifer_webhooks_total", "aquifer_metrics_upstream_labels")
	if err != nil {
		t.Fatal(err)
	}
}

// A caller sending jobs to a million hosts must not make a million series:
// past the cap, upstreams share the label "other", and the totals still add
// up.
func TestUpstreamLabelsAreCapped(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true})
	const hosts = 5000
	for i := range hosts {
		u := fmt.Sprintf("https://h%d.example:443", i)
		m.JobAccepted(u)
		m.Dispatched(u, "completed", 200, time.Millisecond)
	}
	m.JobAccepted("https://h0.example:443") // admitted before the cap: keeps its own series
	gatherCount := func(name string) int {
		t.Helper()
		n, err := testutil.GatherAndCount(m.Gatherer(), name)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := gatherCount("aquifer_jobs_accepted_total"); n != 1001 {
		t.Errorf("accepted series = %d, want 1,000 upstreams + other", n)
	}
	if n := gatherCount("aquifer_dispatch_attempts_total"); n != 1001 {
		t.Errorf("attempt series = %d, want 1,001", n)
	}
	exp := scrape(t, m)
	for _, want := range []string{
		`aquifer_jobs_accepted_total{upstream="other"} 4000`,
		`aquifer_jobs_accepted_total{upstream="https://h0.example:443"} 2`,
		`aquifer_dispatch_duration_seconds_count{upstream="other"} 4000`,
		`aquifer_metrics_upstream_labels 1000`,
	} {
		if !strings.Contains(exp, want+"\n") {
			t.Errorf("exposition lacks %q", want)
		}
	}
}

func TestSmallLabelSetsAreCappedToo(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true})
	for i := range 100 {
		m.JobRejected(fmt.Sprintf("reason-%d", i))
	}
	n, err := testutil.GatherAndCount(m.Gatherer(), "aquifer_jobs_rejected_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != 17 {
		t.Errorf("rejected series = %d, want 16 reasons + other", n)
	}
}

// Values the Prometheus client would refuse (empty, invalid UTF-8) must not
// panic on the hot path.
func TestOddLabelValues(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true})
	m.JobAccepted("")
	m.JobAccepted("http://\xff.example:80")
	m.Dispatched("", "", 999, -time.Second)
	exp := scrape(t, m)
	for _, want := range []string{
		`aquifer_jobs_accepted_total{upstream="none"} 1`,
		`aquifer_jobs_accepted_total{upstream="http://` + "\uFFFD" + `.example:80"} 1`,
		`aquifer_dispatch_attempts_total{code_class="none",outcome="none",upstream="none"} 1`,
	} {
		if !strings.Contains(exp, want+"\n") {
			t.Errorf("exposition lacks %q:\n%s", want, exp)
		}
	}
}

func TestConcurrentCountsAreExact(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true, MaxUpstreams: 8})
	var wg sync.WaitGroup
	const workers, each = 8, 500
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				u := fmt.Sprintf("http://w%d-%d.example:80", w, i%4)
				m.JobAccepted(u)
				m.Dispatched(u, "completed", 200, time.Millisecond)
				m.JobFinished(u, "completed")
			}
		})
	}
	wg.Wait()
	exp := scrape(t, m)
	for _, name := range []string{"aquifer_jobs_accepted_total", "aquifer_dispatch_attempts_total",
		"aquifer_jobs_finished_total", "aquifer_dispatch_duration_seconds_count"} {
		if got := sumSeries(exp, name); got != workers*each {
			t.Errorf("sum of %s = %v, want %d", name, got, workers*each)
		}
	}
}

func TestHandlerServesExposition(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{})
	m.JobAccepted(hostA)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{`aquifer_jobs_accepted_total{upstream="https://a.example:443"} 1`, "go_goroutines ", "process_"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}

// The names, units and help texts follow Prometheus conventions.
func TestMetricNamesPassLint(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true})
	if err := m.CollectHealth(fullHealth); err != nil {
		t.Fatal(err)
	}
	m.JobAccepted(hostA)
	m.JobDuplicate(hostA)
	m.Dispatched(hostA, "completed", 200, time.Millisecond)
	m.JobFinished(hostA, "completed")
	m.WebhookDelivered(hostA)
	mfs, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// scrape returns m's exposition in the text format.
func scrape(t *testing.T, m *prommetrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape = %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// sumSeries adds every sample of the series name (exactly that name, any
// labels) in a text exposition.
func sumSeries(exp, name string) float64 {
	var sum float64
	for line := range strings.SplitSeq(exp, "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			var v float64
			if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}
