package aquifer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"

	httpapi "github.com/aquiferhq/aquifer/internal/adapters/inbound/http"
	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/egress"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// Aquifer is a running job queue: the core that stores, paces, sends and
// retries jobs and delivers their results, plus the front doors (Adapters)
// that take jobs in. Build one with New, then Start it; Stop it once.
// Its methods are safe for concurrent use.
type Aquifer struct {
	opts Options
	log  *zap.Logger
	svc  *app.Service
	prom *PrometheusMetrics // nil unless Options.Metrics is one
	auth *httpkit.Auth

	mu    sync.Mutex // serialises Start and Stop
	state lifecycle

	hmu      sync.Mutex
	handlers []*httpapi.Handler // made by Handler: their streams end at Stop
}

type lifecycle int

const (
	built lifecycle = iota
	started
	stopped
)

// New builds an Aquifer from o. It loads (or creates) the L8 key but starts
// nothing: no job is sent before Start. With o.CloseStore set, a failing New
// closes the store.
func New(o Options) (*Aquifer, error) {
	aq, err := build(o)
	if err != nil && o.CloseStore && o.Store != nil {
		err = errors.Join(err, closeStore(o.Store))
	}
	return aq, err
}

func build(o Options) (*Aquifer, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	l8cfg, err := loadL8(o.L8, o.Logger)
	if err != nil {
		return nil, err
	}
	doer := o.Doer
	if doer == nil {
		policy, err := domain.NewDestinationPolicy(o.Destinations)
		if err != nil {
			return nil, err
		}
		doer = egress.NewClient(egress.Options{Policy: policy, NetHTTPForPlainHTTP: o.NetHTTPForPlainHTTP})
	}
	logSigning(o)
	// Every setting the core shares with Options has the core's own type:
	// it is handed over as it is.
	svc, err := app.New(app.Config{
		Store:            o.Store,
		Doer:             doer,
		Destinations:     o.Destinations,
		Logger:           o.Logger,
		Metrics:          o.Metrics,
		Tracer:           o.Tracer,
		Rates:            o.Rates,
		Retry:            o.Retry,
		RequestTimeout:   o.RequestTimeout,
		MaxBodyBytes:     o.MaxBodyBytes,
		MaxResponseBytes: o.MaxResponseBytes,
		WindowJobs:       o.LaneWindow,
		FailedRetention:  o.FailedRetention,
		JobBounds:        o.JobBounds,
		PriorityAging:    o.PriorityAging,
		Admission:        o.Admission,
		L8:               l8cfg,
		WebhookSecrets:   o.WebhookSecrets,
		Tenants:          o.Tenants,
		Proxy:            o.Proxy,
		Outage:           o.Outage,
		Drain:            o.Drain,
		Cluster:          o.Cluster,
	})
	if err != nil {
		return nil, err
	}
	aq := &Aquifer{opts: o, log: o.Logger, svc: svc}
	if pm, ok := o.Metrics.(*PrometheusMetrics); ok && pm != nil {
		if err := pm.m.CollectHealth(svc.Health); err != nil {
			return nil, fmt.Errorf("metrics (one PrometheusMetrics per Aquifer): %w", err)
		}
		aq.prom = pm
	}
	aq.auth = httpkit.NewAuth(o.Tenants)
	return aq, nil
}

// Start recovers the work a previous run left (jobs that were in flight go
// back to their queues, in order), starts dispatching, then starts each
// adapter in Options.Adapters in order. ctx bounds the start only.
//
// If anything fails, Start stops what it started (as Stop would) and
// returns the error; the Aquifer cannot be started again. Start is
// idempotent once it succeeded.
func (aq *Aquifer) Start(ctx context.Context) error {
	aq.mu.Lock()
	defer aq.mu.Unlock()
	switch aq.state {
	case started:
		return nil
	case stopped:
		return ErrClosed
	}
	if err := aq.svc.Start(ctx); err != nil {
		return errors.Join(err, aq.stopLocked(ctx))
	}
	for _, a := range aq.opts.Adapters {
		if err := a.Start(ctx, aq); err != nil {
			return errors.Join(fmt.Errorf("start adapter %s: %w", a.Name(), err), aq.stopLocked(ctx))
		}
	}
	aq.state = started
	return nil
}

// Stop shuts down in order, so every accepted job is either finished or
// durably queued for the next start: it stops the adapters in reverse order
// (each stops taking jobs in), ends open event streams, stops dispatching
// and waits for running attempts until ctx ends, then aborts the rest
// (their jobs run again after the next Start: that is logged, not returned),
// and finally closes the store if Options.CloseStore is set.
//
// Stop calls Stop on every adapter, started or not. It is idempotent and
// safe before Start; it returns the adapters' and the store's errors.
func (aq *Aquifer) Stop(ctx context.Context) error {
	aq.mu.Lock()
	defer aq.mu.Unlock()
	if aq.state == stopped {
		return nil
	}
	return aq.stopLocked(ctx)
}

func (aq *Aquifer) stopLocked(ctx context.Context) error {
	aq.state = stopped
	var errs []error
	for i := len(aq.opts.Adapters) - 1; i >= 0; i-- {
		a := aq.opts.Adapters[i]
		if err := a.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop adapter %s: %w", a.Name(), err))
		}
	}
	aq.hmu.Lock()
	for _, h := range aq.handlers {
		h.CloseStreams()
	}
	aq.hmu.Unlock()
	if err := aq.svc.Stop(ctx); err != nil {
		aq.log.Warn("attempts aborted at shutdown; they will run again after restart", zap.Error(err))
	}
	if aq.opts.CloseStore {
		if err := closeStore(aq.opts.Store); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func closeStore(s Store) error {
	if err := s.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// Enqueue validates req and stores it durably as a queued job; it returns
// once the job is durable. A second submission with the same UserID and
// IdempotentKey (while the first job's row lives) returns the first job
// with Duplicate set instead of creating another.
//
// Errors: CodeInvalid (ErrorField names the field), CodeRejected
// (admission limits or a tenant quota; see RetryAfter), CodeUnavailable
// (the store). Jobs may be enqueued before Start; they wait until then.
func (aq *Aquifer) Enqueue(ctx context.Context, req *JobRequest) (*EnqueueResult, error) {
	return aq.svc.Enqueue(ctx, req)
}

// EnqueueBatch enqueues up to MaxBatch jobs in one durable commit. Each
// request is validated on its own and answered in its EnqueueBatchItem, in order:
// an invalid one gets its error (CodeInvalid, ErrorField names the field)
// and keeps none of the others out; one whose UserID and IdempotentKey are
// taken — by a stored job or an earlier request of the batch — is a
// Duplicate. Only what concerns the whole batch is an error, and then
// nothing was stored: more than MaxBatch requests (CodeInvalid), admission
// limits or a tenant quota (CodeRejected), the store (CodeUnavailable).
func (aq *Aquifer) EnqueueBatch(ctx context.Context, reqs []*JobRequest) ([]EnqueueBatchItem, error) {
	return aq.svc.EnqueueBatch(ctx, reqs)
}

// Get returns the job as it is now, or an error with CodeNotFound
// (IsNotFound) when it does not exist, expired, or belongs to another
// tenant than ctx's.
func (aq *Aquifer) Get(ctx context.Context, id JobID) (*Job, error) {
	return aq.svc.Get(ctx, id)
}

// Subscribe returns the job as it is now and a subscription to its later
// events. The subscription is opened before the job is read, so nothing
// that happens after the returned state is missed. Close the subscription
// when done.
func (aq *Aquifer) Subscribe(ctx context.Context, id JobID) (*Job, *Subscription, error) {
	return aq.svc.Subscribe(ctx, id)
}

// Wait blocks until the job has a result (it is completed or failed; its
// webhook may still be on its way) and returns it, or until ctx ends.
func (aq *Aquifer) Wait(ctx context.Context, id JobID) (*Job, error) {
	for {
		j, sub, err := aq.svc.Subscribe(ctx, id)
		if err != nil {
			return nil, err
		}
		if j.Status.Terminal() {
			sub.Close()
			return j, nil
		}
		err = awaitTerminal(ctx, sub)
		sub.Close()
		if err != nil {
			return nil, err
		}
		// The job ended, or the subscription lagged: read it again.
	}
}

// awaitTerminal returns when sub delivers a terminal event or is closed
// (it lagged), or with ctx's error.
func awaitTerminal(ctx context.Context, sub *Subscription) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-sub.C:
			if !ok || ev.Type.Terminal() {
				return nil
			}
		}
	}
}

// Cancel ends a job that is still waiting to be sent (queued, or waiting
// to retry): it fails with Result.Reason "canceled", and its webhook is
// still delivered. A job whose attempt is running, or that has finished,
// cannot be cancelled (CodeConflict).
func (aq *Aquifer) Cancel(ctx context.Context, id JobID) (*Job, error) {
	return aq.svc.Cancel(ctx, id)
}

// Health reports the state of the store, the queues and their pace, as
// GET /health does. It never fails: problems show as Status "degraded".
func (aq *Aquifer) Health(ctx context.Context) *Health {
	return aq.svc.Health(ctx)
}

// Logger returns the logger Aquifer was built with, for adapters.
func (aq *Aquifer) Logger() *zap.Logger { return aq.log }

// Service returns the application core, for the front doors built into
// this module (aquiferd's MCP, A2A and edge-proxy adapters, which need more
// of it than this package exposes). Its type is internal: code outside the
// module should use Aquifer's own methods, which are the supported API.
func (aq *Aquifer) Service() *app.Service { return aq.svc }

// Auth returns the API-key check of Options.Tenants (their KeySHA256), for
// the HTTP front doors built into this module, as Service.
func (aq *Aquifer) Auth() *httpkit.Auth { return aq.auth }
