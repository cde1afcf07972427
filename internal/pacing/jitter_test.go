package pacing_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

func constRand(v float64) func() float64 { return func() float64 { return v } }

func TestJitterZeroCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		interval time.Duration
		rnd      func() float64
	}{
		{"nil rand", time.Second, nil},
		{"zero interval", 0, constRand(0.9)},
		{"negative interval", -time.Second, constRand(0.9)},
		{"nil rand and zero interval", 0, nil},
		{"rand returns zero", time.Second, constRand(0)},
	}
	for _, tc := range tests {
		if got := pacing.Jitter(tc.interval, tc.rnd); got != 0 {
			t.Errorf("%s: Jitter = %v, want 0", tc.name, got)
		}
	}
}

func TestJitterScalesWithRand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		interval time.Duration
		r        float64
		want     time.Duration
	}{
		{time.Second, 0.5, 50 * time.Millisecond},
		{time.Second, 0.25, 25 * time.Millisecond},
		{time.Second, 0.1, 10 * time.Millisecond},
		{500 * time.Millisecond, 0.5, 25 * time.Millisecond},
		{2 * time.Second, 0.5, 100 * time.Millisecond},
		{500 * time.Microsecond, 0.5, 25 * time.Microsecond},
		{10 * time.Nanosecond, 0.5, 0}, // rounds down to whole nanoseconds
	}
	for _, tc := range tests {
		if got := pacing.Jitter(tc.interval, constRand(tc.r)); got != tc.want {
			t.Errorf("Jitter(%v, %v) = %v, want %v", tc.interval, tc.r, got, tc.want)
		}
	}
	// Monotonic in rnd.
	prev := time.Duration(-1)
	for i := range 100 {
		got := pacing.Jitter(time.Second, constRand(float64(i)/100))
		if got <= prev {
			t.Fatalf("Jitter not increasing in rnd at %d: %v after %v", i, got, prev)
		}
		prev = got
	}
}

func TestJitterRange(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, interval := range []time.Duration{time.Nanosecond, 500 * time.Microsecond, 100 * time.Millisecond, time.Second, 2 * time.Second, time.Hour} {
		bound := time.Duration(float64(interval) * pacing.JitterFraction)
		var maxSeen time.Duration
		for range 10000 {
			j := pacing.Jitter(interval, rng.Float64)
			if j < 0 || (j >= bound && bound > 0) || (bound == 0 && j != 0) {
				t.Fatalf("Jitter(%v) = %v, want in [0, %v)", interval, j, bound)
			}
			maxSeen = max(maxSeen, j)
		}
		// The draws use the range, not just a corner of it.
		if bound > 100 && maxSeen < bound*9/10 {
			t.Errorf("Jitter(%v): largest of 10000 draws %v, expected near %v", interval, maxSeen, bound)
		}
	}
	// The largest value rnd may return stays under the bound.
	top := math.Nextafter(1, 0)
	for _, interval := range []time.Duration{time.Millisecond, time.Second, time.Minute} {
		if j, bound := pacing.Jitter(interval, constRand(top)), time.Duration(float64(interval)*pacing.JitterFraction); j >= bound {
			t.Errorf("Jitter(%v, 1-ε) = %v, want < %v", interval, j, bound)
		}
	}
	if pacing.JitterFraction <= 0 || pacing.JitterFraction >= 1 {
		t.Fatalf("JitterFraction = %v, want a fraction in (0, 1)", pacing.JitterFraction)
	}
}
