package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/app/admit"
	"github.com/aquiferhq/aquifer/internal/app/dispatch"
	"github.com/aquiferhq/aquifer/internal/app/drain"
	"github.com/aquiferhq/aquifer/internal/app/edge"
	"github.com/aquiferhq/aquifer/internal/app/events"
	"github.com/aquiferhq/aquifer/internal/app/lease"
	"github.com/aquiferhq/aquifer/internal/app/load"
	"github.com/aquiferhq/aquifer/internal/app/ops"
	"github.com/aquiferhq/aquifer/internal/app/pool"
	"github.com/aquiferhq/aquifer/internal/app/schedule"
	tenantpkg "github.com/aquiferhq/aquifer/internal/app/tenant"
	"github.com/aquiferhq/aquifer/internal/app/trust"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Service is Aquifer's application core. Inbound adapters call its methods;
// it builds the packages that do the work and runs their background loops.
type Service struct {
	cfg     Config
	log     *zap.Logger
	ids     *domain.IDGenerator
	broker  *events.Broker
	d       *dispatch.Dispatcher
	load    *load.Gauge
	adm     *admit.Controller
	pools   *pool.Registry
	tenants *tenantpkg.Registry // nil without API-key tenants
	signer  *trust.Signer
	proxy   *edge.Proxy
	drain   *drain.Drainer // nil unless drain mode is on
	policy  *domain.DestinationPolicy
	sched   *schedule.Scheduler

	// opStore is the store's operator side (nil if it has none); ops runs
	// bulk operations.
	opStore ports.OperatorStore
	ops     *ops.Runner
	counts  countCache

	// Cluster mode only (nil otherwise).
	leases *lease.Leases
	shared *pool.Shared
	bus    ports.MessageBus

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
		broker: events.NewBroker(cfg.SubscriberBuffer),
		adm:    admit.New(cfg.Admission, cfg.Store, cfg.Clock),
	}
	var err error
	if s.policy, err = domain.NewDestinationPolicy(cfg.Destinations); err != nil {
		return nil, err
	}
	if s.tenants, err = tenantpkg.New(cfg.Tenants, cfg.Destinations, cfg.Store, cfg.Clock); err != nil {
		return nil, err
	}
	s.signer = trust.NewSigner(cfg.L8, cfg.WebhookSecrets, s.tenants.WebhookSecrets, cfg.Doer, cfg.Clock,
		cfg.Logger.Named("dispatch"))
	// The registry wakes a pool's lane when it gains capacity; the lane
	// exists only once the dispatcher does.
	s.pools = pool.New(cfg.Clock.Now, func(poolID string) { s.d.PoolChanged(poolID) })
	deps := dispatch.Deps{Events: publisher{s}, Pools: s.pools, Signer: s.signer}
	if s.tenants != nil {
		deps.Tenants = s.tenants
	}
	if cfg.clustered() {
		p := cfg.Cluster.Peers
		s.bus = p.Bus
		s.leases = lease.New(cfg.Cluster.lease(), p.Leases, p.Bus, cfg.Store, cfg.Clock, s.log)
		deps.Owner = s.leases
	}
	s.load = load.NewGauge(cfg.Store, func() int { return s.d.ExecutingCount() }, cfg.Clock, s.log)
	deps.Load = s.load
	s.d = dispatch.New(cfg.dispatch(), deps)
	if s.leases != nil {
		s.leases.Bind(s.d)
		p := cfg.Cluster.Peers
		s.shared = pool.NewShared(s.pools, p.Members, p.Bus, func(id string) bool { return s.d.Holds(domain.PoolUpstream(id)) },
			cfg.Cluster.SyncInterval, cfg.Clock, s.log)
	}
	s.proxy = edge.New(cfg.Proxy, cfg.Store, intake{s}, s.d, s.broker, s.load, s.log)
	s.sched = schedule.New(schedule.Config{Store: cfg.Store, Clock: cfg.Clock, Log: s.log.Named("schedule"),
		Poll: cfg.ScheduleLookahead}, s.d)
	if st, ok := cfg.Store.(ports.OperatorStore); ok {
		s.opStore = st
		s.ops = ops.New(ops.Config{Store: st, Hooks: opHooks{s}, Clock: cfg.Clock, Log: s.log.Named("ops"),
			BatchSize: cfg.OperationBatch, Retention: s.d.Retention(domain.StatusFailed)})
	}
	if cfg.Drain.Enabled {
		s.drain = drain.New(cfg.Drain, drain.Deps{Ledger: cfg.Store.(ports.LedgerStore), Doer: cfg.Doer, Signer: s.signer,
			Idle: s.idleNow, Flushed: s.proxy.Reset, Clock: cfg.Clock, Logger: s.log, RequestTimeout: cfg.RequestTimeout,
			PurgeBatch: cfg.PurgeBatch})
	}
	return s, nil
}

// publisher tells local subscribers about job events and, in cluster mode,
// the other processes (without the result, which they load from the store).
type publisher struct{ s *Service }

func (p publisher) Publish(ev domain.Event) {
	p.s.broker.Publish(ev)
	if p.s.bus != nil {
		ev.Result = nil
		p.s.bus.Broadcast(ports.ClusterMessage{Events: []domain.Event{ev}})
	}
}

// intake is the Service as the edge proxy submits through it.
type intake struct{ s *Service }

func (i intake) Prepare(ctx context.Context, req *domain.JobRequest) (*domain.Job, error) {
	return i.s.prepare(ctx, req)
}
func (i intake) Store(ctx context.Context, job *domain.Job) (*domain.Job, bool, error) {
	end := i.s.traceEnqueue(job)
	stored, fresh, err := i.s.store(ctx, job)
	end(fresh, err, i.s.cfg.Clock.Now())
	return stored, fresh, err
}
func (i intake) Get(ctx context.Context, id domain.JobID) (*domain.Job, error) {
	return i.s.Get(ctx, id)
}
func (i intake) Subscribe(ctx context.Context, id domain.JobID) (*domain.Job, *events.Subscription, error) {
	return i.s.Subscribe(ctx, id)
}

// Broker returns the event broker (for adapters that stream).
func (s *Service) Broker() *events.Broker { return s.broker }

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
	queues, err := s.cfg.Store.ReadyQueues(ctx)
	if err != nil {
		return fmt.Errorf("list lanes with waiting work: %w", err)
	}
	for _, q := range queues {
		s.d.Notify(q, false) // in cluster mode: only lanes this process holds (none yet)
	}
	s.log.Info("recovered queued work", zap.Int("in_flight_requeued", n), zap.Int("lanes", len(queues)))
	if s.leases != nil {
		s.shared.Sync(ctx)
		s.leases.Sync(ctx) // take a fair share of the lanes before dispatching starts
	}
	s.load.Refresh(ctx, true)
	if err := s.loadPauses(ctx); err != nil {
		return fmt.Errorf("read lane pauses: %w", err)
	}
	s.d.Start()
	s.background = s.startBackground()
	if s.ops != nil {
		if _, err := s.ops.Resume(ctx); err != nil {
			s.log.Error("could not resume bulk operations; they resume at the next start", zap.Error(err))
		}
	}
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
	if s.ops != nil {
		_ = s.ops.Stop(ctx) // a batch under way commits or not; the operation resumes at the next start
	}
	if bg != nil {
		bg.stop()
	}
	err := s.d.Stop(ctx)
	if s.leases != nil {
		s.leases.ReleaseAll(context.WithoutCancel(ctx))
	}
	return err
}

// Proxy handles one edge-proxy request (see package edge).
func (s *Service) Proxy(ctx context.Context, req *domain.JobRequest) (*ProxyResult, error) {
	return s.proxy.Proxy(ctx, req)
}

// L8Metadata is the discovery document for /.well-known/l8 (nil when L8 is
// off).
func (s *Service) L8Metadata() *l8.Metadata { return s.signer.Metadata() }

// L8Challenge answers another party's challenge (BEHAVIOR.md §23.4).
// Rejections are domain.CodeInvalid errors with the protocol's messages.
func (s *Service) L8Challenge(_ context.Context, c *l8.ChallengeRequest) (*l8.ChallengeResponse, error) {
	return s.signer.Answer(c)
}

// idleNow reports whether the whole process has nothing to do: nothing
// queued, running or waiting for delivery in the store, and nothing in a
// lane (drain mode).
func (s *Service) idleNow(ctx context.Context) (bool, error) {
	if s.d.ExecutingCount() > 0 || s.d.AnyBusy() {
		return false, nil
	}
	c, err := s.cfg.Store.Counts(ctx)
	if err != nil {
		return false, err
	}
	return c.Total() == 0, nil
}

// onClusterMessage handles what other processes broadcast: work for lanes
// this process holds, job events for local subscribers, pool changes.
func (s *Service) onClusterMessage(ctx context.Context, m ports.ClusterMessage) {
	for _, w := range m.Work {
		if s.d.Holds(w.Queue.Upstream()) {
			s.d.NotifyFrom(w.Queue, w.ReadySeq-1)
		}
	}
	for _, ev := range m.Events {
		if !s.broker.HasSubscribers(ev.JobID) {
			continue
		}
		if ev.Type.Terminal() && ev.Result == nil {
			if j, err := s.cfg.Store.Get(ctx, ev.JobID); err == nil {
				ev.Result = j.Result
			}
		}
		s.broker.Deliver(ev)
	}
	if len(m.Pools) > 0 {
		s.shared.Kick()
	}
	if m.Pauses {
		if err := s.loadPauses(ctx); err != nil {
			s.log.Warn("could not reload lane pauses", zap.Error(err))
		}
	}
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
	end := s.traceEnqueue(job)
	stored, fresh, err := s.store(ctx, job)
	end(fresh, err, s.cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	if fresh {
		s.release(stored)
	}
	return s.result(stored, !fresh), nil
}

// traceEnqueue begins job's enqueue span and sets the trace context it
// stores; the returned function ends the span.
func (s *Service) traceEnqueue(job *domain.Job) func(bool, error, time.Time) {
	var end func(bool, error, time.Time)
	job.TraceParent, job.TraceState, end = s.cfg.Tracer.Enqueue(job, s.cfg.Clock.Now())
	return end
}

// release hands a just-stored job on: to its lane, or, when it is
// scheduled, to the scheduler that makes it ready when it is due.
func (s *Service) release(j *domain.Job) {
	if j.Scheduled() {
		s.sched.Scheduled(j.NotBefore)
		return
	}
	s.d.Offer(j)
}

// MaxBatch is the most jobs one EnqueueBatch takes.
const MaxBatch = 1000

// BatchItem is one job's answer in EnqueueBatch: its result, or the error
// that kept it out (a *domain.Error naming the field).
type BatchItem struct {
	Result *EnqueueResult
	Err    error
}

// EnqueueBatch validates each request on its own and stores every valid
// one durably in one commit; it answers one item per request, in order. An
// invalid request gets its error and never keeps the others out; a request
// whose (user_id, idempotent_key) is taken — by a stored job or an earlier
// request of the batch — is answered as a duplicate. Admission control
// judges the batch as a whole, before anything is written: a rejection
// (a *domain.RejectedError) writes nothing. A store failure fails the whole
// batch (nothing was accepted).
func (s *Service) EnqueueBatch(ctx context.Context, reqs []*domain.JobRequest) ([]BatchItem, error) {
	if len(reqs) > MaxBatch {
		return nil, domain.Invalid("jobs", "a batch holds at most %d jobs", MaxBatch)
	}
	items := make([]BatchItem, len(reqs))
	jobs := make([]*domain.Job, 0, len(reqs))
	at := make([]int, 0, len(reqs)) // the item of each job
	for i, req := range reqs {
		job, err := s.prepare(ctx, req)
		if err != nil {
			items[i].Err = err
			continue
		}
		jobs, at = append(jobs, job), append(at, i)
	}
	if len(jobs) == 0 {
		return items, nil
	}
	out, err := s.storeBatch(ctx, jobs)
	if err != nil {
		return nil, err
	}
	for k, o := range out {
		if o.Fresh {
			s.release(o.Job)
		}
		items[at[k]].Result = s.result(o.Job, !o.Fresh)
	}
	return items, nil
}

// storeBatch runs admission control once for jobs and inserts them in one
// commit. Over a limit, a batch made only of duplicates is still answered.
func (s *Service) storeBatch(ctx context.Context, jobs []*domain.Job) ([]ports.InsertOutcome, error) {
	tenant := domain.TenantOfJob(jobs[0])
	var rejected error
	if tenant != "" {
		rejected = s.tenants.Admit(ctx, tenant)
	}
	if rejected == nil {
		if rej := s.adm.Check(ctx); rej != nil {
			rejected = s.adm.Reject(rej)
		}
	}
	if rejected != nil {
		out := make([]ports.InsertOutcome, len(jobs))
		for i, j := range jobs {
			existing, err := s.cfg.Store.Lookup(ctx, j.UserID, j.IdempotentKey)
			if err != nil {
				s.countBatch(jobs, nil, rejected)
				return nil, rejected
			}
			out[i] = ports.InsertOutcome{Job: existing}
		}
		s.countBatch(jobs, out, nil)
		return out, nil
	}
	ends := make([]func(bool, error, time.Time), len(jobs))
	for i, j := range jobs {
		ends[i] = s.traceEnqueue(j)
	}
	out, err := s.cfg.Store.InsertBatch(ctx, jobs)
	now := s.cfg.Clock.Now()
	for i, end := range ends {
		end(err == nil && out[i].Fresh, err, now)
	}
	if err != nil {
		return nil, domain.StoreFailure("store jobs", err)
	}
	s.countBatch(jobs, out, nil)
	for _, o := range out {
		if !o.Fresh {
			continue
		}
		s.adm.Admitted()
		if s.drain != nil {
			s.drain.Activity()
		}
		if tenant != "" {
			s.tenants.Accepted(tenant)
		}
	}
	return out, nil
}

// countBatch tells Metrics how each job of a batch ended.
func (s *Service) countBatch(jobs []*domain.Job, out []ports.InsertOutcome, err error) {
	for i, j := range jobs {
		if err != nil {
			s.countSubmission(j, false, err)
		} else {
			s.countSubmission(j, out[i].Fresh, nil)
		}
	}
}

// checkDestinations refuses a job whose url or webhook_url the destination
// rules forbid, when that can be known before dialing (literal addresses,
// denied names); addresses names resolve to are checked at dial time.
// req has been validated, so its URLs' hosts are known without parsing.
func (s *Service) checkDestinations(tenant string, req *domain.JobRequest) error {
	for _, f := range [2]struct{ field, url string }{{"url", req.URL}, {"webhook_url", req.WebhookURL}} {
		if f.url == "" {
			continue
		}
		var err error
		if host, ok := req.ValidatedHost(f.url); ok {
			err = s.policyOf(tenant).CheckURLHost(f.field, host)
		} else {
			err = s.checkDestination(tenant, f.field, f.url)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) checkDestination(tenant, field, url string) error {
	return s.policyOf(tenant).CheckURL(field, url)
}

// policyOf is the destination rules for tenant's jobs: its own, or else
// the server's.
func (s *Service) policyOf(tenant string) *domain.DestinationPolicy {
	if tp := s.tenants.Policy(tenant); tp != nil {
		return tp
	}
	return s.policy
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
	if err := req.ResolveOptions(s.cfg.Clock.Now(), s.cfg.JobBounds); err != nil {
		return nil, err
	}
	tenant := tenantpkg.From(ctx)
	if err := s.checkDestinations(tenant, req); err != nil {
		return nil, err
	}
	tenantpkg.ScopeRequest(tenant, req)
	upstream := req.Upstream()
	if req.PoolID != "" {
		upstream = domain.PoolUpstream(req.PoolID) // scoped: each tenant's pools are its own
	}
	switch req.AccountQueue {
	case domain.AccountQueueEnabled:
		s.d.SetAccountQueues(upstream, true)
	case domain.AccountQueueDisabled:
		s.d.SetAccountQueues(upstream, false)
	}
	lane := domain.SharedQueue(upstream)
	if s.d.AccountQueues(upstream) {
		lane = domain.TenantQueue(upstream, domain.TenantOf(req.UserID, req.Headers))
	}
	if _, capped := s.tenants.Rate(tenant, upstream); capped {
		lane = tenantpkg.Queue(upstream, tenant) // its own queue, paced by its cap
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
	if tenant != "" {
		if qerr := s.tenants.Admit(ctx, tenant); qerr != nil {
			if existing, lerr := s.cfg.Store.Lookup(ctx, job.UserID, job.IdempotentKey); lerr == nil {
				return existing, false, nil // a duplicate is answered even over quota
			}
			return nil, false, qerr
		}
	}
	if rej := s.adm.Check(ctx); rej != nil {
		existing, err := s.cfg.Store.Lookup(ctx, job.UserID, job.IdempotentKey)
		if err == nil {
			return existing, false, nil
		}
		if !errors.Is(err, domain.ErrNotFound) {
			return nil, false, domain.StoreFailure("look up job", err)
		}
		return nil, false, s.adm.Reject(rej)
	}
	stored, fresh, err = s.cfg.Store.Insert(ctx, job)
	if err != nil {
		return nil, false, domain.StoreFailure("store job", err)
	}
	if fresh {
		s.adm.Admitted()
		if s.drain != nil {
			s.drain.Activity()
		}
		if tenant != "" {
			s.tenants.Accepted(tenant)
		}
	}
	return stored, fresh, nil
}

func (s *Service) result(j *domain.Job, duplicate bool) *EnqueueResult {
	status := j.Status
	// A new job is answered as stored (queued), even if its lane already
	// picked it up; a duplicate shows where the job is now.
	if duplicate && status == domain.StatusQueued && s.d.Executing(j.ID) {
		status = domain.StatusInFlight
	}
	return &EnqueueResult{JobID: j.ID, Status: status, Duplicate: duplicate,
		Load: s.load.Report(s.d.FlowRate(j.Queue.Upstream()))}
}

// AccountQueues reports whether upstream is in account-queue mode.
func (s *Service) AccountQueues(upstream domain.UpstreamKey) bool { return s.d.AccountQueues(upstream) }

// Position returns j's 1-based place among the work waiting in its queue
// (0 for a scheduled job: it is in no queue yet).
func (s *Service) Position(ctx context.Context, j *domain.Job) (int, error) {
	if j.Scheduled() {
		return 0, nil
	}
	n, err := s.cfg.Store.Position(ctx, j.ReadyQueue, j.ReadySeq)
	if err != nil {
		return 0, domain.StoreFailure("job position", err)
	}
	return max(n-s.d.ExecutingAhead(j.ReadyQueue, j.ReadySeq), 0) + 1, nil
}

// Get returns a job, or domain.ErrNotFound.
func (s *Service) Get(ctx context.Context, id domain.JobID) (*domain.Job, error) {
	if !domain.ValidJobID(string(id)) {
		return nil, domain.ErrNotFound
	}
	j, err := s.cfg.Store.Get(ctx, id)
	if err != nil {
		return nil, domain.StoreFailure("read job", err)
	}
	if !tenantpkg.Visible(ctx, j) {
		return nil, domain.ErrNotFound // another tenant's job
	}
	if j.Status == domain.StatusQueued && s.d.Executing(id) {
		j.Status = domain.StatusInFlight // quick attempts are in flight only in memory
	}
	if tenantpkg.Scoped(ctx) != "" {
		j = j.Display() // as the tenant named it
	}
	return j, nil
}

// Subscribe returns the job as it is now and a subscription to its future
// events. The subscription is opened before the job is read, so no event that
// happens after the returned state is missed. The caller must Close it.
func (s *Service) Subscribe(ctx context.Context, id domain.JobID) (*domain.Job, *events.Subscription, error) {
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
	if !tenantpkg.Visible(ctx, j) {
		return nil, domain.ErrNotFound
	}
	if conflict := cancelConflict(j); conflict != nil {
		return nil, conflict
	}
	if holder := s.d.HeldElsewhere(j.Queue.Upstream()); holder != "" {
		// Only the process dispatching the lane can keep the job from being
		// sent; cancelling here could race with it.
		return nil, &domain.Error{Code: domain.CodeConflict, Message: fmt.Sprintf(
			"job is dispatched by instance %s; send the cancel to that instance", holder)}
	}
	if err := s.d.ClaimCancel(j.ID); err != nil {
		return nil, err
	}
	if err := s.d.FinishCanceled(ctx, j); err != nil {
		s.d.ReleaseCancel(j.ID)
		return nil, domain.StoreFailure("cancel job", err)
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
		return dispatch.ErrAlreadyDispatched
	}
	return nil
}

// RegisterMember adds a member to a pool, or records its heartbeat when it
// is already there (BEHAVIOR.md §8). It reports whether the member is new.
// Pool membership lives in memory: after a restart, members rejoin with
// their next heartbeat, and pool jobs wait for them.
func (s *Service) RegisterMember(ctx context.Context, r *domain.MemberRegistration) (bool, error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	if err := s.checkDestination(tenantpkg.From(ctx), "address", r.Address); err != nil {
		return false, err
	}
	reg := *r
	reg.PoolID = tenantpkg.ScopePool(ctx, r.PoolID) // a tenant's pools are its own
	r = &reg
	if s.shared != nil {
		return s.shared.Register(ctx, r)
	}
	created := s.pools.Register(r)
	if created {
		s.log.Info("pool member joined", zap.String("pool", r.PoolID), zap.String("member", r.MemberID),
			zap.Float64("capacity_rps", r.CapacityRPS))
	}
	return created, nil
}

// LeaveMember removes a member from a pool (graceful leave).
func (s *Service) LeaveMember(ctx context.Context, poolID, memberID string) error {
	poolID = tenantpkg.ScopePool(ctx, poolID)
	if s.shared != nil {
		return s.shared.Leave(ctx, poolID, memberID)
	}
	if err := s.pools.Leave(poolID, memberID); err != nil {
		return err
	}
	s.log.Info("pool member left", zap.String("pool", poolID), zap.String("member", memberID))
	return nil
}

// Pools describes every pool and its members.
func (s *Service) Pools(ctx context.Context) map[string]PoolHealth {
	return poolsFor(ctx, s.pools.Snapshot())
}
