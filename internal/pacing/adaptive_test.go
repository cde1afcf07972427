package pacing

import (
	"container/heap"
	"slices"
	"testing"
	"time"
)

// backend is a simulated destination for the adaptive limit, run on a fake
// clock: up to capacity requests at once it answers in base; past it a
// request queues, and takes base × running ÷ capacity (running counted when
// it arrives, itself included) — so throughput stops rising at capacity
// and latency starts to. Past overloadAt running it answers 503 at once.
type backend struct {
	base       time.Duration
	capacity   int
	overloadAt int                  // 503 past this many running (0: 2 × capacity)
	fail       func(n int) bool     // an extra failure rule, by request number (nil: none)
	latency    func() time.Duration // base override (nil: base)
}

// simEvent is a request in flight in the simulation.
type simEvent struct {
	end    time.Time
	rtt    time.Duration
	failed bool
}

type eventHeap []simEvent

func (h eventHeap) Len() int           { return len(h) }
func (h eventHeap) Less(i, j int) bool { return h[i].end.Before(h[j].end) }
func (h eventHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)        { *h = append(*h, x.(simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// sim runs an adaptive limit against a backend on a fake clock.
type sim struct {
	a       *Adaptive
	be      *backend
	now     time.Time
	running eventHeap
	sent    int
	// demand caps how many requests the lane has to send at once (0: an
	// endless backlog).
	demand int
}

// trace is what the simulation saw at each completion.
type trace struct {
	at      time.Time
	limit   int
	probing bool
	rtt     time.Duration
	failed  bool
}

var simT0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func newSim(cfg AdaptiveConfig, be *backend) *sim {
	return &sim{a: NewAdaptive(cfg, simT0), be: be, now: simT0}
}

// run advances the simulation until d has passed, calling each completion
// into the limit, and returns what it saw.
func (s *sim) run(d time.Duration) []trace {
	var out []trace
	until := s.now.Add(d)
	for {
		s.fill()
		if len(s.running) == 0 || s.running[0].end.After(until) {
			s.now = until
			return out
		}
		ev := heap.Pop(&s.running).(simEvent)
		s.now = ev.end
		s.a.Observe(s.now, AdaptiveSample{RTT: ev.rtt, InFlight: len(s.running) + 1, Failed: ev.failed})
		out = append(out, trace{at: s.now, limit: s.a.Limit(), probing: s.a.Probing(), rtt: ev.rtt, failed: ev.failed})
	}
}

// fill starts requests while the limit (and the demand) allows.
func (s *sim) fill() {
	for len(s.running) < s.a.Limit() && (s.demand == 0 || len(s.running) < s.demand) {
		s.sent++
		n := len(s.running) + 1
		base := s.be.base
		if s.be.latency != nil {
			base = s.be.latency()
		}
		overload := s.be.overloadAt
		if overload == 0 {
			overload = 2 * s.be.capacity
		}
		ev := simEvent{rtt: base}
		switch {
		case n > overload:
			ev.rtt, ev.failed = base/10, true
		case s.be.fail != nil && s.be.fail(s.sent):
			ev.failed = true
		case n > s.be.capacity:
			ev.rtt = base * time.Duration(n) / time.Duration(s.be.capacity)
		}
		ev.end = s.now.Add(ev.rtt)
		heap.Push(&s.running, ev)
	}
}

// settled returns the lowest and highest limit outside probes in tr from
// time from on, whether any request failed then, and the p99 RTT then.
func settled(tr []trace, from time.Time) (lo, hi int, failed bool, p99 time.Duration) {
	lo = 1 << 30
	var rtts []time.Duration
	for _, e := range tr {
		if e.at.Before(from) {
			continue
		}
		failed = failed || e.failed
		rtts = append(rtts, e.rtt)
		if e.probing {
			continue
		}
		lo, hi = min(lo, e.limit), max(hi, e.limit)
	}
	slices.Sort(rtts)
	if len(rtts) > 0 {
		p99 = rtts[len(rtts)*99/100]
	}
	return lo, hi, failed, p99
}

func within(v, want int, frac float64) bool {
	return float64(v) >= float64(want)*(1-frac) && float64(v) <= float64(want)*(1+frac)
}

// A backend of capacity 40 behind a ceiling of 256: the limit settles
// within 20 % of 40 with no 503s and p99 under 2 × the unloaded latency,
// and follows the capacity when it halves.
func TestAdaptiveSettlesNearCapacityAndFollowsAHalving(t *testing.T) {
	be := &backend{base: 50 * time.Millisecond, capacity: 40}
	s := newSim(AdaptiveConfig{MaxConcurrent: 256}, be)
	tr := s.run(30 * time.Second)
	if got := s.a.NoLoadRTT(); got != be.base {
		t.Fatalf("no-load RTT %v, want %v", got, be.base)
	}
	lo, hi, failed, p99 := settled(tr, simT0.Add(10*time.Second))
	if !within(lo, 40, 0.2) || !within(hi, 40, 0.2) {
		t.Fatalf("limit between %d and %d after 10 s, want within 20%% of 40", lo, hi)
	}
	if failed {
		t.Fatal("503s after the first 10 s")
	}
	if p99 > 2*be.base {
		t.Fatalf("p99 RTT %v after 10 s, want <= %v", p99, 2*be.base)
	}
	// Throughput: completions per second of the settled part, against the
	// backend's maximum of capacity ÷ base = 800/s.
	n := 0
	for _, e := range tr {
		if !e.at.Before(simT0.Add(10*time.Second)) && !e.failed {
			n++
		}
	}
	if rate := float64(n) / 20; rate < 0.9*800 {
		t.Fatalf("throughput %.0f/s after 10 s, want >= 90%% of 800/s", rate)
	}

	halved := s.now
	be.capacity = 20
	tr = s.run(30 * time.Second)
	lo, hi, failed, _ = settled(tr, halved.Add(10*time.Second))
	if !within(lo, 20, 0.2) || !within(hi, 20, 0.2) {
		t.Fatalf("limit between %d and %d from 10 s after the halving, want within 20%% of 20", lo, hi)
	}
	if failed {
		t.Fatal("503s from 10 s after the halving")
	}
}

// The same inputs give the same limits, sample for sample.
func TestAdaptiveIsDeterministic(t *testing.T) {
	runOnce := func() []trace {
		return newSim(AdaptiveConfig{MaxConcurrent: 256}, &backend{base: 30 * time.Millisecond, capacity: 25}).run(20 * time.Second)
	}
	a, b := runOnce(), runOnce()
	if !slices.Equal(a, b) {
		t.Fatal("two runs of the same simulation differ")
	}
}

// 5xx answers cut the limit multiplicatively, window by window; once they
// stop it recovers additively — more slowly than it fell.
func TestAdaptiveBacksOffOnFailuresAndRecoversSlowly(t *testing.T) {
	var failing bool
	be := &backend{base: 20 * time.Millisecond, capacity: 1000,
		fail: func(int) bool { return failing }}
	s := newSim(AdaptiveConfig{MaxConcurrent: 100}, be)
	s.run(20 * time.Second)
	if l := s.a.Limit(); l != 100 {
		t.Fatalf("limit %d against a backend far above the ceiling, want the ceiling 100", l)
	}
	failing = true
	tr := s.run(2 * time.Second)
	fell := s.a.Limit()
	if fell > 30 {
		t.Fatalf("limit %d after 2 s of 5xx, want it cut well below 100", fell)
	}
	for i := 1; i < len(tr); i++ {
		if !tr[i].probing && !tr[i-1].probing && tr[i].limit > tr[i-1].limit {
			t.Fatalf("limit rose from %d to %d while every answer failed", tr[i-1].limit, tr[i].limit)
		}
	}
	failing = false
	s.run(1 * time.Second)
	if l := s.a.Limit(); l <= fell || l >= 100 {
		t.Fatalf("limit %d 1 s after the failures stopped (from %d), want it recovering, not back at 100", l, fell)
	}
	s.run(20 * time.Second)
	if l := s.a.Limit(); l != 100 {
		t.Fatalf("limit %d 20 s after the failures stopped, want the ceiling 100 again", l)
	}
}

// The limit stays in [1, MaxConcurrent] whatever the backend does: one that
// only ever fails drives it to 1, never below; one with room for more than
// the ceiling lifts it to the ceiling, never above.
func TestAdaptiveStaysWithinOneAndTheCeiling(t *testing.T) {
	s := newSim(AdaptiveConfig{MaxConcurrent: 64}, &backend{base: 10 * time.Millisecond, capacity: 1000})
	for _, e := range s.run(10 * time.Second) {
		if e.limit < 1 || e.limit > 64 {
			t.Fatalf("limit %d outside [1, 64]", e.limit)
		}
	}
	if l := s.a.Limit(); l != 64 {
		t.Fatalf("limit %d, want the ceiling 64", l)
	}
	s.be.fail = func(int) bool { return true }
	for _, e := range s.run(10 * time.Second) {
		if e.limit < 1 || e.limit > 64 {
			t.Fatalf("limit %d outside [1, 64]", e.limit)
		}
	}
	if l := s.a.Limit(); l != 1 {
		t.Fatalf("limit %d against a backend that always fails, want 1", l)
	}
	s.a.SetCeiling(0)
	if s.a.Limit() != 1 || s.a.Ceiling() != 1 {
		t.Fatalf("SetCeiling(0): limit %d ceiling %d, want 1 and 1", s.a.Limit(), s.a.Ceiling())
	}
}

// A lane that never uses half its limit gives no evidence the destination
// can take more: the limit does not grow.
func TestAdaptiveDoesNotGrowWhileTheLaneIsIdle(t *testing.T) {
	s := newSim(AdaptiveConfig{MaxConcurrent: 256, ProbeConcurrency: 8}, &backend{base: 10 * time.Millisecond, capacity: 1000})
	s.demand = 2
	s.run(30 * time.Second)
	if l := s.a.Limit(); l != 8 {
		t.Fatalf("limit %d after 30 s of 2 requests at a time, want it left at 8", l)
	}
}

// A destination that got slower for good is not mistaken for overload for
// long: the next probe measures the new no-load RTT and the limit climbs
// back towards the capacity.
func TestAdaptiveProbeRemeasuresTheNoLoadRTT(t *testing.T) {
	lat := 20 * time.Millisecond
	be := &backend{base: lat, capacity: 40, latency: func() time.Duration { return lat }}
	s := newSim(AdaptiveConfig{MaxConcurrent: 256, ProbeEvery: 10 * time.Second}, be)
	s.run(9 * time.Second)
	if s.a.NoLoadRTT() != 20*time.Millisecond {
		t.Fatalf("no-load RTT %v, want 20ms", s.a.NoLoadRTT())
	}
	lat = 60 * time.Millisecond
	sawProbe := false
	for _, e := range s.run(20 * time.Second) {
		sawProbe = sawProbe || e.probing
	}
	if !sawProbe {
		t.Fatal("no probe in 20 s with ProbeEvery 10 s")
	}
	if got := s.a.NoLoadRTT(); got != 60*time.Millisecond {
		t.Fatalf("no-load RTT %v after the destination slowed to 60ms, want 60ms", got)
	}
	if l := s.a.Limit(); !within(l, 40, 0.2) {
		t.Fatalf("limit %d after the re-measure, want within 20%% of 40", l)
	}
}

// The probe waits for the running attempts to drain to its concurrency
// before it measures: samples from before cannot count.
func TestAdaptiveProbeIgnoresAttemptsStartedBeforeItDrained(t *testing.T) {
	a := NewAdaptive(AdaptiveConfig{MaxConcurrent: 100, ProbeConcurrency: 2, MinSamples: 2}, simT0)
	at := simT0.Add(time.Second)
	// Started before the probe began: not a no-load measurement.
	a.Observe(at, AdaptiveSample{RTT: 2 * time.Second, InFlight: 2})
	a.Observe(at, AdaptiveSample{RTT: 2 * time.Second, InFlight: 1})
	if !a.Probing() || a.NoLoadRTT() != 0 {
		t.Fatalf("probing %v no-load %v after samples that began before the probe", a.Probing(), a.NoLoadRTT())
	}
	a.Observe(at, AdaptiveSample{RTT: 100 * time.Millisecond, InFlight: 2})
	a.Observe(at, AdaptiveSample{RTT: 300 * time.Millisecond, InFlight: 1})
	if a.Probing() || a.NoLoadRTT() != 200*time.Millisecond {
		t.Fatalf("probing %v no-load %v, want the mean 200ms of the probe's samples", a.Probing(), a.NoLoadRTT())
	}
	if a.Limit() != 2 {
		t.Fatalf("limit %d after the first probe, want to start at the probe's 2", a.Limit())
	}
}

func TestAdaptiveConfigDefaults(t *testing.T) {
	c := AdaptiveConfig{MaxConcurrent: 2, Smoothing: 3, MinGradient: -1, Backoff: 1}.WithDefaults()
	want := AdaptiveConfig{MaxConcurrent: 2, ProbeConcurrency: 2, Window: DefaultAdaptiveWindow,
		MinSamples: DefaultAdaptiveMinSamples, Smoothing: DefaultAdaptiveSmoothing, MinGradient: DefaultAdaptiveMinGradient,
		Backoff: DefaultAdaptiveBackoff, ProbeEvery: DefaultAdaptiveProbeEvery}
	if c != want {
		t.Fatalf("WithDefaults = %+v, want %+v", c, want)
	}
	if r := NewAdaptive(AdaptiveConfig{MaxConcurrent: 9}, simT0).Reason(); r == "" {
		t.Fatal("empty reason")
	}
}

// A restored limit holds once the probe it starts with has measured the
// no-load RTT, clamped to the ceiling.
func TestAdaptiveRestore(t *testing.T) {
	s := newSim(AdaptiveConfig{MaxConcurrent: 50}, &backend{base: 10 * time.Millisecond, capacity: 1000})
	s.a.Restore(30)
	if s.a.Limit() != DefaultAdaptiveProbeConcurrency {
		t.Fatalf("limit %d during the first probe, want the probe's %d", s.a.Limit(), DefaultAdaptiveProbeConcurrency)
	}
	tr := s.run(time.Second)
	first := slices.IndexFunc(tr, func(e trace) bool { return !e.probing })
	if first < 0 || tr[first].limit != 30 {
		t.Fatalf("limit after the probe %v, want the restored 30", tr[first:min(first+1, len(tr))])
	}
	s.a.Restore(500)
	if s.a.Limit() != 50 {
		t.Fatalf("Restore(500) gives %d, want the ceiling 50", s.a.Limit())
	}
}

// FuzzAdaptive feeds arbitrary sample sequences (RTTs zero, negative or
// huge; any in-flight count; failures) and checks the limit never leaves
// [1, MaxConcurrent] and the measured RTTs stay positive.
func FuzzAdaptive(f *testing.F) {
	f.Add(uint8(40), []byte{10, 4, 0, 10, 4, 2, 200, 40, 1, 0, 0, 0})
	f.Add(uint8(1), []byte{255, 255, 255})
	f.Fuzz(func(t *testing.T, ceiling uint8, raw []byte) {
		a := NewAdaptive(AdaptiveConfig{MaxConcurrent: int(ceiling), MinSamples: 2}, simT0)
		at := simT0
		for i := 0; i+2 < len(raw); i += 3 {
			rtt := time.Duration(raw[i]) * time.Millisecond
			if raw[i+2]&0x80 != 0 {
				rtt = -rtt
			}
			at = at.Add(time.Duration(raw[i+2]&0x7e) * 10 * time.Millisecond)
			a.Observe(at, AdaptiveSample{RTT: rtt, InFlight: int(raw[i+1]), Failed: raw[i+2]&1 != 0})
			if l := a.Limit(); l < 1 || l > max(int(ceiling), 1) {
				t.Fatalf("limit %d outside [1, %d]", l, max(int(ceiling), 1))
			}
			if a.NoLoadRTT() < 0 || a.RTT() < 0 {
				t.Fatalf("no-load RTT %v, RTT %v: negative", a.NoLoadRTT(), a.RTT())
			}
			_ = a.Reason()
		}
	})
}
