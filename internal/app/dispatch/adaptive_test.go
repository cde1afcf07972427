package dispatch

import (
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

// adaptiveLane is a lane with just what observeAdaptive uses: a pace of
// 100 rps and conc concurrent, its gate, and an adaptive limit under the
// ceiling conc, probing from t0.
func adaptiveLane(conc int) *lane {
	l := &lane{log: zap.NewNop(), pace: pacing.NewPace(pacing.PaceConfig{RPS: 100, MaxConcurrent: conc}),
		gate: pacing.NewGate(conc), adaptive: pacing.NewAdaptive(pacing.AdaptiveConfig{MaxConcurrent: conc}, t0)}
	l.setConcurrency()
	return l
}

// The lane feeds the adaptive limit only exchanges that measure the
// destination's load: not a 429 (a quota's answer), not an attempt that
// never reached it (rtt 0). Each sample that moves the limit moves the gate,
// and the reason follows.
func TestObserveAdaptiveFeedsTheGate(t *testing.T) {
	l := adaptiveLane(256)
	if l.gate.Limit() != pacing.DefaultAdaptiveProbeConcurrency {
		t.Fatalf("gate %d at the start, want the probe's %d", l.gate.Limit(), pacing.DefaultAdaptiveProbeConcurrency)
	}
	at := t0.Add(time.Second)
	for range 20 {
		l.observeAdaptive(&outcome{status: http.StatusTooManyRequests, observed: true, rtt: 5 * time.Millisecond}, 1, at)
		l.observeAdaptive(&outcome{failed: true}, 1, at) // could not be built: no exchange
	}
	if !l.adaptive.Probing() {
		t.Fatal("429s and attempts without an exchange ended the probe")
	}
	for range pacing.DefaultAdaptiveMinSamples {
		l.observeAdaptive(&outcome{status: http.StatusOK, observed: true, rtt: 10 * time.Millisecond}, 1, at)
	}
	if l.adaptive.Probing() || l.adaptive.NoLoadRTT() != 10*time.Millisecond {
		t.Fatalf("probing %v, no-load RTT %v; want the probe over at 10ms", l.adaptive.Probing(), l.adaptive.NoLoadRTT())
	}
	if want := "adaptive: limit 4 of 256, no-load RTT 10ms"; l.adaptiveReason != want {
		t.Fatalf("reason %q, want %q", l.adaptiveReason, want)
	}
	// A window of successes in no-load time, with the lane using its limit:
	// the limit grows, and the gate with it.
	for range pacing.DefaultAdaptiveMinSamples {
		at = at.Add(30 * time.Millisecond)
		l.observeAdaptive(&outcome{status: http.StatusOK, observed: true, rtt: 10 * time.Millisecond}, 4, at)
	}
	if l.gate.Limit() <= 4 || l.gate.Limit() != l.adaptive.Limit() {
		t.Fatalf("gate %d, adaptive %d after a fast window; want both above 4", l.gate.Limit(), l.adaptive.Limit())
	}
	// A failed window backs off.
	before := l.gate.Limit()
	at = at.Add(300 * time.Millisecond)
	l.observeAdaptive(&outcome{status: http.StatusBadGateway, observed: true, failed: true, rtt: time.Millisecond}, 4, at)
	if l.gate.Limit() >= before {
		t.Fatalf("gate %d after a 502, want below %d", l.gate.Limit(), before)
	}
}

// The gate runs at the lower of the pace's limit (lowered by a signal) and
// the adaptive one.
func TestAdaptiveLaneRunsAtTheLowerLimit(t *testing.T) {
	l := adaptiveLane(256)
	l.adaptive.Restore(100)
	at := t0.Add(time.Second)
	for range pacing.DefaultAdaptiveMinSamples {
		l.observeAdaptive(&outcome{status: http.StatusOK, observed: true, rtt: 10 * time.Millisecond}, 1, at)
	}
	if l.gate.Limit() != 100 {
		t.Fatalf("gate %d after the probe, want the restored adaptive 100", l.gate.Limit())
	}
	l.pace.Observe(pacing.Signals{MaxConcurrent: 7})
	l.setConcurrency()
	if l.gate.Limit() != 7 {
		t.Fatalf("gate %d with X-Aqueduct-Max-Concurrent: 7, want 7", l.gate.Limit())
	}
}
