package pacing_test

import (
	"math"
	"testing"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

func TestPaceConfigWithDefaults(t *testing.T) {
	t.Parallel()
	nan, inf := math.NaN(), math.Inf(1)
	full := pacing.PaceConfig{RPS: 10, MaxConcurrent: 3, MinRPS: 0.5, MinORCARPS: 0.25, RecoveryFactor: 1.05, ConcurrencyRecoveryEvery: 10}
	tests := []struct {
		name string
		in   pacing.PaceConfig
		want pacing.PaceConfig
	}{
		{"unset optional fields", pacing.PaceConfig{RPS: 10, MaxConcurrent: 3}, full},
		{"explicit values kept",
			pacing.PaceConfig{RPS: 7.5, MaxConcurrent: 8, MinRPS: 1, MinORCARPS: 0.1, RecoveryFactor: 1.5, ConcurrencyRecoveryEvery: 3},
			pacing.PaceConfig{RPS: 7.5, MaxConcurrent: 8, MinRPS: 1, MinORCARPS: 0.1, RecoveryFactor: 1.5, ConcurrencyRecoveryEvery: 3}},
		{"recovery factor 1 disables recovery and is kept",
			pacing.PaceConfig{RPS: 10, MaxConcurrent: 3, RecoveryFactor: 1},
			pacing.PaceConfig{RPS: 10, MaxConcurrent: 3, MinRPS: 0.5, MinORCARPS: 0.25, RecoveryFactor: 1, ConcurrencyRecoveryEvery: 10}},
		{"negative optional fields", pacing.PaceConfig{RPS: 10, MaxConcurrent: 3, MinRPS: -1, MinORCARPS: -1, RecoveryFactor: -1, ConcurrencyRecoveryEvery: -1}, full},
		{"NaN optional fields", pacing.PaceConfig{RPS: 10, MaxConcurrent: 3, MinRPS: nan, MinORCARPS: nan, RecoveryFactor: nan}, full},
		{"Inf optional fields", pacing.PaceConfig{RPS: 10, MaxConcurrent: 3, MinRPS: inf, MinORCARPS: inf, RecoveryFactor: inf}, full},
		{"recovery factor below 1", pacing.PaceConfig{RPS: 10, MaxConcurrent: 3, RecoveryFactor: 0.9}, full},
		{"zero ceilings", pacing.PaceConfig{},
			pacing.PaceConfig{RPS: 1, MaxConcurrent: 1, MinRPS: 0.5, MinORCARPS: 0.25, RecoveryFactor: 1.05, ConcurrencyRecoveryEvery: 10}},
		{"invalid ceilings", pacing.PaceConfig{RPS: nan, MaxConcurrent: -4},
			pacing.PaceConfig{RPS: 1, MaxConcurrent: 1, MinRPS: 0.5, MinORCARPS: 0.25, RecoveryFactor: 1.05, ConcurrencyRecoveryEvery: 10}},
		{"infinite ceiling", pacing.PaceConfig{RPS: inf, MaxConcurrent: 2},
			pacing.PaceConfig{RPS: 1, MaxConcurrent: 2, MinRPS: 0.5, MinORCARPS: 0.25, RecoveryFactor: 1.05, ConcurrencyRecoveryEvery: 10}},
	}
	for _, tc := range tests {
		if got := tc.in.WithDefaults(); got != tc.want {
			t.Errorf("%s: WithDefaults = %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestNewPaceStartsAtCeiling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg      pacing.PaceConfig
		rps      float64
		maxConc  int
		ceilRPS  float64
		ceilConc int
	}{
		{pacing.PaceConfig{RPS: 10, MaxConcurrent: 3}, 10, 3, 10, 3},
		{pacing.PaceConfig{RPS: 0.1, MaxConcurrent: 1}, 0.1, 1, 0.1, 1}, // below the floor: the ceiling rules
		{pacing.PaceConfig{}, 1, 1, 1, 1},
		{pacing.PaceConfig{RPS: -3, MaxConcurrent: 0}, 1, 1, 1, 1},
	}
	for _, tc := range tests {
		p := pacing.NewPace(tc.cfg)
		r, c := p.Ceiling()
		if p.RPS() != tc.rps || p.MaxConcurrent() != tc.maxConc || r != tc.ceilRPS || c != tc.ceilConc {
			t.Errorf("NewPace(%+v): RPS=%v MaxConcurrent=%v Ceiling=%v,%v; want %v %v %v,%v",
				tc.cfg, p.RPS(), p.MaxConcurrent(), r, c, tc.rps, tc.maxConc, tc.ceilRPS, tc.ceilConc)
		}
	}
}

func TestPaceObserveRate(t *testing.T) {
	t.Parallel()
	ceil := pacing.PaceConfig{RPS: 10, MaxConcurrent: 4}
	util := func(u float64) pacing.Signals { return pacing.Signals{Utilization: u, HasUtilization: true} }
	tests := []struct {
		name    string
		cfg     pacing.PaceConfig
		start   float64 // current rps before the observation (via Restore)
		s       pacing.Signals
		want    float64
		changed bool
	}{
		// Explicit rate.
		{"explicit lowers", ceil, 10, pacing.Signals{RPS: 3}, 3, true},
		{"explicit clamped to ceiling", ceil, 10, pacing.Signals{RPS: 20}, 10, false},
		{"explicit raises back to ceiling", ceil, 1, pacing.Signals{RPS: 50}, 10, true},
		{"explicit raises partway", ceil, 1, pacing.Signals{RPS: 8}, 8, true},
		{"explicit equal to current", ceil, 3, pacing.Signals{RPS: 3}, 3, false},
		{"explicit floor 0.5", ceil, 10, pacing.Signals{RPS: 0.1}, 0.5, true},
		{"explicit exactly floor", ceil, 10, pacing.Signals{RPS: 0.5}, 0.5, true},
		{"explicit <= 0 means floor", ceil, 10, pacing.Signals{RPS: pacing.SlowestRPS}, 0.5, true},
		{"explicit +Inf is the ceiling", ceil, 2, pacing.Signals{RPS: math.Inf(1)}, 10, true},
		{"explicit custom floor", pacing.PaceConfig{RPS: 10, MaxConcurrent: 4, MinRPS: 1}, 10, pacing.Signals{RPS: 0.2}, 1, true},
		{"explicit floor above ceiling gives way", pacing.PaceConfig{RPS: 0.3, MaxConcurrent: 1}, 0.3, pacing.Signals{RPS: 0.1}, 0.3, false},
		{"explicit beats ORCA", ceil, 10, pacing.Signals{RPS: 5, Utilization: 0.99, HasUtilization: true}, 5, true},
		{"explicit beats ORCA, even raising", ceil, 0.25, pacing.Signals{RPS: 7, Utilization: 0.99, HasUtilization: true}, 7, true},

		// ORCA.
		{"orca 0.70 -> 2", ceil, 10, util(0.70), 2, true},
		{"orca 0.89 -> 2", ceil, 10, util(0.89), 2, true},
		{"orca 0.90 -> 0.5", ceil, 10, util(0.90), 0.5, true},
		{"orca 0.97 -> 0.25 literally", ceil, 10, util(0.97), 0.25, true},
		{"orca 1.0 -> 0.25", ceil, 10, util(1), 0.25, true},
		{"orca may raise", ceil, 0.25, util(0.8), 2, true},
		{"orca clamped to ceiling", pacing.PaceConfig{RPS: 1, MaxConcurrent: 1}, 1, util(0.8), 1, false},
		{"orca custom floor", pacing.PaceConfig{RPS: 10, MaxConcurrent: 1, MinORCARPS: 0.4}, 10, util(0.99), 0.4, true},
		{"orca floor above ceiling gives way", pacing.PaceConfig{RPS: 0.2, MaxConcurrent: 1}, 0.2, util(0.99), 0.2, false},
		{"orca low utilization recovers", ceil, 4, util(0.69), 4.2, true},
		{"orca utilization flag unset is ignored", ceil, 4, pacing.Signals{Utilization: 0.99}, 4.2, true},
		{"orca NaN utilization recovers", ceil, 4, util(math.NaN()), 4.2, true},

		// Recovery.
		{"no signal recovers 5%", ceil, 4, pacing.Signals{}, 4.2, true},
		{"recovery stops at the ceiling", ceil, 9.9, pacing.Signals{}, 10, true},
		{"at the ceiling nothing changes", ceil, 10, pacing.Signals{}, 10, false},
		{"NaN rate counts as absent", ceil, 4, pacing.Signals{RPS: math.NaN()}, 4.2, true},
		{"negative rate counts as absent", ceil, 4, pacing.Signals{RPS: -1}, 4.2, true},
		{"pauses alone recover", ceil, 4, pacing.Signals{RetryAfter: 5e9, ResetIn: 5e9, ResetSource: "ietf"}, 4.2, true},
		{"custom factor", pacing.PaceConfig{RPS: 10, MaxConcurrent: 1, RecoveryFactor: 2}, 3, pacing.Signals{}, 6, true},
		{"factor 1 never recovers", pacing.PaceConfig{RPS: 10, MaxConcurrent: 1, RecoveryFactor: 1}, 3, pacing.Signals{}, 3, false},
	}
	for _, tc := range tests {
		p := pacing.NewPace(tc.cfg)
		p.Restore(tc.start, p.MaxConcurrent())
		if p.RPS() != tc.start {
			t.Fatalf("%s: Restore(%v) gave %v", tc.name, tc.start, p.RPS())
		}
		changed := p.Observe(tc.s)
		if math.Abs(p.RPS()-tc.want) > 1e-12 || changed != tc.changed {
			t.Errorf("%s: from %v Observe(%+v) -> RPS %v changed %v; want %v changed %v",
				tc.name, tc.start, tc.s, p.RPS(), changed, tc.want, tc.changed)
		}
	}
}

// TestPaceRecoveryPerCompletion follows the rate back up from the floor: ×1.05
// per completion without a rate signal, exactly, until the ceiling, and never
// beyond it.
func TestPaceRecoveryPerCompletion(t *testing.T) {
	t.Parallel()
	p := pacing.NewPace(pacing.PaceConfig{RPS: 2, MaxConcurrent: 1})
	p.Observe(pacing.Signals{RPS: pacing.SlowestRPS})
	if p.RPS() != 0.5 {
		t.Fatalf("after rps<=0: RPS = %v, want the 0.5 floor", p.RPS())
	}
	want, steps := 0.5, 0
	for want < 2 {
		want = min(want*1.05, 2)
		steps++
		if !p.Observe(pacing.Signals{}) {
			t.Fatalf("step %d: Observe reported no change", steps)
		}
		if p.RPS() != want {
			t.Fatalf("step %d: RPS = %v, want %v", steps, p.RPS(), want)
		}
	}
	// 0.5 × 1.05^28 ≈ 1.96, × 1.05^29 ≈ 2.06: the 29th completion reaches the ceiling.
	if steps != 29 {
		t.Errorf("recovery from 0.5 to 2 took %d completions, want 29", steps)
	}
	for i := range 100 {
		if p.Observe(pacing.Signals{}) || p.RPS() != 2 {
			t.Fatalf("after reaching the ceiling, completion %d: RPS = %v", i, p.RPS())
		}
	}
}

func TestPaceObserveConcurrency(t *testing.T) {
	t.Parallel()
	p := pacing.NewPace(pacing.PaceConfig{RPS: 10, MaxConcurrent: 5})
	step := func(what string, s pacing.Signals, want int, changed bool) {
		t.Helper()
		if got := p.Observe(s); got != changed || p.MaxConcurrent() != want {
			t.Fatalf("%s: MaxConcurrent = %d changed %v; want %d changed %v", what, p.MaxConcurrent(), got, want, changed)
		}
	}
	quiet := func(n, want int) {
		t.Helper()
		for range n {
			step("quiet completion", pacing.Signals{}, want, false)
		}
	}

	step("lowered", pacing.Signals{MaxConcurrent: 2}, 2, true)
	step("same value", pacing.Signals{MaxConcurrent: 2}, 2, false)
	step("clamped to the ceiling", pacing.Signals{MaxConcurrent: 9}, 5, true)
	step("lowered to 1", pacing.Signals{MaxConcurrent: 1}, 1, true)
	step("raised by a signal", pacing.Signals{MaxConcurrent: 3}, 3, true)
	step("lowered again", pacing.Signals{MaxConcurrent: 1}, 1, true)

	// +1 per 10 completions without a concurrency signal.
	quiet(9, 1)
	step("10th quiet completion", pacing.Signals{}, 2, true)
	quiet(9, 2)
	// A signal restarts the count.
	step("signal restarts the count", pacing.Signals{MaxConcurrent: 2}, 2, false)
	quiet(9, 2)
	step("10th after the signal", pacing.Signals{}, 3, true)
	// Rate signals do not restart the concurrency count.
	for range 9 {
		p.Observe(pacing.Signals{RPS: 3})
	}
	step("10th with rate signals", pacing.Signals{RPS: 3}, 4, true)
	p.Restore(10, 4) // back at the rate ceiling, so quiet completions change nothing but concurrency
	quiet(9, 4)
	step("reaches the ceiling", pacing.Signals{}, 5, true)
	quiet(100, 5) // never beyond
	// The count does not build up at the ceiling.
	step("lowered at the ceiling", pacing.Signals{MaxConcurrent: 4}, 4, true)
	quiet(9, 4)
	step("10 more", pacing.Signals{}, 5, true)
}

func TestPaceConcurrencyRecoveryEvery(t *testing.T) {
	t.Parallel()
	p := pacing.NewPace(pacing.PaceConfig{RPS: 1, MaxConcurrent: 3, ConcurrencyRecoveryEvery: 1})
	p.Observe(pacing.Signals{MaxConcurrent: 1})
	for _, want := range []int{2, 3, 3, 3} {
		p.Observe(pacing.Signals{})
		if p.MaxConcurrent() != want {
			t.Fatalf("MaxConcurrent = %d, want %d", p.MaxConcurrent(), want)
		}
	}
}

func TestPaceSetCeiling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		cfg          pacing.PaceConfig
		startRPS     float64
		startConc    int
		ceilRPS      float64
		ceilConc     int
		wantRPS      float64
		wantConc     int
		wantCeil     float64
		wantCeilConc int
	}{
		{"lower clamps both", pacing.PaceConfig{RPS: 10, MaxConcurrent: 5}, 8, 4, 3, 2, 3, 2, 3, 2},
		{"lower above current keeps both", pacing.PaceConfig{RPS: 10, MaxConcurrent: 5}, 2, 1, 3, 2, 2, 1, 3, 2},
		{"raise keeps current", pacing.PaceConfig{RPS: 10, MaxConcurrent: 5}, 10, 5, 20, 8, 10, 5, 20, 8},
		{"below the floors", pacing.PaceConfig{RPS: 10, MaxConcurrent: 5}, 10, 5, 0.1, 1, 0.1, 1, 0.1, 1},
		{"invalid ceilings sanitised", pacing.PaceConfig{RPS: 10, MaxConcurrent: 5}, 10, 5, math.NaN(), 0, 1, 1, 1, 1},
		{"negative ceilings sanitised", pacing.PaceConfig{RPS: 10, MaxConcurrent: 5}, 0.25, 3, -1, -1, 0.25, 1, 1, 1},
		{"infinite ceiling sanitised", pacing.PaceConfig{RPS: 10, MaxConcurrent: 5}, 10, 5, math.Inf(1), 5, 1, 5, 1, 5},
	}
	for _, tc := range tests {
		p := pacing.NewPace(tc.cfg)
		p.Restore(tc.startRPS, tc.startConc)
		p.SetCeiling(tc.ceilRPS, tc.ceilConc)
		r, c := p.Ceiling()
		if p.RPS() != tc.wantRPS || p.MaxConcurrent() != tc.wantConc || r != tc.wantCeil || c != tc.wantCeilConc {
			t.Errorf("%s: RPS=%v MaxConcurrent=%d Ceiling=%v,%d; want %v %d %v,%d",
				tc.name, p.RPS(), p.MaxConcurrent(), r, c, tc.wantRPS, tc.wantConc, tc.wantCeil, tc.wantCeilConc)
		}
	}
}

// TestPaceSetCeilingThenRecover: a raised ceiling is approached by recovery,
// a lowered one caps recovery and signals.
func TestPaceSetCeilingThenRecover(t *testing.T) {
	t.Parallel()
	p := pacing.NewPace(pacing.PaceConfig{RPS: 2, MaxConcurrent: 1})
	p.SetCeiling(4, 2)
	if p.Observe(pacing.Signals{}); p.RPS() != 2.1 {
		t.Fatalf("recovery towards the raised ceiling: RPS = %v, want 2.1", p.RPS())
	}
	for range 9 {
		p.Observe(pacing.Signals{})
	}
	if p.MaxConcurrent() != 2 {
		t.Fatalf("concurrency recovery towards the raised ceiling: MaxConcurrent = %d, want 2", p.MaxConcurrent())
	}
	p.SetCeiling(1, 1)
	if p.Observe(pacing.Signals{RPS: 3, MaxConcurrent: 3}); p.RPS() != 1 || p.MaxConcurrent() != 1 {
		t.Fatalf("signals above the lowered ceiling: RPS=%v MaxConcurrent=%d, want 1 and 1", p.RPS(), p.MaxConcurrent())
	}
}

func TestPaceRestore(t *testing.T) {
	t.Parallel()
	cfg := pacing.PaceConfig{RPS: 10, MaxConcurrent: 5}
	tests := []struct {
		name     string
		rps      float64
		conc     int
		wantRPS  float64
		wantConc int
	}{
		{"inside", 3, 2, 3, 2},
		{"at ceiling", 10, 5, 10, 5},
		{"above ceiling", 50, 9, 10, 5},
		{"ORCA floor is reachable", 0.25, 1, 0.25, 1},
		{"between floors", 0.3, 1, 0.3, 1},
		{"below the lowest floor", 0.1, 0, 0.25, 1},
		{"zero", 0, 0, 0.25, 1},
		{"negative", -5, -5, 0.25, 1},
		{"+Inf", math.Inf(1), 3, 10, 3},
		{"-Inf", math.Inf(-1), 3, 0.25, 3},
		{"NaN keeps the rate", math.NaN(), 3, 10, 3},
	}
	for _, tc := range tests {
		p := pacing.NewPace(cfg)
		p.Restore(tc.rps, tc.conc)
		if p.RPS() != tc.wantRPS || p.MaxConcurrent() != tc.wantConc {
			t.Errorf("%s: Restore(%v, %d) -> %v, %d; want %v, %d", tc.name, tc.rps, tc.conc, p.RPS(), p.MaxConcurrent(), tc.wantRPS, tc.wantConc)
		}
	}
	// Custom floors: the lower of the two.
	p := pacing.NewPace(pacing.PaceConfig{RPS: 10, MaxConcurrent: 1, MinRPS: 0.2, MinORCARPS: 0.6})
	if p.Restore(0, 1); p.RPS() != 0.2 {
		t.Errorf("Restore(0) with floors 0.2/0.6 = %v, want 0.2", p.RPS())
	}
}

func TestPaceRestoreRestartsConcurrencyCount(t *testing.T) {
	t.Parallel()
	p := pacing.NewPace(pacing.PaceConfig{RPS: 10, MaxConcurrent: 5})
	p.Observe(pacing.Signals{MaxConcurrent: 1})
	for range 9 {
		p.Observe(pacing.Signals{})
	}
	p.Restore(10, 2)
	for range 9 {
		p.Observe(pacing.Signals{})
	}
	if p.MaxConcurrent() != 2 {
		t.Fatalf("9 completions after Restore: MaxConcurrent = %d, want 2", p.MaxConcurrent())
	}
	p.Observe(pacing.Signals{})
	if p.MaxConcurrent() != 3 {
		t.Fatalf("10 completions after Restore: MaxConcurrent = %d, want 3", p.MaxConcurrent())
	}
}

// TestPaceFromResponses runs the parser and the pace together, the way a
// lane uses them.
func TestPaceFromResponses(t *testing.T) {
	t.Parallel()
	p := pacing.NewPace(pacing.PaceConfig{RPS: 10, MaxConcurrent: 4})
	steps := []struct {
		h        []string
		wantRPS  float64
		wantConc int
	}{
		{[]string{"X-Aqueduct-Rps", "3", "X-Aqueduct-Max-Concurrent", "2"}, 3, 2},
		{[]string{"Endpoint-Load-Metrics", "TEXT named_metrics.kv_cache_usage_perc=0.98"}, 0.25, 2},
		{[]string{"X-Aquifer-Rps", "0", "Endpoint-Load-Metrics", "TEXT named_metrics.kv_cache_usage_perc=0.75"}, 0.5, 2},
		{[]string{"Endpoint-Load-Metrics", "TEXT named_metrics.kv_cache_usage_perc=0.75"}, 2, 2},
		{[]string{"Endpoint-Load-Metrics", "TEXT named_metrics.kv_cache_usage_perc=0.10"}, 2.1, 2},
		{nil, 2.205, 2},
		{[]string{"X-Aqueduct-Rps", "1000"}, 10, 2},
	}
	for i, st := range steps {
		p.Observe(pacing.ParseSignals(200, hdr(st.h...), t0))
		if math.Abs(p.RPS()-st.wantRPS) > 1e-9 || p.MaxConcurrent() != st.wantConc {
			t.Fatalf("step %d %v: RPS=%v MaxConcurrent=%d; want %v %d", i, st.h, p.RPS(), p.MaxConcurrent(), st.wantRPS, st.wantConc)
		}
	}
}
