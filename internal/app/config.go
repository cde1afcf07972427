// Package app is Aquifer's application core as its adapters see it: a thin
// façade (Service: Enqueue, Get, Cancel, Subscribe, Health, Start, Stop, …)
// over one package per concept — dispatch (lanes, attempts, deliveries),
// lease (cluster leases), edge (proxy mode), drain, pool, tenant, trust
// (signing and L8), admit (admission control), load (backlog counts) and
// events (the subscription broker). Service builds them from one Config and
// wires each to the small interfaces the others declare; none of them reads
// another's fields.
//
// It depends only on domain, ports, pacing and l8; adapters call into it.
package app

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/app/admit"
	"github.com/aquiferhq/aquifer/internal/app/dispatch"
	"github.com/aquiferhq/aquifer/internal/app/drain"
	"github.com/aquiferhq/aquifer/internal/app/edge"
	"github.com/aquiferhq/aquifer/internal/app/lease"
	"github.com/aquiferhq/aquifer/internal/app/tenant"
	"github.com/aquiferhq/aquifer/internal/app/trust"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// The settings each concept owns, under the names the adapters and the
// facade know.
type (
	RateTable       = domain.RateTable
	RetryPolicy     = dispatch.RetryPolicy
	OutageConfig    = dispatch.OutageConfig
	AdmissionConfig = admit.Config
	ProxyConfig     = edge.Config
	DrainConfig     = drain.Config
	L8Config        = trust.Config
)

// ClusterConfig turns on and tunes cluster mode: several processes sharing
// one store, each lane dispatched by one process at a time.
type ClusterConfig struct {
	// Peers are the roles the shared store plays (lane leases, messages
	// between the processes, shared pool members). Unset: this process is
	// the only one on its store.
	Peers ports.Cluster
	// LeaseTTL is how long a lane lease lasts without renewal: the longest a
	// dead process's lanes stay without a dispatcher. Default 3s.
	LeaseTTL time.Duration
	// SyncInterval is how often leases are renewed and free lanes taken.
	// Default 1s (must be well under LeaseTTL).
	SyncInterval time.Duration
	// RewindEvery re-reads held lanes from the start every this many syncs,
	// a safety net for work notices that were lost. Default 5.
	RewindEvery int
	// ReleaseWait bounds how long a lane given up for rebalancing waits for
	// its running attempts before its lease is released anyway. Default 30s.
	ReleaseWait time.Duration
}

func (c ClusterConfig) lease() lease.Config {
	return lease.Config{LeaseTTL: c.LeaseTTL, SyncInterval: c.SyncInterval, RewindEvery: c.RewindEvery,
		ReleaseWait: c.ReleaseWait}.WithDefaults()
}

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
	// to their result. Negative writes it at once (always so in cluster
	// mode). Default 1s.
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
	// FailedRetention is how long failed jobs — the dead-letter set — are
	// kept for operators to find and retry once nothing is left to do for
	// them. Default domain.FailedTTL (2h).
	FailedRetention time.Duration
	// OperationBatch is how many jobs one batch of a bulk retry or cancel
	// examines. Default 500.
	OperationBatch int
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

	// JobBounds are the limits on what a job's options may ask for (how
	// far ahead it may be scheduled, its retry policy, its timeout).
	// Zero fields: domain.DefaultOptionBounds.
	JobBounds domain.OptionBounds
	// PriorityAging is how much earlier a job of one priority counts as
	// having arrived than a job of the next lower priority: a high job goes
	// before normal jobs that arrived up to PriorityAging before it, and a
	// normal (or, at twice that, a high) job yields to a low job that has
	// waited that much longer. It is what keeps low jobs from starving.
	// Default 60s.
	PriorityAging time.Duration
	// ScheduleLookahead is how often the store is asked for the next due
	// scheduled job even when this process scheduled nothing (another
	// process sharing the store may have). Default 1s.
	ScheduleLookahead time.Duration

	// Tracer continues submitters' W3C traces through each job and, with
	// an exporter, emits spans. Default ports.NopTracer (trace context
	// passed on, no spans).
	Tracer ports.Tracer

	// Rand returns numbers in [0,1) for jitter; default math/rand/v2.
	Rand func() float64
}

// clustered reports whether cluster mode is on.
func (c Config) clustered() bool { return c.Cluster.Peers.Leases != nil }

// dispatch is the dispatcher's part of the config.
func (c Config) dispatch() dispatch.Config {
	d := dispatch.Config{Store: c.Store, Doer: c.Doer, Clock: c.Clock, Logger: c.Logger, Metrics: c.Metrics,
		Rates: c.Rates, RequestTimeout: c.RequestTimeout, MaxResponseBytes: c.MaxResponseBytes, Retry: c.Retry,
		MaxDeferrals: c.MaxDeferrals, WindowJobs: c.WindowJobs, LaneIdleTimeout: c.LaneIdleTimeout,
		PersistInFlightAfter: c.PersistInFlightAfter, Outage: c.Outage, Rand: c.Rand, FailedRetention: c.FailedRetention,
		PriorityAging: c.PriorityAging, Tracer: c.Tracer}
	if c.clustered() {
		// Other processes read the store, not this one's memory: an attempt
		// is recorded as in flight when it starts, so a process taking the
		// lane over does not send it again while it runs.
		d.PersistInFlightAfter = -1
	}
	return d
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	// The dispatcher's settings are defaulted by dispatch, the one place.
	d := c.dispatch().WithDefaults()
	c.Clock, c.Logger, c.Metrics = d.Clock, d.Logger, d.Metrics
	c.Rates, c.RequestTimeout, c.MaxResponseBytes, c.Retry = d.Rates, d.RequestTimeout, d.MaxResponseBytes, d.Retry
	c.MaxDeferrals, c.WindowJobs, c.LaneIdleTimeout, c.Outage, c.Rand = d.MaxDeferrals, d.WindowJobs, d.LaneIdleTimeout, d.Outage, d.Rand
	c.PriorityAging, c.Tracer = d.PriorityAging, d.Tracer
	c.JobBounds = c.JobBounds.WithDefaults()
	if c.ScheduleLookahead <= 0 {
		c.ScheduleLookahead = time.Second
	}
	if c.PersistInFlightAfter == 0 {
		c.PersistInFlightAfter = d.PersistInFlightAfter
	}
	c.Proxy = c.Proxy.WithDefaults()
	c.Drain = c.Drain.WithDefaults()
	l := c.Cluster.lease()
	c.Cluster.LeaseTTL, c.Cluster.SyncInterval, c.Cluster.RewindEvery, c.Cluster.ReleaseWait = l.LeaseTTL, l.SyncInterval, l.RewindEvery, l.ReleaseWait
	c.Admission = c.Admission.WithDefaults()
	if c.StaleAfter <= 0 {
		c.StaleAfter = 5 * time.Minute
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = time.Minute
	}
	if c.PurgeBatch <= 0 {
		c.PurgeBatch = 1000
	}
	if c.FailedRetention <= 0 {
		c.FailedRetention = domain.FailedTTL
	}
	if c.OperationBatch <= 0 {
		c.OperationBatch = 500
	}
	if c.SubscriberBuffer <= 0 {
		c.SubscriberBuffer = 16
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
	return c
}

// checkSecrets reports the secrets of a list that cannot sign (l8's one
// check, Secret.Check), each as where[i].
func checkSecrets(where string, secrets []l8.Secret) []error {
	var errs []error
	for i, s := range secrets {
		var bad *l8.SecretError
		if errors.As(s.Check(), &bad) {
			errs = append(errs, fmt.Errorf("%s[%d] %s", where, i, bad.Problem))
		}
	}
	return errs
}

// Validate reports every problem with a defaulted config.
func (c Config) Validate() error {
	var errs []error
	if err := c.dispatch().Validate(); err != nil { // the store, the Doer, rates, outages
		errs = append(errs, err)
	}
	errs = append(errs, checkSecrets("app: WebhookSecrets", c.WebhookSecrets)...)
	for _, p := range tenant.Check(c.Tenants) {
		errs = append(errs, fmt.Errorf("app: Tenants[%d]: %s %s", p.Index, p.Field, p.Reason))
	}
	for i, t := range c.Tenants {
		errs = append(errs, checkSecrets(fmt.Sprintf("app: Tenants[%d].WebhookSecrets", i), t.WebhookSecrets)...)
	}
	if p := c.Cluster.Peers; (p.Leases != nil || p.Bus != nil || p.Members != nil) && !p.Complete() {
		errs = append(errs, errors.New("app: Cluster.Peers needs all three roles (Leases, Bus, Members) or none"))
	}
	if c.Store != nil {
		if err := drain.Validate(c.Drain, c.Store); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
