package dispatch

import (
	"errors"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Config is the dispatcher's: the store it reads work from and records
// outcomes in, the outbound client, and how lanes pace, retry and ride out
// outages. Store and Doer are required; everything else has a default
// (WithDefaults).
type Config struct {
	Store   ports.JobStore
	Doer    ports.Doer
	Clock   ports.Clock   // default: the system clock
	Logger  *zap.Logger   // default: no-op
	Metrics ports.Metrics // default: ports.NopMetrics

	// Rates gives each upstream its ceiling; default: 2 rps / 1 concurrent.
	Rates domain.RateTable
	// RequestTimeout bounds one outbound attempt, body included. Default 30s.
	RequestTimeout time.Duration
	// MaxResponseBytes is how much of a response body is kept as the result.
	// Default 1 MiB.
	MaxResponseBytes int64
	// Retry is the retry policy for 5xx and transport errors.
	Retry RetryPolicy
	// MaxDeferrals is how many times a 429 may send work back to wait before
	// it counts as the answer. Default 10.
	MaxDeferrals int
	// WindowJobs is how many ready jobs a lane holds in memory per queue.
	// Default 256.
	WindowJobs int
	// LaneIdleTimeout is how long an empty lane lives before it is
	// collected, with its learned pacing. Default 5m.
	LaneIdleTimeout time.Duration
	// PersistInFlightAfter is how long an attempt runs before its in_flight
	// status is written to the store; negative writes it at once (cluster
	// mode, where other processes read the store, not this one's memory).
	// Default 1s.
	PersistInFlightAfter time.Duration
	// Outage tunes the lanes' outage circuits.
	Outage OutageConfig
	// FailedRetention is how long a failed job (the dead-letter set) is
	// kept once nothing is left to do for it. Default domain.FailedTTL.
	FailedRetention time.Duration
	// PriorityAging: see app.Config.PriorityAging. Default 60s.
	PriorityAging time.Duration
	// Tracer continues jobs' traces into their attempts; default
	// ports.NopTracer.
	Tracer ports.Tracer
	// Rand returns numbers in [0,1) for jitter; default math/rand/v2.
	Rand func() float64
}

// RetryPolicy says how often and how soon a failed attempt is tried again.
type RetryPolicy struct {
	// Attempts is the total number of attempts, first included. Default 5.
	Attempts int
	// Backoff is the wait before attempt n+1 (index n-1); the last entry is
	// reused when there are more attempts than entries. Default 1s, 2s, 4s, 8s.
	Backoff []time.Duration
}

// Delay returns the wait before the next attempt after attempt n (1-based).
func (p RetryPolicy) Delay(n int) time.Duration {
	if len(p.Backoff) == 0 {
		return 0
	}
	return p.Backoff[min(n-1, len(p.Backoff)-1)]
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Clock == nil {
		c.Clock = ports.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Metrics == nil {
		c.Metrics = ports.NopMetrics{}
	}
	if c.Rates.Defaults == (domain.Rate{}) {
		c.Rates.Defaults = domain.DefaultRate
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.MaxResponseBytes <= 0 {
		c.MaxResponseBytes = 1 << 20
	}
	c.Retry = c.Retry.WithDefaults()
	if c.MaxDeferrals <= 0 {
		c.MaxDeferrals = 10
	}
	if c.WindowJobs <= 0 {
		c.WindowJobs = 256
	}
	if c.LaneIdleTimeout <= 0 {
		c.LaneIdleTimeout = 5 * time.Minute
	}
	if c.PersistInFlightAfter == 0 {
		c.PersistInFlightAfter = time.Second
	}
	c.Outage = c.Outage.WithDefaults()
	if c.PriorityAging <= 0 {
		c.PriorityAging = time.Minute
	}
	if c.Tracer == nil {
		c.Tracer = ports.NopTracer{}
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return c
}

// WithDefaults returns p with the default policy (5 attempts, 1, 2, 4, 8 s
// apart) where it is unset.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.Attempts <= 0 {
		p.Attempts = 5
	}
	if p.Backoff == nil {
		p.Backoff = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	}
	return p
}

// Validate reports every problem with a defaulted config.
func (c Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("dispatch: Store is required"))
	}
	if c.Doer == nil {
		errs = append(errs, errors.New("dispatch: Doer is required"))
	}
	if err := c.Rates.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Outage.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
