package pacing_test

import (
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

func fail(job string, _ int) pacing.Failure {
	return pacing.Failure{Job: job, Reason: "connection refused"}
}

func TestCircuitDefaults(t *testing.T) {
	t.Parallel()
	got := pacing.CircuitConfig{}.WithDefaults()
	want := pacing.CircuitConfig{FailureThreshold: 3, ProbeInterval: time.Second, MaxProbeInterval: 5 * time.Minute}
	if got != want {
		t.Fatalf("WithDefaults = %+v, want %+v", got, want)
	}
	// A cap below the first interval is raised to it.
	got = pacing.CircuitConfig{ProbeInterval: time.Minute, MaxProbeInterval: time.Second}.WithDefaults()
	if got.MaxProbeInterval != time.Minute {
		t.Fatalf("MaxProbeInterval = %v, want 1m", got.MaxProbeInterval)
	}
}

func TestCircuitOpensOnFailuresAcrossJobs(t *testing.T) {
	t.Parallel()
	c := pacing.NewCircuit(pacing.CircuitConfig{FailureThreshold: 3})
	for i, job := range []string{"a", "b"} {
		if v, tr := c.Fail(fail(job, 1), t0); v != pacing.Count || tr != pacing.NoTransition {
			t.Fatalf("failure %d: %v %v, want Count and no transition", i+1, v, tr)
		}
	}
	v, tr := c.Fail(fail("c", 1), t0)
	if v != pacing.Hold || tr != pacing.Opened {
		t.Fatalf("third failure: %v %v, want Hold, Opened", v, tr)
	}
	if c.State() != pacing.CircuitOpen || !c.Since().Equal(t0) || !c.NextProbe().Equal(t0.Add(time.Second)) {
		t.Fatalf("state %v since %v next %v", c.State(), c.Since(), c.NextProbe())
	}
	if c.LastError() != "connection refused" || c.Streak() != 3 {
		t.Fatalf("last error %q streak %d", c.LastError(), c.Streak())
	}
}

func TestCircuitOneJobsRetriesDoNotOpenIt(t *testing.T) {
	t.Parallel()
	c := pacing.NewCircuit(pacing.CircuitConfig{FailureThreshold: 3})
	// One job failing again and again uses its own attempts: its request
	// may be what is wrong.
	for n := 1; n <= 10; n++ {
		if v, tr := c.Fail(fail("a", n), t0.Add(time.Duration(n)*time.Second)); v != pacing.Count || tr != pacing.NoTransition {
			t.Fatalf("attempt %d: %v %v, want Count", n, v, tr)
		}
	}
	if c.State() != pacing.CircuitClosed {
		t.Fatalf("state %v, want closed", c.State())
	}
	// A second job failing too is not enough; a third makes it the
	// destination's.
	if v, tr := c.Fail(fail("b", 1), t0); v != pacing.Count || tr != pacing.NoTransition {
		t.Fatalf("second job: %v %v, want Count", v, tr)
	}
	c.Fail(fail("a", 11), t0)
	if v, tr := c.Fail(fail("c", 1), t0); v != pacing.Hold || tr != pacing.Opened {
		t.Fatalf("third job: %v %v, want Hold, Opened", v, tr)
	}
}

func TestCircuitSuccessResetsTheStreak(t *testing.T) {
	t.Parallel()
	c := pacing.NewCircuit(pacing.CircuitConfig{FailureThreshold: 3})
	c.Fail(fail("a", 1), t0)
	c.Fail(fail("b", 1), t0)
	if tr := c.Succeed(t0); tr != pacing.NoTransition {
		t.Fatalf("success on a closed circuit: %v", tr)
	}
	if c.Streak() != 0 {
		t.Fatalf("streak %d after success", c.Streak())
	}
	if v, _ := c.Fail(fail("c", 1), t0); v != pacing.Count {
		t.Fatal("one failure after a success opened the circuit")
	}
}

func TestCircuitProbesBackOffAndCloseOnSuccess(t *testing.T) {
	t.Parallel()
	c := pacing.NewCircuit(pacing.CircuitConfig{FailureThreshold: 2, ProbeInterval: time.Second, MaxProbeInterval: 5 * time.Second})
	c.Fail(fail("a", 1), t0)
	c.Fail(fail("b", 1), t0)
	now := t0
	var waits []time.Duration
	for range 5 {
		ok, probe, wait := c.Allow(now)
		if ok || probe {
			t.Fatalf("allowed before the probe time at %v", now)
		}
		waits = append(waits, wait)
		now = now.Add(wait)
		ok, probe, _ = c.Allow(now)
		if !ok || !probe {
			t.Fatalf("probe not offered at %v", now)
		}
		c.StartProbe()
		if c.State() != pacing.CircuitHalfOpen {
			t.Fatalf("state %v after StartProbe", c.State())
		}
		if ok, _, _ := c.Allow(now); ok {
			t.Fatal("half-open circuit allowed a second start")
		}
		// An attempt that started before the circuit opened fails meanwhile:
		// held, and the probe still decides.
		if v, tr := c.Fail(fail("c", 1), now); v != pacing.Hold || tr != pacing.NoTransition || c.State() != pacing.CircuitHalfOpen {
			t.Fatalf("old attempt failing while half-open: %v %v %v", v, tr, c.State())
		}
		p := fail("a", 2)
		p.Probe = true
		if v, tr := c.Fail(p, now); v != pacing.Hold || tr != pacing.Reopened {
			t.Fatalf("failed probe: %v %v, want Hold, Reopened", v, tr)
		}
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("probe waits %v, want %v", waits, want)
		}
	}
	if c.Probes() != 5 || !c.Since().Equal(t0) {
		t.Fatalf("probes %d since %v", c.Probes(), c.Since())
	}
	now = now.Add(5 * time.Second)
	c.Allow(now)
	c.StartProbe()
	if tr := c.Succeed(now); tr != pacing.Closed {
		t.Fatalf("successful probe: %v, want Closed", tr)
	}
	if ok, _, _ := c.Allow(now); !ok || c.State() != pacing.CircuitClosed || c.Streak() != 0 {
		t.Fatalf("after closing: state %v streak %d", c.State(), c.Streak())
	}
	// The next outage starts again from the first interval.
	c.Fail(fail("a", 1), now)
	c.Fail(fail("b", 1), now)
	if !c.NextProbe().Equal(now.Add(time.Second)) {
		t.Fatalf("next outage probes at %v, want +1s", c.NextProbe().Sub(now))
	}
}

func TestCircuitFailuresWhileOpenAreHeld(t *testing.T) {
	t.Parallel()
	c := pacing.NewCircuit(pacing.CircuitConfig{FailureThreshold: 2})
	c.Fail(fail("a", 1), t0)
	c.Fail(fail("b", 1), t0)
	next := c.NextProbe()
	for i := range 10 {
		if v, tr := c.Fail(fail("x", 5), t0.Add(time.Duration(i)*time.Millisecond)); v != pacing.Hold || tr != pacing.NoTransition {
			t.Fatalf("failure while open: %v %v", v, tr)
		}
	}
	if !c.NextProbe().Equal(next) {
		t.Fatal("failures of attempts that were already running moved the probe")
	}
}

func TestCircuitAbandonedProbe(t *testing.T) {
	t.Parallel()
	c := pacing.NewCircuit(pacing.CircuitConfig{FailureThreshold: 2})
	c.Fail(fail("a", 1), t0)
	c.Fail(fail("b", 1), t0)
	now := c.NextProbe()
	c.Allow(now)
	c.StartProbe()
	c.AbandonProbe(now)
	if ok, probe, _ := c.Allow(now); !ok || !probe || c.State() != pacing.CircuitOpen {
		t.Fatalf("after an abandoned probe: ok %v probe %v state %v", ok, probe, c.State())
	}
}

func TestCircuitDisabled(t *testing.T) {
	t.Parallel()
	c := pacing.NewCircuit(pacing.CircuitConfig{FailureThreshold: -1})
	for n := 1; n <= 20; n++ {
		if v, tr := c.Fail(fail(string(rune('a'+n)), 5), t0); v != pacing.Count || tr != pacing.NoTransition {
			t.Fatalf("disabled circuit: %v %v", v, tr)
		}
	}
	if ok, _, _ := c.Allow(t0); !ok || c.Enabled() {
		t.Fatal("disabled circuit holds work")
	}
}

func TestCircuitStateNames(t *testing.T) {
	t.Parallel()
	for s, want := range map[pacing.CircuitState]string{pacing.CircuitClosed: "closed", pacing.CircuitOpen: "open", pacing.CircuitHalfOpen: "half_open"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
		}
	}
}
