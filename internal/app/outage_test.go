package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// prodRetry is the default retry policy (1, 2, 4, 8 s): on the test's clock
// it costs no time, and retries interleave with other work as in production.
var prodRetry = app.RetryPolicy{Attempts: 5, Backoff: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}}

// flaky is a destination that answers 503 while down and records, on the
// test's clock, when each request arrived.
type flaky struct {
	*upstream
	down atomic.Bool
	mu   sync.Mutex
	seen []time.Time // clock time of every request while down
}

func newFlaky(t *testing.T, okStatus int) *flaky {
	f := &flaky{}
	f.down.Store(true)
	f.upstream = newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		if f.down.Load() {
			f.mu.Lock()
			f.seen = append(f.seen, now(t))
			f.mu.Unlock()
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(okStatus)
		fmt.Fprint(w, "ok")
	})
	return f
}

func (f *flaky) downHits() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.seen...)
}

// circuitMetrics records circuit transitions.
type circuitMetrics struct {
	ports.NopMetrics
	mu     sync.Mutex
	states []string
}

func (m *circuitMetrics) CircuitChanged(upstream, state string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.states = append(m.states, upstream+" "+state)
}

func (m *circuitMetrics) got() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.states...)
}

func laneCircuit(b *bundle, t *testing.T, lane string) app.CircuitHealth {
	for _, l := range b.svc.Health(t.Context()).Lanes {
		if l.Lane == lane {
			return l.Circuit
		}
	}
	return app.CircuitHealth{}
}

func outageSetup(t *testing.T, m ports.Metrics, o app.OutageConfig) *bundle {
	return setup(t, func(c *app.Config) {
		c.Metrics = m
		c.Outage = o
		// One at a time: the failures, probes and their order are exact.
		c.Rates = app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 1}}
		c.Retry = prodRetry
	})
}

func laneOf(u *upstream) string { return "http://" + strings.TrimPrefix(u.URL, "http://") }

func TestOutageHoldsWorkProbesAndResumes(t *testing.T) {
	dest := newFlaky(t, http.StatusOK)
	hooks := newHooks(t)
	m := &circuitMetrics{}
	b := outageSetup(t, m, app.OutageConfig{FailureThreshold: 3, ProbeInterval: time.Second, MaxProbeInterval: 4 * time.Second})
	var ids []domain.JobID
	for i := range 10 {
		r := req(fmt.Sprintf("k%d", i), dest.URL+"/x")
		r.WebhookURL = hooks.URL + "/hook"
		ids = append(ids, b.enqueue(t, r))
	}
	lane := laneOf(dest.upstream)
	waitFor(t, "the circuit to open", func() bool { return laneCircuit(b, t, lane).State == "open" })
	opened := now(t)
	c := laneCircuit(b, t, lane)
	if c.ConsecutiveFailures < 3 || c.LastError != "upstream returned 503" || c.SinceMS == 0 || c.NextProbeMS <= c.SinceMS {
		t.Fatalf("open circuit in health: %+v", c)
	}
	// Three failures across jobs opened it; only the first two counted
	// against their jobs.
	spent := 0
	for _, id := range ids {
		j, err := b.svc.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status.Terminal() {
			t.Fatalf("job %s ended during the outage: %s", id, j.Status)
		}
		spent += j.Attempts
	}
	if spent > 2 {
		t.Fatalf("%d attempts counted against jobs before the circuit opened, want at most 2", spent)
	}

	// While open, exactly one probe at a time, 1s, 2s, 4s, 4s apart.
	before := len(dest.downHits())
	waitFor(t, "four probes", func() bool { return len(dest.downHits()) >= before+4 })
	hits := dest.downHits()[before:]
	wantGaps := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}
	prev := opened
	for i, want := range wantGaps {
		// The wait starts when the failed probe's answer is in: on the
		// test's clock, the instant it was sent.
		if gap := hits[i].Sub(prev); gap != want {
			t.Fatalf("probe %d came %v after the previous one, want %v (hits %v)", i+1, gap, want, hits)
		}
		prev = hits[i]
	}
	if len(hits) != 4 {
		t.Fatalf("%d requests while open, want only the 4 probes", len(hits))
	}
	// The fourth probe's answer is on its way to the lane.
	waitFor(t, "the fourth probe to end", func() bool { c := laneCircuit(b, t, lane); return c.State == "open" && c.Probes == 4 })

	// The destination comes back: the next probe closes the circuit and the
	// held jobs complete. A job may have spent an attempt or two before the
	// circuit opened (its retry can come before the next job's first try),
	// never more than the threshold in all.
	dest.down.Store(false)
	waitFor(t, "every job to complete", func() bool {
		for _, id := range ids {
			if j, _ := b.svc.Get(t.Context(), id); j == nil || j.Status != domain.StatusCompleted {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		j, _ := b.svc.Get(t.Context(), id)
		if j.Attempts > 3 {
			t.Errorf("job %s: %d attempts counted, want at most 3", id, j.Attempts)
		}
	}
	waitFor(t, "every webhook", func() bool { return hooks.count() >= len(ids) })
	if got := len(hooks.payloads(t)); got != len(ids) {
		t.Fatalf("%d webhooks, want %d", got, len(ids))
	}
	if c := laneCircuit(b, t, lane); c.State != "closed" || c.ConsecutiveFailures != 0 {
		t.Fatalf("circuit after recovery: %+v", c)
	}
	want := []string{lane + " open", lane + " closed"}
	if got := m.got(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("circuit metrics %v, want %v", got, want)
	}
	if b.logs.FilterMessageSnippet("circuit open").Len() != 1 || b.logs.FilterMessageSnippet("circuit closed").Len() != 1 {
		t.Fatalf("want one log line for the outage and one for the recovery")
	}
}

func TestOutageHoldRunsOut(t *testing.T) {
	hooks := newHooks(t)
	b := outageSetup(t, nil, app.OutageConfig{FailureThreshold: 2, ProbeInterval: time.Second, MaxHold: 10 * time.Second})
	var ids []domain.JobID
	for i := range 5 {
		r := req(fmt.Sprintf("k%d", i), "http://127.0.0.1:1/refused") // nothing listens on port 1
		r.WebhookURL = hooks.URL + "/hook"
		ids = append(ids, b.enqueue(t, r))
	}
	waitFor(t, "every job to fail", func() bool {
		for _, id := range ids {
			if j, _ := b.svc.Get(t.Context(), id); j == nil || j.Status != domain.StatusFailed {
				return false
			}
		}
		return true
	})
	// Every job entered the queue at the start: each fails the moment
	// its 10 s hold runs out, not before and not later.
	if held := since(t); held != 10*time.Second {
		t.Fatalf("jobs failed after %v, want when the 10s hold ran out", held)
	}
	for _, id := range ids {
		j, _ := b.svc.Get(t.Context(), id)
		if !strings.HasPrefix(j.Result.Reason, "destination unavailable for longer than max_outage_hold (10s)") {
			t.Errorf("job %s reason %q", id, j.Result.Reason)
		}
		if j.Attempts >= 5 {
			t.Errorf("job %s spent all its %d attempts", id, j.Attempts)
		}
	}
	waitFor(t, "every webhook", func() bool { return hooks.count() >= len(ids) })
	for id, p := range hooks.payloads(t) {
		if p.Status != "failed" || !strings.Contains(p.Reason, "max_outage_hold") {
			t.Errorf("webhook for %s: %+v", id, p)
		}
	}
}

func TestOutageOfAWebhookReceiver(t *testing.T) {
	dest := newUpstream(t, nil)
	receiver := newFlaky(t, http.StatusNoContent)
	b := setup(t, func(c *app.Config) {
		c.Outage = app.OutageConfig{FailureThreshold: 3, ProbeInterval: time.Second}
		c.Retry = prodRetry
		// Dispatch all at once; deliver one at a time.
		c.Rates = app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 1},
			Hosts: map[string]domain.Rate{strings.TrimPrefix(dest.URL, "http://"): {RPS: 1000, MaxConcurrent: 16}}}
	})
	var ids []domain.JobID
	for i := range 8 {
		r := req(fmt.Sprintf("k%d", i), dest.URL+"/x")
		r.WebhookURL = receiver.URL + "/hook"
		ids = append(ids, b.enqueue(t, r))
	}
	lane := laneOf(receiver.upstream)
	waitFor(t, "the receiver's circuit to open", func() bool { return laneCircuit(b, t, lane).State == "open" })
	opened := now(t)
	// Ten seconds of outage: probes only, no delivery fails.
	elapse(t, 10*time.Second)
	// Three deliveries failed, one slot (1 ms) apart, and opened it; then
	// only probes, 1, 2 and 4 s apart. Without the circuit it would have
	// been 8 deliveries × 5 attempts.
	hits := receiver.downHits()
	var gaps []time.Duration
	for i := 1; i < len(hits); i++ {
		gaps = append(gaps, hits[i].Sub(hits[i-1]))
	}
	if fmt.Sprint(gaps) != "[1ms 1ms 1s 2s 4s]" || !hits[2].Equal(opened) {
		t.Fatalf("deliveries tried during a 10s outage %v apart (opened at +%v, hits %v), want 3 that opened it 1ms apart, then probes 1s, 2s and 4s apart",
			gaps, opened.Sub(testT0), hits)
	}
	for _, id := range ids {
		j, _ := b.svc.Get(t.Context(), id)
		if j.Delivery == nil || j.Delivery.Status != domain.DeliveryPending {
			t.Fatalf("job %s delivery during the outage: %+v", id, j.Delivery)
		}
	}
	receiver.down.Store(false)
	waitFor(t, "every delivery", func() bool {
		for _, id := range ids {
			if j, _ := b.svc.Get(t.Context(), id); j == nil || j.Delivery == nil || j.Delivery.Status != domain.DeliveryDelivered {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		if j, _ := b.svc.Get(t.Context(), id); j.Delivery.Attempts > 3 {
			t.Errorf("job %s: %d delivery attempts counted", id, j.Delivery.Attempts)
		}
	}
}

func TestOneBadRequestFailsByItsOwnAttempts(t *testing.T) {
	dest := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "ok")
	})
	m := &circuitMetrics{}
	b := outageSetup(t, m, app.OutageConfig{FailureThreshold: 3})
	bad := b.enqueue(t, req("bad", dest.URL+"/bad"))
	var good []domain.JobID
	for i := range 20 {
		good = append(good, b.enqueue(t, req(fmt.Sprintf("good%d", i), dest.URL+"/ok")))
	}
	waitFor(t, "the bad job to fail", func() bool {
		j, _ := b.svc.Get(t.Context(), bad)
		return j != nil && j.Status == domain.StatusFailed
	})
	j, _ := b.svc.Get(t.Context(), bad)
	if j.Attempts != 5 || j.Result.Reason != "upstream returned 500" {
		t.Fatalf("bad job: %d attempts, reason %q", j.Attempts, j.Result.Reason)
	}
	waitFor(t, "the good jobs to complete", func() bool {
		for _, id := range good {
			if j, _ := b.svc.Get(t.Context(), id); j == nil || j.Status != domain.StatusCompleted {
				return false
			}
		}
		return true
	})
	if got := m.got(); len(got) != 0 {
		t.Fatalf("a healthy destination's circuit changed: %v", got)
	}
}

func TestOutageDetectionOff(t *testing.T) {
	dest := newFlaky(t, http.StatusOK)
	b := outageSetup(t, nil, app.OutageConfig{FailureThreshold: -1})
	var ids []domain.JobID
	for i := range 4 {
		ids = append(ids, b.enqueue(t, req(fmt.Sprintf("k%d", i), dest.URL+"/x")))
	}
	waitFor(t, "every job to fail by its retries", func() bool {
		for _, id := range ids {
			if j, _ := b.svc.Get(t.Context(), id); j == nil || j.Status != domain.StatusFailed {
				return false
			}
		}
		return true
	})
	if c := laneCircuit(b, t, laneOf(dest.upstream)); c.State != "closed" && c.State != "" {
		t.Fatalf("circuit %+v with detection off", c)
	}
}

func TestProxyQueuesForADestinationThatIsDown(t *testing.T) {
	dest := newFlaky(t, http.StatusOK)
	b := outageSetup(t, nil, app.OutageConfig{FailureThreshold: 2})
	a := b.enqueue(t, req("a", dest.URL+"/x"))
	c := b.enqueue(t, req("c", dest.URL+"/x"))
	lane := laneOf(dest.upstream)
	waitFor(t, "the circuit to open", func() bool { return laneCircuit(b, t, lane).State == "open" })
	// With its work cancelled the lane has no backlog; its circuit still
	// knows the destination is down.
	for _, id := range []domain.JobID{a, c} {
		if _, err := b.svc.Cancel(t.Context(), id); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
	}
	hitsBefore := dest.count()
	res, err := b.svc.Proxy(t.Context(), req("p", dest.URL+"/x"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Sub.Close()
	if !res.Fallback || res.Reason != app.FallbackDegraded {
		t.Fatalf("proxy to a destination that is down: fallback %v reason %q, want %q", res.Fallback, res.Reason, app.FallbackDegraded)
	}
	if dest.count() != hitsBefore {
		t.Fatal("the proxy sent a direct attempt to a destination known to be down")
	}
}
