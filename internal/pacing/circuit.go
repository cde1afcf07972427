package pacing

import (
	"slices"
	"time"
)

// CircuitState is where a destination's outage circuit stands.
type CircuitState int

const (
	// CircuitClosed: the destination is healthy; work flows at the lane's pace.
	CircuitClosed CircuitState = iota
	// CircuitOpen: the destination is down; its work is held, and one probe
	// goes out when NextProbe comes.
	CircuitOpen
	// CircuitHalfOpen: a probe is running; nothing else starts until it ends.
	CircuitHalfOpen
)

// String returns the state's wire name: closed, open or half_open.
func (s CircuitState) String() string {
	switch s {
	case CircuitOpen:
		return "open"
	case CircuitHalfOpen:
		return "half_open"
	}
	return "closed"
}

// CircuitConfig tunes a Circuit. WithDefaults fills zero fields.
type CircuitConfig struct {
	// FailureThreshold is how many different jobs must fail in a row — no
	// attempt succeeding in between — to open the circuit. Default 3.
	// Negative disables the circuit: every failure counts against its own
	// job, as it did before circuits existed.
	FailureThreshold int
	// ProbeInterval is the wait before the first probe after the circuit
	// opens; it doubles after each failed probe. Default 1s.
	ProbeInterval time.Duration
	// MaxProbeInterval caps the wait between probes. Default 5m.
	MaxProbeInterval time.Duration
}

// WithDefaults returns c with zero fields set to their defaults.
func (c CircuitConfig) WithDefaults() CircuitConfig {
	if c.FailureThreshold == 0 {
		c.FailureThreshold = 3
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = time.Second
	}
	if c.MaxProbeInterval <= 0 {
		c.MaxProbeInterval = 5 * time.Minute
	}
	c.MaxProbeInterval = max(c.MaxProbeInterval, c.ProbeInterval)
	return c
}

// Failure describes one failed attempt: a transport error or a 5xx.
type Failure struct {
	// Job identifies the work that failed, to tell one job's retries from
	// failures across different jobs.
	Job string
	// Probe marks the attempt the circuit let through as its probe.
	Probe bool
	// Reason is the failure as the job records it, kept for the lane's view.
	Reason string
}

// Verdict is what a Circuit decides about a failed attempt.
type Verdict int

const (
	// Count: the failure is the job's own; it uses up one of its attempts.
	Count Verdict = iota
	// Hold: the destination is down; the attempt does not count, and the
	// job waits for the circuit to close.
	Hold
)

// Transition reports a change of state, for logs and metrics.
type Transition int

const (
	NoTransition Transition = iota
	Opened                  // closed → open: an outage began
	Reopened                // half-open → open: a probe failed
	Closed                  // open or half-open → closed: the destination answered
)

// Circuit tells a destination that is down from requests that fail. It
// watches the failed attempts of a lane since its last success: once
// FailureThreshold different jobs have failed, it opens. A job failing again
// and again (or two of them) does not open it while nothing else fails: their
// requests may be what is wrong, so they spend their own attempts.
//
// While the circuit is open the lane holds its work and lets one probe
// through at NextProbe; a probe that fails doubles the wait (up to
// MaxProbeInterval), any answer that is not a failure closes the circuit.
// Failures while open or half-open — the probe, and attempts that were
// already running when it opened — are held: they do not count against
// their jobs.
//
// A Circuit is not safe for concurrent use, and reads no clock: callers pass
// the time in.
type Circuit struct {
	cfg CircuitConfig

	state     CircuitState
	streak    int      // consecutive failures
	jobs      []string // the different jobs among them, up to FailureThreshold
	since     time.Time
	interval  time.Duration
	nextProbe time.Time
	probes    int
	lastError string
}

// NewCircuit returns a closed circuit.
func NewCircuit(cfg CircuitConfig) *Circuit {
	return &Circuit{cfg: cfg.WithDefaults()}
}

// State returns the current state.
func (c *Circuit) State() CircuitState { return c.state }

// Since is when the current state began (zero while closed and never opened).
func (c *Circuit) Since() time.Time { return c.since }

// NextProbe is when the open circuit lets its next probe through.
func (c *Circuit) NextProbe() time.Time { return c.nextProbe }

// Streak is how many attempts in a row failed.
func (c *Circuit) Streak() int { return c.streak }

// Probes is how many probes the current outage has sent.
func (c *Circuit) Probes() int { return c.probes }

// LastError is the reason of the latest failure of the current streak.
func (c *Circuit) LastError() string { return c.lastError }

// Enabled reports whether the circuit can open at all.
func (c *Circuit) Enabled() bool { return c.cfg.FailureThreshold > 0 }

// Fail records a failed attempt and decides whether it counts against its
// job or is held for the outage.
func (c *Circuit) Fail(f Failure, now time.Time) (Verdict, Transition) {
	if !c.Enabled() {
		return Count, NoTransition
	}
	if len(c.jobs) < c.cfg.FailureThreshold && !slices.Contains(c.jobs, f.Job) {
		c.jobs = append(c.jobs, f.Job)
	}
	c.streak++
	c.lastError = f.Reason
	switch c.state {
	case CircuitOpen:
		return Hold, NoTransition
	case CircuitHalfOpen:
		if !f.Probe {
			return Hold, NoTransition // started before the circuit opened; the probe decides
		}
		c.state = CircuitOpen
		c.interval = min(c.interval*2, c.cfg.MaxProbeInterval)
		c.nextProbe = now.Add(c.interval)
		return Hold, Reopened
	}
	if len(c.jobs) >= c.cfg.FailureThreshold {
		c.state, c.since = CircuitOpen, now
		c.interval, c.probes = c.cfg.ProbeInterval, 0
		c.nextProbe = now.Add(c.interval)
		return Hold, Opened
	}
	return Count, NoTransition
}

// Succeed records an attempt the destination answered without failing
// (2xx–4xx, a 429 included): the streak ends and an open circuit closes.
func (c *Circuit) Succeed(now time.Time) Transition {
	c.streak, c.jobs, c.lastError = 0, c.jobs[:0], ""
	if c.state == CircuitClosed {
		return NoTransition
	}
	c.state, c.since, c.nextProbe = CircuitClosed, now, time.Time{}
	return Closed
}

// Allow reports whether a new attempt may start now. A closed circuit
// always allows; an open one allows a probe once NextProbe has come (the
// caller must then call StartProbe); a half-open one allows nothing. When it
// does not allow, wait is how long until it might (0: until the probe ends).
func (c *Circuit) Allow(now time.Time) (ok, probe bool, wait time.Duration) {
	switch c.state {
	case CircuitClosed:
		return true, false, 0
	case CircuitOpen:
		if !now.Before(c.nextProbe) {
			return true, true, 0
		}
		return false, false, c.nextProbe.Sub(now)
	}
	return false, false, 0
}

// StartProbe records that the probe Allow offered has started.
func (c *Circuit) StartProbe() {
	if c.state == CircuitOpen {
		c.state = CircuitHalfOpen
		c.probes++
	}
}

// AbandonProbe puts a half-open circuit back to open with the same next
// probe time, for a probe that ended without an answer either way (the
// work vanished, or the attempt was aborted by shutdown).
func (c *Circuit) AbandonProbe(now time.Time) {
	if c.state == CircuitHalfOpen {
		c.state = CircuitOpen
		c.nextProbe = now
	}
}
