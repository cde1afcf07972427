package app

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/app/dispatch"
	tenantpkg "github.com/aquiferhq/aquifer/internal/app/tenant"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// LaneView is one destination (an upstream: scheme://host:port, or
// pool:<id>) as an operator sees it: the pace it is configured for and
// held to, and why; its work; its pause and circuit.
type LaneView struct {
	Destination domain.UpstreamKey
	// CeilingRPS and CeilingMaxConcurrent are the configured ceiling (a
	// pool's: its members' live capacity).
	CeilingRPS           float64
	CeilingMaxConcurrent int
	// RPS and MaxConcurrent are the pace now.
	RPS           float64
	MaxConcurrent int
	// PacedBy names the signal that holds the pace below the ceiling
	// (domain.Signal*), "" at the ceiling; PacedAt is when it last moved.
	PacedBy string
	PacedAt time.Time
	// Mode names what holds the pace now: static, signalled, budget or
	// adaptive (dispatch.Mode*); ModeReason says why, in words. A lane
	// that is not live here is static at its configured ceiling.
	Mode       string
	ModeReason string
	// HeldUntil: a 503 with Retry-After holds the whole lane until then.
	HeldUntil time.Time
	// Backlog is how many of the caller's jobs to the destination are
	// waiting (queued in the store), InFlight how many attempts run now,
	// Buffered how many this process holds in memory.
	Backlog  int64
	InFlight int
	Buffered int
	// OldestQueued is when the oldest work waiting at its queue's head
	// entered its phase (zero: nothing waits).
	OldestQueued  time.Time
	LastError     string
	LastErrorAt   time.Time
	AccountQueues bool
	// Queues are the lane's queues with work in memory: the shared queue,
	// tenants' account queues and capped tenants' queues, each with the
	// rate-limit pause and cap that hold it. Operators only.
	Queues []QueueDetail
	// Paused is an operator's pause (nil: not paused).
	Paused *domain.LanePause
	// Circuit is the outage circuit.
	Circuit CircuitStats
	// Live: this process has a lane for the destination now. HeldBy names
	// the instance dispatching it when that is another (cluster mode).
	Live   bool
	HeldBy string
}

// Lanes describes every destination with a lane in this process, a
// backlog or a pause, in destination order.
func (s *Service) Lanes(ctx context.Context) ([]*LaneView, error) {
	set := map[domain.UpstreamKey]bool{}
	for _, st := range s.d.Stats() {
		set[st.Upstream] = true
	}
	for _, p := range s.d.Pauses() {
		set[p.Upstream] = true
	}
	if q, err := s.cfg.Store.ReadyQueues(ctx); err == nil {
		for _, k := range q {
			set[k.Upstream()] = true
		}
	}
	names := make([]domain.UpstreamKey, 0, len(set))
	for u := range set {
		names = append(names, u)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	out := make([]*LaneView, 0, len(names))
	for _, u := range names {
		v, err := s.lane(ctx, u)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Lane describes one destination, named as scheme://host[:port] or
// pool:<id> (a tenant names its own pool).
func (s *Service) Lane(ctx context.Context, dest string) (*LaneView, error) {
	u, err := s.laneKey(ctx, dest)
	if err != nil {
		return nil, err
	}
	return s.lane(ctx, u)
}

func (s *Service) laneKey(ctx context.Context, dest string) (domain.UpstreamKey, error) {
	if id, ok := strings.CutPrefix(dest, "pool:"); ok {
		if id == "" {
			return "", domain.Invalid("destination", "a pool lane is pool:<pool_id>")
		}
		return domain.PoolUpstream(tenantpkg.ScopePool(ctx, id)), nil
	}
	return destination(dest)
}

func (s *Service) lane(ctx context.Context, u domain.UpstreamKey) (*LaneView, error) {
	rate := s.cfg.Rates.For(u)
	v := &LaneView{Destination: u, CeilingRPS: rate.RPS, CeilingMaxConcurrent: rate.MaxConcurrent,
		RPS: rate.RPS, MaxConcurrent: rate.MaxConcurrent, AccountQueues: s.d.AccountQueues(u), HeldBy: s.d.HeldElsewhere(u)}
	v.Mode = dispatch.ModeStatic
	operator := tenantpkg.Operator(ctx)
	if det, ok := s.d.LaneDetail(ctx, u); ok {
		v.Live = true
		v.CeilingRPS, v.CeilingMaxConcurrent = det.CeilingRPS, det.CeilingMaxConcurrent
		v.RPS, v.MaxConcurrent, v.PacedBy, v.PacedAt, v.HeldUntil = det.RPS, det.MaxConcurrent, det.PacedBy, det.PacedAt, det.HeldUntil
		v.Mode, v.ModeReason = det.Mode, det.ModeReason
		v.InFlight, v.Buffered, v.Circuit = det.InFlight, det.Buffered, det.Circuit
		if operator {
			v.LastError, v.LastErrorAt, v.Queues = det.LastError, det.LastErrorAt, det.Queues
		} else {
			v.Circuit.LastError = ""
		}
		for _, q := range det.Queues {
			if !q.OldestBuffered.IsZero() && (v.OldestQueued.IsZero() || q.OldestBuffered.Before(v.OldestQueued)) {
				v.OldestQueued = q.OldestBuffered
			}
		}
	}
	if p, ok := s.d.Paused(u); ok {
		v.Paused = &p
	}
	now := s.cfg.Clock.Now()
	if st := s.opStore; st != nil {
		c, err := st.CountJobs(ctx, &ports.CountJobsParams{Filter: domain.JobFilter{Destination: u, Tenant: tenantpkg.Scoped(ctx)}, Now: now})
		if err != nil {
			return nil, domain.StoreFailure("count the lane's jobs", err)
		}
		v.Backlog = c[domain.StatusQueued]
	}
	if head, err := s.cfg.Store.ListReady(ctx, &ports.ListReadyParams{Queue: domain.SharedQueue(u), Limit: 1, Now: now}); err == nil && len(head) > 0 {
		if at := head[0].PhaseStart(); v.OldestQueued.IsZero() || at.Before(v.OldestQueued) {
			v.OldestQueued = at
		}
	}
	return v, nil
}

// ErrOperatorOnly refuses lane control to a tenant's key.
var ErrOperatorOnly = &domain.Error{Code: domain.CodeForbidden, Message: "only an admin key may pause or resume lanes"}

// PauseLane pauses a destination: its jobs are accepted and stored, none
// is dispatched (nor any webhook delivered to it) until ResumeLane. The
// pause is durable and, on a shared store, holds for every instance.
// Attempts running when it starts finish.
func (s *Service) PauseLane(ctx context.Context, dest, reason string) (*LaneView, error) {
	return s.setPause(ctx, dest, func(st ports.OperatorStore, u domain.UpstreamKey) error {
		if len(reason) > 500 {
			return domain.Invalid("reason", "reason must be at most 500 characters")
		}
		return st.PauseLane(ctx, domain.LanePause{Upstream: u, At: s.cfg.Clock.Now(), Reason: reason})
	})
}

// ResumeLane ends a destination's pause (resuming a lane that is not
// paused changes nothing).
func (s *Service) ResumeLane(ctx context.Context, dest string) (*LaneView, error) {
	return s.setPause(ctx, dest, func(st ports.OperatorStore, u domain.UpstreamKey) error {
		return st.ResumeLane(ctx, u)
	})
}

func (s *Service) setPause(ctx context.Context, dest string, write func(ports.OperatorStore, domain.UpstreamKey) error) (*LaneView, error) {
	if !tenantpkg.Operator(ctx) {
		return nil, ErrOperatorOnly
	}
	st, err := s.operatorStore()
	if err != nil {
		return nil, err
	}
	u, err := s.laneKey(ctx, dest)
	if err != nil {
		return nil, err
	}
	if err := write(st, u); err != nil {
		var de *domain.Error
		if errors.As(err, &de) && de.Code == domain.CodeInvalid {
			return nil, err
		}
		return nil, domain.StoreFailure("record the lane pause", err)
	}
	if err := s.loadPauses(ctx); err != nil {
		return nil, domain.StoreFailure("read lane pauses", err)
	}
	if s.bus != nil {
		s.bus.Broadcast(ports.ClusterMessage{Pauses: true})
	}
	_, paused := s.d.Paused(u)
	s.log.Info("lane pause changed by an operator", zap.String("destination", string(u)), zap.Bool("paused", paused))
	return s.lane(ctx, u)
}

// loadPauses reads the paused lanes from the store into the dispatcher.
func (s *Service) loadPauses(ctx context.Context) error {
	if s.opStore == nil {
		return nil
	}
	ps, err := s.opStore.LanePauses(ctx)
	if err != nil {
		return err
	}
	s.d.SetPauses(ps)
	return nil
}
