package dispatch

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/pacing"
)

// OutageConfig tunes how lanes ride out a destination (or webhook receiver)
// that is down: instead of every job burning its retries against it, the
// lane opens a circuit, holds its work and probes (pacing.Circuit).
type OutageConfig struct {
	// FailureThreshold is how many different jobs must fail in a row (no
	// success in between) to open a lane's circuit. Default 3; negative
	// turns circuits off (every failure counts against its own job).
	FailureThreshold int
	// ProbeInterval is the wait before the first probe; it doubles after
	// each failed probe up to MaxProbeInterval. Defaults 1s and 5m.
	ProbeInterval    time.Duration
	MaxProbeInterval time.Duration
	// MaxHold is the longest a job waits for a destination that is down,
	// counted from its submission (for its webhook delivery: from its
	// result); then it fails with the outage as its reason. Default and
	// maximum: the queued TTL (24h), after which waiting work expires.
	MaxHold time.Duration
}

// WithDefaults returns c with zero fields set to their defaults.
func (c OutageConfig) WithDefaults() OutageConfig {
	cc := c.circuit().WithDefaults()
	c.FailureThreshold, c.ProbeInterval, c.MaxProbeInterval = cc.FailureThreshold, cc.ProbeInterval, cc.MaxProbeInterval
	if c.MaxHold <= 0 {
		c.MaxHold = domain.QueuedTTL
	}
	return c
}

// Validate checks the hold against the queued TTL.
func (c OutageConfig) Validate() error {
	if c.MaxHold > domain.QueuedTTL {
		return fmt.Errorf("dispatch: Outage.MaxHold %v is longer than the queued TTL (%v), after which waiting jobs expire", c.MaxHold, domain.QueuedTTL)
	}
	return nil
}

func (c OutageConfig) circuit() pacing.CircuitConfig {
	return pacing.CircuitConfig{FailureThreshold: c.FailureThreshold, ProbeInterval: c.ProbeInterval, MaxProbeInterval: c.MaxProbeInterval}
}

// CircuitStats is a lane's outage circuit as health reports it.
type CircuitStats struct {
	State     pacing.CircuitState
	Since     time.Time // when the outage began (zero when closed)
	NextProbe time.Time // open: when the next probe goes out
	Failures  int       // consecutive failed attempts
	Probes    int       // probes sent during this outage
	LastError string
}

// laneOutage is one lane's circuit. The lane goroutine asks it what may
// start; attempt goroutines tell it what came of each attempt, before they
// record the attempt, so a held attempt is never counted against its job.
type laneOutage struct {
	upstream domain.UpstreamKey
	log      *zap.Logger
	metrics  func(state string)

	// clean is true while the circuit is closed with no failure streak: the
	// common case needs no lock.
	clean atomic.Bool
	mu    sync.Mutex
	c     *pacing.Circuit
}

func newLaneOutage(d *Dispatcher, u domain.UpstreamKey, log *zap.Logger) *laneOutage {
	c := pacing.NewCircuit(d.cfg.Outage.circuit())
	if u.IsPool() || !c.Enabled() {
		return nil // pools route around a failing member instead (pool reputation)
	}
	o := &laneOutage{upstream: u, log: log, c: c,
		metrics: func(state string) { d.cfg.Metrics.CircuitChanged(string(u), state) }}
	o.clean.Store(true)
	return o
}

// allow reports whether a start may happen now and whether it is the
// probe; see pacing.Circuit.Allow. A nil laneOutage always allows.
func (o *laneOutage) allow(now time.Time) (ok, probe bool, wait time.Duration) {
	if o == nil || o.clean.Load() {
		return true, false, 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.c.Allow(now)
}

func (o *laneOutage) startProbe() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.c.StartProbe()
	o.log.Debug("probing a destination that is down", zap.Int("probe", o.c.Probes()))
}

// probeEnded lets the next probe go when the one that ran reported
// neither a failure nor an answer.
func (o *laneOutage) probeEnded(now time.Time) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.c.AbandonProbe(now)
}

// succeeded records an answer that was not a failure.
func (o *laneOutage) succeeded(now time.Time) {
	if o == nil || o.clean.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	since, probes := o.c.Since(), o.c.Probes()
	if o.c.Succeed(now) == pacing.Closed {
		o.log.Info("destination answered again; circuit closed, held work resumes",
			zap.Duration("down_for", now.Sub(since)), zap.Int("probes", probes))
		o.metrics(pacing.CircuitClosed.String())
	}
	o.clean.Store(true)
}

// failed records a failed attempt and says whether it counts against its
// job.
func (o *laneOutage) failed(f pacing.Failure, now time.Time) pacing.Verdict {
	if o == nil {
		return pacing.Count
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.clean.Store(false)
	v, tr := o.c.Fail(f, now)
	switch tr {
	case pacing.Opened:
		o.log.Warn("destination down; circuit open: its work is held and probed instead of retried",
			zap.Int("consecutive_failures", o.c.Streak()), zap.String("last_error", f.Reason),
			zap.Duration("next_probe_in", o.c.NextProbe().Sub(now)))
		o.metrics(pacing.CircuitOpen.String())
	case pacing.Reopened:
		o.log.Info("probe failed; destination still down", zap.Int("probes", o.c.Probes()),
			zap.String("last_error", f.Reason), zap.Duration("next_probe_in", o.c.NextProbe().Sub(now)))
	}
	return v
}

func (o *laneOutage) stats() CircuitStats {
	if o == nil || o.clean.Load() {
		return CircuitStats{}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	s := CircuitStats{State: o.c.State(), Failures: o.c.Streak(), LastError: o.c.LastError()}
	if s.State != pacing.CircuitClosed {
		s.Since, s.NextProbe, s.Probes = o.c.Since(), o.c.NextProbe(), o.c.Probes()
	}
	return s
}

// verdict is what an attempt that failed at the destination does next.
type verdict int

const (
	countFailure  verdict = iota // the job's own failure: retry or fail by its attempts
	holdForOutage                // the destination is down: wait for it without using an attempt
	holdRanOut                   // the destination is down, and the job has waited MaxHold: fail it
)

// judge decides what a failed attempt of j means, given its lane's circuit.
func (d *Dispatcher) judge(o *laneOutage, j *domain.Job, ar attemptResult, probe bool) verdict {
	if !ar.outage {
		return countFailure
	}
	f := pacing.Failure{Job: string(j.ID), Probe: probe, Reason: ar.result.Reason}
	now := d.cfg.Clock.Now()
	if o.failed(f, now) == pacing.Count {
		return countFailure
	}
	if !now.Before(holdDeadline(j, d.cfg.Outage.MaxHold)) {
		return holdRanOut
	}
	return holdForOutage
}

// holdDeadline is when j, waiting for a destination that is down, has
// waited long enough and fails: MaxHold after it entered its current phase,
// and never after it would expire.
func holdDeadline(j *domain.Job, maxHold time.Duration) time.Time {
	deadline := j.DueAt().Add(maxHold)
	if !j.ExpiresAt.IsZero() && j.ExpiresAt.Before(deadline) {
		deadline = j.ExpiresAt
	}
	return deadline
}

// outageReason is the failure reason of work whose hold ran out.
func (d *Dispatcher) outageReason(last string) string {
	r := fmt.Sprintf("destination unavailable for longer than max_outage_hold (%v)", d.cfg.Outage.MaxHold)
	if last != "" {
		r += "; last error: " + last
	}
	return r
}
