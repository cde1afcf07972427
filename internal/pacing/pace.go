package pacing

import "math"

// Defaults for the optional PaceConfig fields.
const (
	DefaultMinRPS                   = 0.5
	DefaultMinORCARPS               = 0.25
	DefaultRecoveryFactor           = 1.05
	DefaultConcurrencyRecoveryEvery = 10
)

// PaceConfig configures a Pace.
type PaceConfig struct {
	RPS                      float64 // configured ceiling (required, > 0)
	MaxConcurrent            int     // configured ceiling (required, >= 1)
	MinRPS                   float64 // floor for header-driven rates; default 0.5
	MinORCARPS               float64 // floor for ORCA-driven rates; default 0.25 (the 0.25 tier is meant literally)
	RecoveryFactor           float64 // rate multiplier per completion without a rate signal; default 1.05
	ConcurrencyRecoveryEvery int     // completions without a concurrency signal per +1 concurrency; default 10
}

// WithDefaults returns c with every unset or invalid field replaced:
// MinRPS and MinORCARPS that are not positive finite numbers get their
// defaults; a RecoveryFactor that is not a finite number >= 1 gets 1.05 (1
// itself disables rate recovery); ConcurrencyRecoveryEvery <= 0 gets 10. The
// required ceilings are sanitised as by SetCeiling: an RPS that is not a
// positive finite number becomes 1 (as in NewLimiter) and MaxConcurrent < 1
// becomes 1.
func (c PaceConfig) WithDefaults() PaceConfig {
	c.RPS, c.MaxConcurrent = sanitizeCeiling(c.RPS, c.MaxConcurrent)
	if !positiveFinite(c.MinRPS) {
		c.MinRPS = DefaultMinRPS
	}
	if !positiveFinite(c.MinORCARPS) {
		c.MinORCARPS = DefaultMinORCARPS
	}
	if !(c.RecoveryFactor >= 1) || math.IsInf(c.RecoveryFactor, 0) {
		c.RecoveryFactor = DefaultRecoveryFactor
	}
	if c.ConcurrencyRecoveryEvery <= 0 {
		c.ConcurrencyRecoveryEvery = DefaultConcurrencyRecoveryEvery
	}
	return c
}

func positiveFinite(f float64) bool { return f > 0 && !math.IsInf(f, 0) }

func sanitizeCeiling(rps float64, maxConcurrent int) (float64, int) {
	if !positiveFinite(rps) {
		rps = 1
	}
	return rps, max(maxConcurrent, 1)
}

// Pace is one lane's live pace: it starts at the ceiling, is lowered by signals and recovers gradually.
//
// Rate: an explicit rate (Signals.RPS > 0) sets the pace to that rate clamped
// to [MinRPS, ceiling] — it may raise the pace straight back to the ceiling.
// Otherwise an ORCA utilization of 0.70 or more sets it to ORCARate clamped
// to [MinORCARPS, ceiling]. Otherwise (no rate signal) a pace below the
// ceiling is multiplied by RecoveryFactor, never beyond the ceiling. A floor
// above the ceiling gives way to the ceiling.
//
// Concurrency: Signals.MaxConcurrent > 0 sets it to that value clamped to
// [1, ceiling] and restarts the recovery count. Every
// ConcurrencyRecoveryEvery completions in a row without a concurrency signal
// while below the ceiling add 1.
//
// A Pace is not safe for concurrent use.
type Pace struct {
	cfg    PaceConfig
	rps    float64
	conc   int
	streak int // completions without a concurrency signal while below the ceiling
}

// NewPace returns a pace at the ceiling of cfg (after WithDefaults).
func NewPace(cfg PaceConfig) *Pace {
	cfg = cfg.WithDefaults()
	return &Pace{cfg: cfg, rps: cfg.RPS, conc: cfg.MaxConcurrent}
}

// RPS returns the current rate.
func (p *Pace) RPS() float64 { return p.rps }

// MaxConcurrent returns the current concurrency limit.
func (p *Pace) MaxConcurrent() int { return p.conc }

// Ceiling returns the configured ceilings.
func (p *Pace) Ceiling() (rps float64, maxConcurrent int) {
	return p.cfg.RPS, p.cfg.MaxConcurrent
}

// SetCeiling changes the ceiling (configuration reload, pool capacity); the current values are clamped to it.
//
// Invalid ceilings are sanitised as by WithDefaults. A raised ceiling does
// not raise the current values: they recover towards it as usual.
func (p *Pace) SetCeiling(rps float64, maxConcurrent int) {
	p.cfg.RPS, p.cfg.MaxConcurrent = sanitizeCeiling(rps, maxConcurrent)
	p.rps = p.clampRPS(p.rps, p.lowestFloor())
	p.conc = min(p.conc, p.cfg.MaxConcurrent)
	if p.conc == p.cfg.MaxConcurrent {
		p.streak = 0
	}
}

// Observe folds one response's signals into the pace and reports whether RPS or MaxConcurrent changed.
//
// Only Signals.RPS, Utilization/HasUtilization and MaxConcurrent are used;
// pauses (RetryAfter, ResetIn) are the caller's business. A NaN or
// non-positive RPS counts as absent.
func (p *Pace) Observe(s Signals) bool {
	oldRPS, oldConc := p.rps, p.conc

	orca, orcaOK := 0.0, false
	if s.HasUtilization {
		orca, orcaOK = ORCARate(s.Utilization)
	}
	switch {
	case s.RPS > 0: // false for NaN
		p.rps = p.clampRPS(s.RPS, p.cfg.MinRPS)
	case orcaOK:
		p.rps = p.clampRPS(orca, p.cfg.MinORCARPS)
	case p.rps < p.cfg.RPS:
		p.rps = min(p.rps*p.cfg.RecoveryFactor, p.cfg.RPS)
	}

	if s.MaxConcurrent > 0 {
		p.conc = min(s.MaxConcurrent, p.cfg.MaxConcurrent)
		p.streak = 0
	} else if p.conc < p.cfg.MaxConcurrent {
		p.streak++
		if p.streak >= p.cfg.ConcurrencyRecoveryEvery {
			p.conc++
			p.streak = 0
		}
	} else {
		p.streak = 0
	}
	return p.rps != oldRPS || p.conc != oldConc
}

// Restore sets the current values (learned pace carried over from elsewhere), clamped to [floor, ceiling].
//
// The rate floor here is the lower of MinRPS and MinORCARPS (both reachable
// by Observe); the concurrency floor is 1. A NaN rate leaves the rate
// unchanged. The concurrency recovery count restarts.
func (p *Pace) Restore(rps float64, maxConcurrent int) {
	if !math.IsNaN(rps) {
		p.rps = p.clampRPS(rps, p.lowestFloor())
	}
	p.conc = min(max(maxConcurrent, 1), p.cfg.MaxConcurrent)
	p.streak = 0
}

// clampRPS clamps v to [floor, ceiling]; a floor above the ceiling gives way.
func (p *Pace) clampRPS(v, floor float64) float64 {
	return min(max(v, floor), p.cfg.RPS)
}

func (p *Pace) lowestFloor() float64 { return min(p.cfg.MinRPS, p.cfg.MinORCARPS) }
