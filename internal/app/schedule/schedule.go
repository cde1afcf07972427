// Package schedule moves waiting jobs on when their time comes: a scheduled
// job (not_before ahead) enters its lane when it is due, and a job still
// waiting at its deadline fails with "deadline exceeded" instead of going
// out late.
//
// Scheduled jobs live in the store only — no lane holds them, so a million
// jobs due tomorrow cost disk, not memory. The Scheduler knows the earliest
// due time (from the store at start, from every job this process schedules,
// and from a poll of the store for jobs other processes scheduled) and sleeps
// until then; at the due time it has the store promote the due jobs in
// due-time order, each with a fresh ReadySeq, and offers them to their lanes
// as if just submitted, so they still obey each lane's pace.
//
// Deadlines are enforced three ways: a lane never starts a job past its
// deadline (it fails it instead), an attempt whose retry would start past the
// deadline fails at once, and the poll here fails jobs that wait past their
// deadline anywhere else — deep in a backlog, in a paused lane, scheduled
// behind it — so their webhook goes out at the deadline, not when the lane
// reaches them.
package schedule

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Dispatch is what the scheduler needs from the dispatcher.
type Dispatch interface {
	// Offer hands just-committed ready work to its lane (or to the process
	// holding it).
	Offer(j *domain.Job)
	// Holds reports whether this process dispatches u: only the holder
	// may fail a lane's waiting jobs.
	Holds(u domain.UpstreamKey) bool
	// FailWaiting fails j, which waits for dispatch, with reason, unless
	// it is running or finished by now (then it returns an error and j is
	// left alone).
	FailWaiting(ctx context.Context, j *domain.Job, reason string) error
}

// Config shapes a Scheduler.
type Config struct {
	Store ports.ScheduleStore
	Clock ports.Clock
	Log   *zap.Logger
	// Poll is how often the store is asked for the next due time (jobs
	// other processes scheduled) and for jobs past their deadline.
	// Default 1s.
	Poll time.Duration
	// Batch is how many jobs one promotion or deadline pass handles at most
	// per store call. Default 1000.
	Batch int
}

// retryAfter is how long the scheduler waits after a failed store call.
const retryAfter = time.Second

// Scheduler promotes due jobs and fails overdue ones; Run runs it.
type Scheduler struct {
	cfg Config
	d   Dispatch

	mu   sync.Mutex
	next time.Time // the earliest due time known, zero if none
	wake chan struct{}

	promoted, expired int64 // totals, for logs and tests; guarded by mu
}

// New returns a scheduler; Run starts it.
func New(cfg Config, d Dispatch) *Scheduler {
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	return &Scheduler{cfg: cfg, d: d, wake: make(chan struct{}, 1)}
}

// Scheduled tells the scheduler that a job became scheduled for at (just
// committed), so it wakes for it even before its next poll.
func (s *Scheduler) Scheduled(at time.Time) {
	s.mu.Lock()
	earlier := s.next.IsZero() || at.Before(s.next)
	if earlier {
		s.next = at
	}
	s.mu.Unlock()
	if earlier {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// Stats returns how many jobs the scheduler promoted and failed past their
// deadline since it started.
func (s *Scheduler) Stats() (promoted, expired int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.promoted, s.expired
}

// Run promotes and expires until ctx ends.
func (s *Scheduler) Run(ctx context.Context) {
	clock := s.cfg.Clock
	s.refresh(ctx)
	pollAt := clock.Now().Add(s.cfg.Poll)
	for ctx.Err() == nil {
		now := clock.Now()
		if !now.Before(pollAt) {
			s.refresh(ctx)
			s.expire(ctx, now)
			pollAt = now.Add(s.cfg.Poll)
		}
		s.mu.Lock()
		next := s.next
		s.mu.Unlock()
		if !next.IsZero() && !now.Before(next) {
			if !s.promote(ctx, now) {
				pollAt = minTime(pollAt, now.Add(retryAfter))
				s.sleep(ctx, retryAfter)
			}
			continue
		}
		wait := pollAt.Sub(now)
		if !next.IsZero() {
			wait = min(wait, next.Sub(now))
		}
		s.sleep(ctx, wait)
	}
}

// sleep waits for d, a newly scheduled job, or the end of ctx.
func (s *Scheduler) sleep(ctx context.Context, d time.Duration) {
	t := s.cfg.Clock.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-s.wake:
	case <-t.C():
	}
}

// refresh reads the earliest due time from the store: it may hold jobs
// other processes scheduled, or ones this process scheduled before a
// restart.
func (s *Scheduler) refresh(ctx context.Context) {
	next, err := s.cfg.Store.NextDue(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Log.Warn("reading the next scheduled job failed", zap.Error(err))
		}
		return
	}
	s.mu.Lock()
	if !next.IsZero() && (s.next.IsZero() || next.Before(s.next)) {
		s.next = next
	}
	s.mu.Unlock()
}

// promote makes every job due at now ready and offers it to its lane, then
// learns the next due time. It reports false if the store failed.
func (s *Scheduler) promote(ctx context.Context, now time.Time) bool {
	// Forget the due time first: a job scheduled meanwhile sets it again,
	// and NextDue below finds the rest.
	s.mu.Lock()
	s.next = time.Time{}
	s.mu.Unlock()
	for ctx.Err() == nil {
		jobs, err := s.cfg.Store.PromoteDue(ctx, &ports.PromoteParams{Now: now, Limit: s.cfg.Batch})
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Log.Warn("promoting due jobs failed; retrying", zap.Error(err))
			}
			s.mu.Lock()
			if s.next.IsZero() || now.Before(s.next) {
				s.next = now // still due (without a wake: the caller waits before trying again)
			}
			s.mu.Unlock()
			return false
		}
		for _, j := range jobs {
			s.d.Offer(j)
		}
		s.mu.Lock()
		s.promoted += int64(len(jobs))
		s.mu.Unlock()
		if len(jobs) < s.cfg.Batch {
			break
		}
	}
	s.refresh(ctx)
	return true
}

// expire fails the jobs of lanes this process holds that still wait for
// dispatch past their deadline.
func (s *Scheduler) expire(ctx context.Context, now time.Time) {
	jobs, err := s.cfg.Store.Overdue(ctx, &ports.OverdueParams{Now: now, Limit: s.cfg.Batch})
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Log.Warn("reading jobs past their deadline failed", zap.Error(err))
		}
		return
	}
	n := 0
	for _, j := range jobs {
		if ctx.Err() != nil {
			return
		}
		if !s.d.Holds(j.Queue.Upstream()) {
			continue // its lane's holder fails it
		}
		if err := s.d.FailWaiting(ctx, j, domain.ReasonDeadlineExceeded); err != nil {
			continue // running or finished meanwhile: its attempt decides
		}
		n++
	}
	if n > 0 {
		s.mu.Lock()
		s.expired += int64(n)
		s.mu.Unlock()
		s.cfg.Log.Info("jobs not dispatched by their deadline failed", zap.Int("count", n))
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
