// Package app holds Aquifer's use cases: accepting jobs (validation and
// idempotency), lanes that pace dispatch to each upstream, executing attempts
// and interpreting responses, webhooks as durable jobs, crash recovery and
// expiry, and the event broker behind SSE.
//
// It depends only on domain, ports and pacing; adapters call into it.
package app

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Config wires a Service. Store and Doer are required; everything else has a
// default, applied by WithDefaults.
type Config struct {
	Store   ports.JobStore
	Doer    ports.Doer
	Clock   ports.Clock   // default: the system clock
	Logger  *zap.Logger   // default: no-op
	Metrics ports.Metrics // default: ports.NopMetrics

	// Rates gives each upstream its ceiling; default: 2 rps / 1 concurrent everywhere.
	Rates RateTable

	// RequestTimeout bounds one outbound attempt, body included. Default 30s.
	RequestTimeout time.Duration
	// MaxBodyBytes is the request body limit the inbound adapters enforce;
	// reported by Health. 0 means no limit.
	MaxBodyBytes int64
	// MaxResponseBytes is how much of a response body is kept as the result.
	// Default 1 MiB.
	MaxResponseBytes int64
	// Retry is the retry policy for 5xx and transport errors.
	Retry RetryPolicy
	// MaxDeferrals is how many times a 429 may send work back to wait before
	// it counts as the answer: the job completes with the 429 (a delivery
	// fails). Default 10.
	MaxDeferrals int

	// Admission sets the limits above which new jobs are shed with a 429.
	Admission AdmissionConfig

	// Outage tunes the lanes' circuits: how a destination that is down is
	// detected, probed, and how long its work waits for it.
	Outage OutageConfig

	// WindowJobs is how many ready jobs a lane holds in memory; the rest stay
	// in the store until the lane needs them. Default 256.
	WindowJobs int
	// LaneIdleTimeout is how long an empty lane lives before it is collected,
	// with its learned pacing. Default 5m.
	LaneIdleTimeout time.Duration
	// PersistInFlightAfter is how long an attempt runs before its in_flight
	// status is written to the store; shorter attempts go from queued straight
	// to their result. Negative writes it at once. Default 1s.
	PersistInFlightAfter time.Duration
	// StaleAfter is how long an attempt may run before the sweep puts its job
	// back to queued. Default 5m.
	StaleAfter time.Duration
	// SweepInterval is how often expired jobs are purged and stale ones reset.
	// Default 60s.
	SweepInterval time.Duration
	// PurgeBatch is how many expired rows one purge transaction deletes.
	// Default 1000.
	PurgeBatch int
	// SubscriberBuffer is the per-subscriber event buffer. Default 16.
	SubscriberBuffer int
	// PositionInterval is how often queued jobs with subscribers hear their
	// place in line. Default 2s.
	PositionInterval time.Duration
	// PoolSweep is how often pool members are checked for missed
	// heartbeats and sustained failure. Default 5s.
	PoolSweep time.Duration
	// LoadRefresh is how often the counts behind the load headers are
	// refreshed while anybody uses them. Default 1s.
	LoadRefresh time.Duration

	// Tenants are the API-key tenants; none means open mode.
	Tenants []Tenant

	// Destinations are the global destination rules: checked at submission
	// here, and at dial time by the Doer (which is given the same rules).
	Destinations domain.DestinationRules

	// Proxy tunes edge-proxy mode (Service.Proxy).
	Proxy ProxyConfig

	// Cluster turns on cluster mode — several processes sharing one store,
	// each lane dispatched by one of them — when Cluster.Peers is set, and
	// tunes it.
	Cluster ClusterConfig

	// Drain turns on drain mode: flush the ledger to a webhook once the
	// process is idle, then clear it.
	Drain DrainConfig

	// L8 signs webhook deliveries with Aquifer's Ed25519 identity
	// (Standard Webhooks v1a always, L8 for receivers that proved their
	// identity). Off when L8.Identity is nil.
	L8 L8Config

	// WebhookSecrets are the Standard Webhooks shared secrets: every
	// webhook delivery and drain page carries one v1 (HMAC-SHA256)
	// signature per secret, beside v1a, in the one webhook-signature
	// header. Several secrets are for rotation. A tenant's own
	// Tenant.WebhookSecrets replace them for its jobs. They work with or
	// without L8. None: no v1 signatures.
	WebhookSecrets []l8.Secret

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
	c.Proxy = c.Proxy.withDefaults()
	c.Drain = c.Drain.withDefaults()
	c.Cluster = c.Cluster.withDefaults()
	c.Outage = c.Outage.withDefaults()
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
	if c.Retry.Attempts <= 0 {
		c.Retry.Attempts = 5
	}
	if c.Retry.Backoff == nil {
		c.Retry.Backoff = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
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
	if c.StaleAfter <= 0 {
		c.StaleAfter = 5 * time.Minute
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = time.Minute
	}
	if c.PurgeBatch <= 0 {
		c.PurgeBatch = 1000
	}
	if c.SubscriberBuffer <= 0 {
		c.SubscriberBuffer = 16
	}
	if c.MaxDeferrals <= 0 {
		c.MaxDeferrals = 10
	}
	if c.PositionInterval <= 0 {
		c.PositionInterval = 2 * time.Second
	}
	if c.PoolSweep <= 0 {
		c.PoolSweep = 5 * time.Second
	}
	if c.LoadRefresh <= 0 {
		c.LoadRefresh = time.Second
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return c
}

// Validate reports every problem with a defaulted config.
func (c Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("app: Store is required"))
	}
	if c.Doer == nil {
		errs = append(errs, errors.New("app: Doer is required"))
	}
	if err := c.Rates.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Outage.validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, validateSecrets("app: WebhookSecrets", c.WebhookSecrets)...)
	for _, t := range c.Tenants {
		errs = append(errs, validateSecrets("app: tenant "+t.Name+": WebhookSecrets", t.WebhookSecrets)...)
	}
	if p := c.Cluster.Peers; (p.Leases != nil || p.Bus != nil || p.Members != nil) && !p.Complete() {
		errs = append(errs, errors.New("app: Cluster.Peers needs all three roles (Leases, Bus, Members) or none"))
	}
	if c.Store != nil {
		if err := validateDrain(c.Drain, c.Store); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RateTable maps upstream hosts to their ceilings. Keys are "host" or
// "host:port", case-insensitive; "host:port" is matched first, then "host",
// then Defaults.
type RateTable struct {
	Defaults domain.Rate
	Hosts    map[string]domain.Rate
}

// For returns the configured ceiling for an upstream. Pools use Defaults.
func (t RateTable) For(u domain.UpstreamKey) domain.Rate {
	def := t.Defaults
	if def == (domain.Rate{}) {
		def = domain.DefaultRate
	}
	if u.IsPool() || len(t.Hosts) == 0 {
		return def
	}
	hostPort, host := u.Host()
	if r, ok := t.Hosts[hostPort]; ok {
		return r
	}
	if r, ok := t.Hosts[host]; ok {
		return r
	}
	return def
}

// lookup returns the entry for u, if the table has one (defaults aside).
func (t RateTable) lookup(u domain.UpstreamKey) (domain.Rate, bool) {
	if u.IsPool() || len(t.Hosts) == 0 {
		return domain.Rate{}, false
	}
	hostPort, host := u.Host()
	if r, ok := t.Hosts[hostPort]; ok {
		return r, true
	}
	r, ok := t.Hosts[host]
	return r, ok
}

// Validate checks every entry.
func (t RateTable) Validate() error {
	var errs []error
	if t.Defaults != (domain.Rate{}) {
		if err := t.Defaults.Validate("defaults"); err != nil {
			errs = append(errs, err)
		}
	}
	for host, r := range t.Hosts {
		if host != strings.ToLower(host) {
			errs = append(errs, fmt.Errorf("upstreams.%s: host keys must be lower case", host))
		}
		if err := r.Validate("upstreams." + host); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
