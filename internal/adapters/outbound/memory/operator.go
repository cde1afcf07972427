package memory

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// ListJobs implements ports.OperatorStore by a scan of every job: the
// memory store holds what fits in memory, and tests.
func (s *Store) ListJobs(_ context.Context, p *ports.ListJobsParams) ([]*domain.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	var out []*domain.Job
	for _, j := range s.jobs {
		if (p.BeforeSeq <= 0 || j.Seq < p.BeforeSeq) && !j.Expired(p.Now) && p.Filter.Matches(j) {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Seq > out[b].Seq })
	out = out[:min(len(out), max(p.Limit, 1))]
	for i, j := range out {
		out[i] = j.Clone()
	}
	return out, nil
}

// CountJobs implements ports.OperatorStore.
func (s *Store) CountJobs(_ context.Context, p *ports.CountJobsParams) (map[domain.Status]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	out := map[domain.Status]int64{}
	for _, j := range s.jobs {
		if !j.Expired(p.Now) && p.Filter.MatchesIgnoringStatus(j) {
			out[j.Status]++
		}
	}
	return out, nil
}

// Retry implements ports.OperatorStore.
func (s *Store) Retry(_ context.Context, p *ports.RetryParams) (*domain.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	j, ok := s.jobs[p.ID]
	if !ok || j.Expired(p.Now) {
		return nil, domain.ErrNotFound
	}
	if !j.Retryable() {
		return nil, domain.ErrNotFinished
	}
	s.retryLocked(j, p)
	return j.Clone(), nil
}

func (s *Store) retryLocked(j *domain.Job, p *ports.RetryParams) {
	s.seq++
	j.Status, j.Attempts, j.Deferrals, j.Result, j.Delivery = domain.StatusQueued, 0, 0, nil, nil
	j.ReadyQueue, j.ReadySeq = j.Queue, s.seq
	j.UpdatedAt, j.ExpiresAt = p.Now, p.Now.Add(domain.QueuedTTL)
	j.NotBefore, j.Deadline = time.Time{}, time.Time{}
}

// SaveOperation implements ports.OperatorStore.
func (s *Store) SaveOperation(_ context.Context, op *domain.Operation) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	s.ops[op.ID] = cloneOp(op)
	return nil
}

func cloneOp(op *domain.Operation) *domain.Operation {
	c := *op
	c.Filter.Statuses = slices.Clone(op.Filter.Statuses)
	return &c
}

// GetOperation implements ports.OperatorStore.
func (s *Store) GetOperation(_ context.Context, id string) (*domain.Operation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	op, ok := s.ops[id]
	if !ok {
		return nil, domain.ErrNotFound
	}
	return cloneOp(op), nil
}

// Operations implements ports.OperatorStore.
func (s *Store) Operations(_ context.Context, running bool) ([]*domain.Operation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	var out []*domain.Operation
	for _, op := range s.ops {
		if !running || op.State == domain.OpRunning {
			out = append(out, cloneOp(op))
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].CreatedAt.Equal(out[b].CreatedAt) {
			return out[a].CreatedAt.After(out[b].CreatedAt)
		}
		return out[a].ID > out[b].ID
	})
	return out, nil
}

// RunBatch implements ports.OperatorStore.
func (s *Store) RunBatch(_ context.Context, p *ports.RunBatchParams) ([]domain.JobID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	stored, ok := s.ops[p.Op.ID]
	if !ok {
		return nil, domain.ErrNotFound
	}
	if stored.Processed != p.PrevProcessed {
		return nil, ports.ErrOperationConflict
	}
	var changed []domain.JobID
	for _, it := range p.Items {
		j, ok := s.jobs[it.ID]
		if !ok || j.Expired(p.Now) {
			continue
		}
		switch p.Op.Kind {
		case domain.OpKindRetry:
			if !j.Retryable() {
				continue
			}
			s.retryLocked(j, &ports.RetryParams{ID: j.ID, Now: p.Now})
		case domain.OpKindCancel:
			if j.Status != domain.StatusQueued {
				continue
			}
			s.finishLocked(j, &ports.FinishParams{ID: j.ID, Status: domain.StatusFailed, Attempts: j.Attempts,
				Result: &domain.Result{Reason: domain.ReasonCanceled}, Now: p.Now, DeliverIn: it.DeliverIn, Retention: p.Retention})
		default:
			continue
		}
		changed = append(changed, j.ID)
	}
	saved := cloneOp(p.Op)
	saved.Changed += int64(len(changed))
	saved.Skipped += int64(len(p.Items) - len(changed))
	s.ops[p.Op.ID] = saved
	return changed, nil
}

// PauseLane implements ports.OperatorStore.
func (s *Store) PauseLane(_ context.Context, p domain.LanePause) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	s.pauses[p.Upstream] = p
	return nil
}

// ResumeLane implements ports.OperatorStore.
func (s *Store) ResumeLane(_ context.Context, upstream domain.UpstreamKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	delete(s.pauses, upstream)
	return nil
}

// LanePauses implements ports.OperatorStore.
func (s *Store) LanePauses(context.Context) ([]domain.LanePause, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make([]domain.LanePause, 0, len(s.pauses))
	for _, p := range s.pauses {
		out = append(out, p)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Upstream < out[b].Upstream })
	return out, nil
}
