package app

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Service is Aquifer's application core. Inbound adapters call its methods;
// it owns the lanes, the maintenance sweeps and the event broker.
type Service struct {
	cfg    Config
	log    *zap.Logger
	ids    *domain.IDGenerator
	broker *Broker
	d      *dispatcher

	mu      sync.Mutex
	started bool
	stopped bool
	sweep   *sweeper
}

// New builds a Service. It does not start dispatching; call Start.
func New(cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{
		cfg:    cfg,
		log:    cfg.Logger.Named("app"),
		ids:    domain.NewIDGenerator(cfg.Clock.Now),
		broker: NewBroker(cfg.SubscriberBuffer),
	}
	s.d = newDispatcher(cfg, s.broker)
	return s, nil
}

// Broker returns the event broker (for adapters that stream).
func (s *Service) Broker() *Broker { return s.broker }

// Start recovers work left by a previous run and starts dispatching: jobs
// that were in flight go back to queued, and every lane with queued jobs
// resumes in FIFO order. Start is idempotent.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return domain.ErrClosed
	}
	if s.started {
		return nil
	}
	n, err := s.cfg.Store.RecoverInFlight(ctx)
	if err != nil {
		return fmt.Errorf("recover in-flight jobs: %w", err)
	}
	lanes, err := s.cfg.Store.ReadyLanes(ctx)
	if err != nil {
		return fmt.Errorf("list lanes with waiting work: %w", err)
	}
	for _, l := range lanes {
		s.d.notify(l, false)
	}
	s.log.Info("recovered queued work", zap.Int("in_flight_requeued", n), zap.Int("lanes", len(lanes)))
	s.d.start()
	s.sweep = startSweeper(s.cfg, s.d)
	s.started = true
	return nil
}

// Stop stops dispatching and waits for running attempts until ctx ends;
// attempts still running then are aborted and their jobs run again after the
// next Start. It does not close the store. Stop is idempotent and safe before
// Start.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	sweep := s.sweep
	s.mu.Unlock()
	if sweep != nil {
		sweep.stop()
	}
	return s.d.stop(ctx)
}

// EnqueueResult is the answer to a submission.
type EnqueueResult struct {
	JobID     domain.JobID
	Status    domain.Status
	Duplicate bool
}

// Enqueue validates req and stores it durably as a queued job, unless the
// caller already submitted the same (user_id, idempotent_key): then it returns
// that job with Duplicate set. It returns only once the job is durable.
func (s *Service) Enqueue(ctx context.Context, req *domain.JobRequest) (*EnqueueResult, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	lane := domain.SharedLane(req.Upstream())
	job := domain.NewJob(s.ids.New(), req, lane, s.cfg.Clock.Now())
	stored, fresh, err := s.cfg.Store.Insert(ctx, job)
	if err != nil {
		return nil, storeErr("store job", err)
	}
	if !fresh {
		status := stored.Status
		if status == domain.StatusQueued && s.d.isExecuting(stored.ID) {
			status = domain.StatusInFlight // as Get reports it; see dispatcher.markInFlightLater
		}
		return &EnqueueResult{JobID: stored.ID, Status: status, Duplicate: true}, nil
	}
	s.d.offer(stored)
	return &EnqueueResult{JobID: stored.ID, Status: stored.Status}, nil
}

// Get returns a job, or domain.ErrNotFound.
func (s *Service) Get(ctx context.Context, id domain.JobID) (*domain.Job, error) {
	if !domain.ValidJobID(string(id)) {
		return nil, domain.ErrNotFound
	}
	j, err := s.cfg.Store.Get(ctx, id)
	if err != nil {
		return nil, storeErr("read job", err)
	}
	if j.Status == domain.StatusQueued && s.d.isExecuting(id) {
		j.Status = domain.StatusInFlight // see dispatcher.markInFlightLater
	}
	return j, nil
}

// Subscribe returns the job as it is now and a subscription to its future
// events. The subscription is opened before the job is read, so no event that
// happens after the returned state is missed. The caller must Close it.
func (s *Service) Subscribe(ctx context.Context, id domain.JobID) (*domain.Job, *Subscription, error) {
	if !domain.ValidJobID(string(id)) {
		return nil, nil, domain.ErrNotFound
	}
	sub := s.broker.Subscribe(id)
	j, err := s.Get(ctx, id)
	if err != nil {
		sub.Close()
		return nil, nil, err
	}
	return j, sub, nil
}

// storeErr passes domain errors through and marks anything else as the store
// being unavailable.
func storeErr(what string, err error) error {
	var de *domain.Error
	if errors.As(err, &de) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return domain.Unavailable(what+" failed", err)
}
