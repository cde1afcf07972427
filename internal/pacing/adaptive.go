package pacing

import (
	"fmt"
	"math"
	"time"
)

// Defaults for the optional AdaptiveConfig fields.
const (
	DefaultAdaptiveProbeConcurrency = 4
	DefaultAdaptiveWindow           = 250 * time.Millisecond
	DefaultAdaptiveMinSamples       = 10
	DefaultAdaptiveSmoothing        = 0.2
	DefaultAdaptiveMinGradient      = 0.5
	DefaultAdaptiveBackoff          = 0.8
	DefaultAdaptiveProbeEvery       = 30 * time.Second
)

// AdaptiveConfig configures an Adaptive concurrency limit.
type AdaptiveConfig struct {
	MaxConcurrent int // configured ceiling (required, >= 1): the limit never goes above it
	// ProbeConcurrency is the limit while the no-load RTT is measured; it
	// is also where the limit starts. Default 4 (at most the ceiling).
	ProbeConcurrency int
	// Window is the shortest sampling window; a window also lasts at least
	// as long as the last window's RTT, so slow destinations get a full
	// turn of their requests per window. Default 250 ms.
	Window time.Duration
	// MinSamples is how many successful samples, started inside a window,
	// it needs before it closes (a failure closes it anyway). Default 10.
	MinSamples int
	// Smoothing is how far each window moves a falling limit towards its
	// target (0 < s <= 1). Default 0.2.
	Smoothing float64
	// MinGradient bounds how much one window can cut the limit on latency
	// alone (0 < g <= 1). Default 0.5.
	MinGradient float64
	// Backoff multiplies the limit after a window with a 5xx or a
	// transport error (0 < b < 1). Default 0.8.
	Backoff float64
	// ProbeEvery is how often the no-load RTT is measured afresh. Default
	// 30 s.
	ProbeEvery time.Duration
}

// WithDefaults returns c with every unset or invalid field replaced by its
// default; MaxConcurrent < 1 becomes 1 and ProbeConcurrency is capped at it.
func (c AdaptiveConfig) WithDefaults() AdaptiveConfig {
	c.MaxConcurrent = max(c.MaxConcurrent, 1)
	if c.ProbeConcurrency < 1 {
		c.ProbeConcurrency = DefaultAdaptiveProbeConcurrency
	}
	c.ProbeConcurrency = min(c.ProbeConcurrency, c.MaxConcurrent)
	if c.Window <= 0 {
		c.Window = DefaultAdaptiveWindow
	}
	if c.MinSamples < 1 {
		c.MinSamples = DefaultAdaptiveMinSamples
	}
	if !(c.Smoothing > 0 && c.Smoothing <= 1) {
		c.Smoothing = DefaultAdaptiveSmoothing
	}
	if !(c.MinGradient > 0 && c.MinGradient <= 1) {
		c.MinGradient = DefaultAdaptiveMinGradient
	}
	if !(c.Backoff > 0 && c.Backoff < 1) {
		c.Backoff = DefaultAdaptiveBackoff
	}
	if c.ProbeEvery <= 0 {
		c.ProbeEvery = DefaultAdaptiveProbeEvery
	}
	return c
}

// AdaptiveSample is one finished attempt as the adaptive limit sees it.
type AdaptiveSample struct {
	// RTT is how long the exchange took, request sent to response read.
	RTT time.Duration
	// InFlight is how many attempts were running when it ended, itself
	// included: it tells whether the lane was using its limit at all.
	InFlight int
	// Failed is a 5xx or a transport error (a timeout among them): the
	// destination is overloaded or failing, whatever the latency says.
	Failed bool
}

// Adaptive finds the concurrency a destination that sends no pacing
// signals can take, from latency alone — a gradient limit in the manner of
// Netflix concurrency-limits' Gradient2 and Envoy's adaptive concurrency
// filter.
//
// The idea: below its capacity a destination answers in its no-load RTT
// whatever the concurrency; past it, requests queue and the RTT grows with
// the concurrency. So the ratio noLoadRTT ÷ RTT says how far over capacity
// the lane is, and limit × that ratio is about the capacity. Each sampling
// window sets
//
//	target = limit × clamp(noLoadRTT ÷ RTT, MinGradient, 1) + allowance
//
// where RTT is the mean RTT of the window's successful attempts and
// allowance = max(1, √limit ÷ 2) is a small queue at the destination that
// keeps the limit probing upwards (without it the limit could only fall).
// A target above the limit is taken at once — growth is additive, by the
// allowance, so recovery is slow — and one below is approached by
// Smoothing per window, so one noisy window cannot halve the lane. At
// steady state the limit sits at capacity plus the allowance: latency a few
// per cent over the no-load RTT, throughput at the destination's maximum.
// A window in which any attempt failed (5xx, transport error, timeout)
// multiplies the limit by Backoff instead. The limit never grows in a
// window where the lane used less than half of it (the lane was idle, not
// the destination fast), and always stays within [1, MaxConcurrent].
//
// Only attempts started inside a window count towards its RTT, so every
// window measures the limit it was given, not the one before; failures
// count whenever they end, since a timeout started long ago.
//
// The no-load RTT is measured, not guessed: the limit starts with a probe —
// ProbeConcurrency attempts at a time, which an unknown destination can
// surely take — and the mean RTT of the probe's first MinSamples successes
// is the no-load RTT. Between probes it is the minimum of every window's
// RTT (a long-window minimum). Every ProbeEvery the probe runs again: the
// limit drops to ProbeConcurrency until the attempts running drain to that,
// MinSamples attempts started after are measured, and the limit returns to
// where it was. Re-measuring lets the no-load RTT follow a destination
// that got slower for good (else the lane would read it as overload and
// stay low), and keeps the minimum from creeping up under sustained queueing.
//
// Everything runs on the caller's clock (now), so it is deterministic
// under a fake one. An Adaptive is not safe for concurrent use.
type Adaptive struct {
	cfg   AdaptiveConfig
	limit float64 // the limit outside probes

	noLoad time.Duration // measured no-load RTT (0: not yet)
	rtt    time.Duration // the last closed window's mean RTT

	// The open window.
	winStart    time.Time
	winSum      time.Duration // RTT sum of the successes started inside it
	winN        int
	winFailed   int
	winInFlight int // most attempts running at a sample's end

	// The probe. probing: the limit is ProbeConcurrency; probeFrom zero:
	// waiting for the running attempts to drain to it.
	probing   bool
	probeFrom time.Time
	probeSum  time.Duration
	probeN    int
	nextProbe time.Time
}

// NewAdaptive returns an adaptive limit that starts, at now, with a probe
// of the no-load RTT at ProbeConcurrency; nothing is running yet, so the
// probe measures from now.
func NewAdaptive(cfg AdaptiveConfig, now time.Time) *Adaptive {
	cfg = cfg.WithDefaults()
	return &Adaptive{cfg: cfg, limit: float64(cfg.ProbeConcurrency), probing: true, probeFrom: now}
}

// Limit returns the current concurrency limit: ProbeConcurrency during a
// probe, else the learned limit, in [1, MaxConcurrent].
func (a *Adaptive) Limit() int {
	if a.probing {
		return a.cfg.ProbeConcurrency
	}
	return min(max(int(a.limit), 1), a.cfg.MaxConcurrent)
}

// NoLoadRTT returns the measured no-load RTT (0 until the first probe ends).
func (a *Adaptive) NoLoadRTT() time.Duration { return a.noLoad }

// RTT returns the mean RTT of the last sampling window (0 before the first).
func (a *Adaptive) RTT() time.Duration { return a.rtt }

// Probing reports whether the no-load RTT is being measured.
func (a *Adaptive) Probing() bool { return a.probing }

// Ceiling returns the configured maximum concurrency.
func (a *Adaptive) Ceiling() int { return a.cfg.MaxConcurrent }

// SetCeiling changes the maximum concurrency (at least 1); the limit is
// clamped to it.
func (a *Adaptive) SetCeiling(maxConcurrent int) {
	a.cfg.MaxConcurrent = max(maxConcurrent, 1)
	a.cfg.ProbeConcurrency = min(a.cfg.ProbeConcurrency, a.cfg.MaxConcurrent)
	a.limit = min(a.limit, float64(a.cfg.MaxConcurrent))
}

// Restore sets the learned limit (carried over from a previous holder of
// the lane), clamped to [1, MaxConcurrent]. A probe running now still
// runs; the limit takes effect when it ends.
func (a *Adaptive) Restore(limit int) {
	a.limit = float64(min(max(limit, 1), a.cfg.MaxConcurrent))
}

// Reason says, for operators, what holds the limit where it is, e.g.
// "adaptive: limit 42 of 256, no-load RTT 50ms, RTT 53ms".
func (a *Adaptive) Reason() string {
	if a.probing {
		if a.noLoad == 0 {
			return fmt.Sprintf("adaptive: measuring the no-load RTT at %d concurrent (ceiling %d)",
				a.cfg.ProbeConcurrency, a.cfg.MaxConcurrent)
		}
		return fmt.Sprintf("adaptive: re-measuring the no-load RTT at %d concurrent (was %v; limit %d of %d after)",
			a.cfg.ProbeConcurrency, a.noLoad, min(max(int(a.limit), 1), a.cfg.MaxConcurrent), a.cfg.MaxConcurrent)
	}
	if a.rtt == 0 {
		return fmt.Sprintf("adaptive: limit %d of %d, no-load RTT %v", a.Limit(), a.cfg.MaxConcurrent, a.noLoad)
	}
	return fmt.Sprintf("adaptive: limit %d of %d, no-load RTT %v, RTT %v", a.Limit(), a.cfg.MaxConcurrent, a.noLoad, a.rtt)
}

// Observe folds one finished attempt, ended at now, into the limit and
// reports whether Limit changed.
func (a *Adaptive) Observe(now time.Time, s AdaptiveSample) bool {
	old := a.Limit()
	started := now.Add(-max(s.RTT, 0))
	if a.probing {
		a.observeProbe(now, started, s)
	} else {
		a.observeWindow(now, started, s)
	}
	return a.Limit() != old
}

// observeProbe takes a sample during a probe of the no-load RTT.
func (a *Adaptive) observeProbe(now, started time.Time, s AdaptiveSample) {
	if a.probeFrom.IsZero() {
		if s.InFlight <= a.cfg.ProbeConcurrency {
			a.probeFrom = now // drained: what starts from now on runs at the probe's concurrency
		}
		return
	}
	if s.Failed || started.Before(a.probeFrom) {
		return
	}
	a.probeSum += s.RTT
	a.probeN++
	if a.probeN < a.cfg.MinSamples {
		return
	}
	a.noLoad = max(a.probeSum/time.Duration(a.probeN), 1)
	a.probing, a.probeFrom, a.probeSum, a.probeN = false, time.Time{}, 0, 0
	a.nextProbe = now.Add(a.cfg.ProbeEvery)
	a.openWindow(now)
}

// observeWindow takes a sample outside a probe, and closes the window when
// it has enough.
func (a *Adaptive) observeWindow(now, started time.Time, s AdaptiveSample) {
	a.winInFlight = max(a.winInFlight, s.InFlight)
	switch {
	case s.Failed:
		a.winFailed++
	case !started.Before(a.winStart):
		a.winSum += s.RTT
		a.winN++
	}
	span := max(a.cfg.Window, a.rtt)
	if now.Sub(a.winStart) < span || (a.winN < a.cfg.MinSamples && a.winFailed == 0) {
		return
	}
	a.closeWindow()
	if !now.Before(a.nextProbe) {
		a.probing, a.probeFrom = true, time.Time{}
		return
	}
	a.openWindow(now)
}

// closeWindow moves the limit by what the window saw.
func (a *Adaptive) closeWindow() {
	ceiling := float64(a.cfg.MaxConcurrent)
	if a.winN > 0 {
		a.rtt = max(a.winSum/time.Duration(a.winN), 1)
		a.noLoad = min(a.noLoad, a.rtt) // the long-window minimum
	}
	switch {
	case a.winFailed > 0:
		a.limit *= a.cfg.Backoff
	case a.winN > 0:
		gradient := min(max(float64(a.noLoad)/float64(a.rtt), a.cfg.MinGradient), 1)
		target := a.limit*gradient + max(1, math.Sqrt(a.limit)/2)
		if float64(a.winInFlight) < a.limit/2 {
			target = min(target, a.limit) // the lane was not using its limit: no evidence it can take more
		}
		if target >= a.limit {
			a.limit = target
		} else {
			a.limit += (target - a.limit) * a.cfg.Smoothing
		}
	}
	a.limit = min(max(a.limit, 1), ceiling)
}

// openWindow starts a sampling window at now.
func (a *Adaptive) openWindow(now time.Time) {
	a.winStart, a.winSum, a.winN, a.winFailed, a.winInFlight = now, 0, 0, 0, 0
}
