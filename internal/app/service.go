package app

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// Service is Aquifer's application core. Inbound adapters call its methods;
// it owns the lanes, the maintenance sweeps and the event broker.
type Service struct {
	cfg    Config
	log    *zap.Logger
	ids    *domain.IDGenerator
	broker *Broker
	d      *dispatcher
	load   *loadGauge
	adm    *admission
	pools  *pools
	nonces *l8.Nonces // challenge nonces answered recently
	proxy  proxyModes
	drain  *drainer // nil unless drain mode is on
	// poolKick asks for a pool membership sync now (shared stores).
	poolKick chan struct{}
	tenants  *tenancy                  // nil without API-key tenants
	policy   *domain.DestinationPolicy // the global destination rules

	// modes holds each upstream's account-queue mode (true: one queue per
	// tenant). It lives as long as the process, not the lane.
	modes sync.Map // domain.UpstreamKey → bool

	mu         sync.Mutex
	started    bool
	stopped    bool
	background *background
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
		nonces: l8.NewNonces(maxChallengeNonces),
	}
	var cs *clusterState
	if cfg.Cluster.Peers.Leases != nil {
		cs = newClusterState(cfg.Cluster.Peers, cfg.Cluster, s.log)
		// Other processes read the store, not this one's memory: an attempt
		// is recorded as in flight when it starts, so a process taking the
		// lane over does not send it again while it runs.
		cfg.PersistInFlightAfter = -1
		s.cfg = cfg
	}
	s.poolKick = make(chan struct{}, 1)
	s.d = newDispatcher(cfg, s.broker, cs)
	global, err := domain.NewDestinationPolicy(cfg.Destinations)
	if err != nil {
		return nil, err
	}
	s.policy = global
	if len(cfg.Tenants) > 0 {
		if s.tenants, err = newTenancy(cfg.Tenants, cfg.Destinations, cfg.Store, cfg.Clock); err != nil {
			return nil, err
		}
		s.d.tenants = s.tenants
	}
	s.load = newLoadGauge(cfg.Store, s.d, s.log)
	s.d.load = s.load
	s.adm = newAdmission(cfg.Admission, cfg.Store, cfg.Clock)
	s.pools = newPools(cfg.Clock.Now, s.d.poolChanged)
	s.d.pools = s.pools
	if cfg.Drain.Enabled {
		s.drain = newDrainer(cfg.Drain, s.log, s.idleNow, s.flushLedger)
	}
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
	lanes, err := s.cfg.Store.ReadyQueues(ctx)
	if err != nil {
		return fmt.Errorf("list lanes with waiting work: %w", err)
	}
	for _, l := range lanes {
		s.d.notify(l, false) // with a shared store: only lanes this process holds (none yet)
	}
	s.log.Info("recovered queued work", zap.Int("in_flight_requeued", n), zap.Int("lanes", len(lanes)))
	if s.d.cluster != nil {
		s.syncPools(ctx)
		s.syncLeases(ctx) // take a fair share of the lanes before dispatching starts
	}
	s.load.refresh(ctx, true)
	s.d.start()
	s.background = s.startBackground()
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
	bg := s.background
	s.mu.Unlock()
	if bg != nil {
		bg.stop()
	}
	err := s.d.stop(ctx)
	if s.d.cluster != nil {
		s.releaseAllLeases(context.WithoutCancel(ctx))
	}
	return err
}

// EnqueueResult is the answer to a submission.
type EnqueueResult struct {
	JobID     domain.JobID
	Status    domain.Status
	Duplicate bool
	Load      Load // the backlog and the target's pace, for the caller's autoscaling
}

// Enqueue validates req and stores it durably as a queued job, unless the
// caller already submitted the same (user_id, idempotent_key): then it returns
// that job with Duplicate set. It returns only once the job is durable.
//
// req.AccountQueue, when set, switches the upstream's account-queue mode
// first (for every later job to it, from any caller). Admission control runs
// before anything is written: a rejected job leaves nothing behind and gets a
// *domain.RejectedError — except a duplicate of an accepted job, which is
// answered as a duplicate even under pressure.
func (s *Service) Enqueue(ctx context.Context, req *domain.JobRequest) (*EnqueueResult, error) {
	job, err := s.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	stored, fresh, err := s.store(ctx, job)
	if err != nil {
		return nil, err
	}
	if fresh {
		s.d.offer(stored)
	}
	return s.result(stored, !fresh), nil
}

// checkDestinations refuses a job whose url or webhook_url the destination
// rules forbid, when that can be known before dialing (literal addresses,
// denied names); addresses names resolve to are checked at dial time.
func (s *Service) checkDestinations(tenant, url, webhookURL string) error {
	if url != "" {
		if err := s.checkDestination(tenant, "url", url); err != nil {
			return err
		}
	}
	if webhookURL != "" {
		return s.checkDestination(tenant, "webhook_url", webhookURL)
	}
	return nil
}

func (s *Service) checkDestination(tenant, field, url string) error {
	p := s.policy
	if tp := s.tenants.policy(tenant); tp != nil {
		p = tp
	}
	return p.CheckURL(field, url)
}

// countSubmission tells Metrics how a submission ended.
func (s *Service) countSubmission(job *domain.Job, fresh bool, err error) {
	var rej *domain.RejectedError
	switch {
	case errors.As(err, &rej):
		s.cfg.Metrics.JobRejected(rej.Limit)
	case err != nil:
	case fresh:
		s.cfg.Metrics.JobAccepted(string(job.Upstream()))
	default:
		s.cfg.Metrics.JobDuplicate(string(job.Upstream()))
	}
}

// prepare validates req, applies its account-queue switch and builds the
// job it asks for.
func (s *Service) prepare(ctx context.Context, req *domain.JobRequest) (*domain.Job, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	tenant := TenantFrom(ctx)
	if err := s.checkDestinations(tenant, req.URL, req.WebhookURL); err != nil {
		return nil, err
	}
	scopeRequest(tenant, req)
	upstream := req.Upstream()
	if req.PoolID != "" {
		upstream = domain.PoolUpstream(req.PoolID) // scoped: each tenant's pools are its own
	}
	switch req.AccountQueue {
	case domain.AccountQueueEnabled:
		s.modes.Store(upstream, true)
	case domain.AccountQueueDisabled:
		s.modes.Store(upstream, false)
	}
	lane := domain.SharedQueue(upstream)
	if on, _ := s.modes.Load(upstream); on == true {
		lane = domain.TenantQueue(upstream, domain.TenantOf(req.UserID, req.Headers))
	}
	if _, capped := s.tenants.rateFor(tenant, upstream); capped {
		lane = tenantQueue(upstream, tenant) // its own queue, paced by its cap
	}
	id := req.ID
	if id == "" {
		id = s.ids.New()
	}
	return domain.NewJob(id, req, lane, s.cfg.Clock.Now()), nil
}

// store runs admission control and inserts job, unless its (user_id,
// idempotent_key) is taken: then it returns the job holding it (fresh false),
// even under pressure. It does not hand the job to its lane.
func (s *Service) store(ctx context.Context, job *domain.Job) (stored *domain.Job, fresh bool, err error) {
	defer func() { s.countSubmission(job, fresh, err) }()
	tenant := domain.TenantOfJob(job)
	if tenant != "" && s.tenants != nil {
		if qerr := s.tenants.admit(ctx, tenant); qerr != nil {
			if existing, lerr := s.cfg.Store.Lookup(ctx, job.UserID, job.IdempotentKey); lerr == nil {
				return existing, false, nil // a duplicate is answered even over quota
			}
			return nil, false, qerr
		}
	}
	if rej := s.adm.check(ctx); rej != nil {
		existing, err := s.cfg.Store.Lookup(ctx, job.UserID, job.IdempotentKey)
		if err == nil {
			return existing, false, nil
		}
		if !errors.Is(err, domain.ErrNotFound) {
			return nil, false, storeErr("look up job", err)
		}
		return nil, false, s.adm.reject(rej)
	}
	stored, fresh, err = s.cfg.Store.Insert(ctx, job)
	if err != nil {
		return nil, false, storeErr("store job", err)
	}
	if fresh {
		s.adm.admitted()
		if s.drain != nil {
			s.drain.activity()
		}
		if tenant != "" && s.tenants != nil {
			s.tenants.accepted(tenant)
		}
	}
	return stored, fresh, nil
}

func (s *Service) result(j *domain.Job, duplicate bool) *EnqueueResult {
	status := j.Status
	// A new job is answered as stored (queued), even if its lane already
	// picked it up; a duplicate shows where the job is now.
	if duplicate && status == domain.StatusQueued && s.d.isExecuting(j.ID) {
		status = domain.StatusInFlight
	}
	return &EnqueueResult{JobID: j.ID, Status: status, Duplicate: duplicate,
		Load: s.load.report(s.d.flowRate(j.Queue.Upstream()))}
}

// AccountQueues reports whether upstream is in account-queue mode.
func (s *Service) AccountQueues(upstream domain.UpstreamKey) bool {
	on, _ := s.modes.Load(upstream)
	return on == true
}

// Position returns j's 1-based place among the work waiting in its queue.
func (s *Service) Position(ctx context.Context, j *domain.Job) (int, error) {
	n, err := s.cfg.Store.Position(ctx, j.ReadyQueue, j.ReadySeq)
	if err != nil {
		return 0, storeErr("job position", err)
	}
	return max(n-s.d.executingAhead(j.ReadyQueue, j.ReadySeq), 0) + 1, nil
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
	if !visible(ctx, j) {
		return nil, domain.ErrNotFound // another tenant's job
	}
	if j.Status == domain.StatusQueued && s.d.isExecuting(id) {
		j.Status = domain.StatusInFlight // see dispatcher.markInFlightLater
	}
	if TenantFrom(ctx) != "" {
		j = j.Display() // as the tenant named it
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

// Cancel ends a job that is still waiting to be dispatched — queued, or
// waiting to retry — without sending it: the job fails with reason
// "canceled", and its webhook, if any, is still delivered. A job whose attempt
// is running, or that has finished, cannot be cancelled (domain.CodeConflict).
//
// With a store shared by several processes, only the job's owner is sure to
// hold it back; Cancel is meant for the process that accepted the job.
func (s *Service) Cancel(ctx context.Context, id domain.JobID) (*domain.Job, error) {
	j, err := s.Get(WithTenant(ctx, ""), id) // the stored job; visibility is checked next
	if err != nil {
		return nil, err
	}
	if !visible(ctx, j) {
		return nil, domain.ErrNotFound
	}
	if conflict := cancelConflict(j); conflict != nil {
		return nil, conflict
	}
	if holder := s.d.heldElsewhere(j.Queue.Upstream()); holder != "" {
		// Only the process dispatching the lane can keep the job from being
		// sent; cancelling here could race with it.
		return nil, &domain.Error{Code: domain.CodeConflict, Message: fmt.Sprintf(
			"job is dispatched by instance %s; send the cancel to that instance", holder)}
	}
	if err := s.d.claimCancel(j.ID); err != nil {
		return nil, err
	}
	if err := s.d.finishCanceled(ctx, j); err != nil {
		s.d.releaseCancel(j.ID)
		return nil, storeErr("cancel job", err)
	}
	after, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !after.Canceled() {
		// It finished some other way first (another process ran it).
		return nil, cancelConflict(after)
	}
	s.log.Info("job canceled", zap.String("job_id", string(id)))
	return after, nil
}

func cancelConflict(j *domain.Job) error {
	switch {
	case j.Status.Terminal():
		return &domain.Error{Code: domain.CodeConflict, Message: fmt.Sprintf("job already finished (%s); it cannot be canceled", j.Status)}
	case j.Status == domain.StatusInFlight:
		return errAlreadyDispatched
	}
	return nil
}

var errAlreadyDispatched = &domain.Error{Code: domain.CodeConflict, Message: "job already dispatched: its request is being sent; it cannot be canceled"}

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

// RegisterMember adds a member to a pool, or records its heartbeat when it
// is already there (BEHAVIOR.md §8). It reports whether the member is new.
// Pool membership lives in memory: after a restart, members rejoin with
// their next heartbeat, and pool jobs wait for them.
func (s *Service) RegisterMember(ctx context.Context, r *domain.MemberRegistration) (bool, error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	if err := s.checkDestination(TenantFrom(ctx), "address", r.Address); err != nil {
		return false, err
	}
	reg := *r
	reg.PoolID = scopePool(ctx, r.PoolID) // a tenant's pools are its own
	r = &reg
	if s.d.cluster != nil {
		return s.registerShared(ctx, r)
	}
	created := s.pools.register(r)
	if created {
		s.log.Info("pool member joined", zap.String("pool", r.PoolID), zap.String("member", r.MemberID),
			zap.Float64("capacity_rps", r.CapacityRPS))
	}
	return created, nil
}

// LeaveMember removes a member from a pool (graceful leave).
func (s *Service) LeaveMember(ctx context.Context, poolID, memberID string) error {
	poolID = scopePool(ctx, poolID)
	if s.d.cluster != nil {
		return s.leaveShared(ctx, poolID, memberID)
	}
	if err := s.pools.leave(poolID, memberID); err != nil {
		return err
	}
	s.log.Info("pool member left", zap.String("pool", poolID), zap.String("member", memberID))
	return nil
}

// Pools describes every pool and its members.
func (s *Service) Pools(ctx context.Context) map[string]PoolHealth {
	return poolsFor(ctx, s.pools.snapshot())
}
