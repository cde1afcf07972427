// Package memory is an in-memory JobStore. It keeps nothing across restarts
// and exists for tests of the application core and for embedding Aquifer where
// durability is not wanted. It passes the same contract suite as the durable
// backends.
package memory

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

type idemKey struct{ user, name string }

// Store is an in-memory JobStore, safe for concurrent use.
type Store struct {
	mu     sync.Mutex
	seq    int64
	jobs   map[domain.JobID]*domain.Job
	bySeq  map[int64]domain.JobID
	idem   map[idemKey]domain.JobID
	closed bool
	now    func() time.Time

	ops    map[string]*domain.Operation
	pauses map[domain.UpstreamKey]domain.LanePause
}

var (
	_ ports.JobStore      = (*Store)(nil)
	_ ports.OperatorStore = (*Store)(nil)
)

// New returns an empty store. now defaults to time.Now.
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{
		jobs:  make(map[domain.JobID]*domain.Job),
		bySeq: make(map[int64]domain.JobID),
		idem:  make(map[idemKey]domain.JobID),
		now:   now,

		ops:    make(map[string]*domain.Operation),
		pauses: make(map[domain.UpstreamKey]domain.LanePause),
	}
}

func keyOf(j *domain.Job) idemKey { return idemKey{j.UserID, j.IdempotentKey} }

func (s *Store) check() error {
	if s.closed {
		return domain.ErrClosed
	}
	return nil
}

// Insert implements ports.JobStore.
func (s *Store) Insert(_ context.Context, job *domain.Job) (*domain.Job, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, false, err
	}
	j, fresh := s.insertLocked(job)
	return j.Clone(), fresh, nil
}

func (s *Store) insertLocked(job *domain.Job) (*domain.Job, bool) {
	if id, ok := s.idem[keyOf(job)]; ok {
		existing := s.jobs[id]
		if !existing.Expired(job.CreatedAt) {
			return existing, false
		}
		s.deleteLocked(existing)
	}
	s.seq++
	j := job.Clone()
	j.Seq, j.ReadySeq = s.seq, s.seq
	if j.ReadyQueue == "" {
		j.ReadySeq = 0 // scheduled: PromoteDue makes it ready
	}
	s.jobs[j.ID] = j
	s.bySeq[j.Seq] = j.ID
	s.idem[keyOf(j)] = j.ID
	return j, true
}

func (s *Store) deleteLocked(j *domain.Job) {
	delete(s.jobs, j.ID)
	delete(s.bySeq, j.Seq)
	if s.idem[keyOf(j)] == j.ID {
		delete(s.idem, keyOf(j))
	}
}

// Get implements ports.JobStore.
func (s *Store) Get(_ context.Context, id domain.JobID) (*domain.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	j, ok := s.jobs[id]
	if !ok || j.Expired(s.now()) {
		return nil, domain.ErrNotFound
	}
	return j.Clone(), nil
}

// Lookup implements ports.JobStore.
func (s *Store) Lookup(_ context.Context, userID, idempotentKey string) (*domain.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	id, ok := s.idem[idemKey{userID, idempotentKey}]
	if !ok || s.jobs[id].Expired(s.now()) {
		return nil, domain.ErrNotFound
	}
	return s.jobs[id].Clone(), nil
}

// Position implements ports.JobStore.
func (s *Store) Position(_ context.Context, lane domain.QueueKey, readySeq int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return 0, err
	}
	n, now := 0, s.now()
	for _, j := range s.jobs {
		if j.ReadyQueue == lane && j.ReadySeq < readySeq && j.Status != domain.StatusInFlight && !j.Expired(now) {
			n++
		}
	}
	return n, nil
}

// Delete implements ports.JobStore.
func (s *Store) Delete(_ context.Context, id domain.JobID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	j, ok := s.jobs[id]
	if !ok {
		return domain.ErrNotFound
	}
	s.deleteLocked(j)
	return nil
}

// MarkInFlight implements ports.JobStore.
func (s *Store) MarkInFlight(_ context.Context, p *ports.MarkInFlightParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	if j, ok := s.jobs[p.ID]; ok && !j.Status.Terminal() {
		j.Status, j.DispatchedAt, j.UpdatedAt = domain.StatusInFlight, p.At, p.At
	}
	return nil
}

// Requeue implements ports.JobStore.
func (s *Store) Requeue(_ context.Context, p *ports.RequeueParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	j, ok := s.jobs[p.ID]
	if !ok || j.Phase() != p.Phase {
		return domain.ErrNotFound
	}
	switch p.Phase {
	case domain.PhaseDispatch:
		j.Status, j.Attempts, j.UpdatedAt, j.ExpiresAt = domain.StatusQueued, p.Attempts, p.Now, p.Now.Add(domain.QueuedTTL)
		j.Deferrals = p.Deferrals
		if p.History != nil {
			j.History = append([]domain.Attempt(nil), p.History...)
		}
	case domain.PhaseDeliver:
		j.Delivery.Attempts, j.Delivery.ResponseStatus, j.Delivery.Reason = p.Attempts, p.Response, p.Reason
		j.UpdatedAt, j.Deferrals = p.Now, p.Deferrals
	default:
		return domain.ErrNotFound
	}
	return nil
}

// Finish implements ports.JobStore.
func (s *Store) Finish(_ context.Context, p *ports.FinishParams) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return 0, err
	}
	j, ok := s.jobs[p.ID]
	if !ok {
		return 0, domain.ErrNotFound
	}
	if j.Status.Terminal() {
		return 0, nil
	}
	return s.finishLocked(j, p), nil
}

func (s *Store) finishLocked(j *domain.Job, p *ports.FinishParams) int64 {
	j.Status, j.Attempts, j.UpdatedAt, j.Deferrals = p.Status, p.Attempts, p.Now, 0
	r := domain.Result{}
	if p.Result != nil {
		r = *p.Result
		r.Body = append([]byte(nil), p.Result.Body...)
	}
	j.Result = &r
	if p.History != nil {
		j.History = append([]domain.Attempt(nil), p.History...)
	}
	ttl := domain.RetentionTTL(p.Status, p.Retention)
	if p.DeliverIn == "" {
		j.ReadyQueue, j.ExpiresAt = "", p.Now.Add(ttl)
		return 0
	}
	s.seq++
	j.ReadyQueue, j.ReadySeq = p.DeliverIn, s.seq
	j.Delivery = &domain.Delivery{Status: domain.DeliveryPending}
	j.ExpiresAt = p.Now.Add(max(ttl, domain.QueuedTTL))
	return s.seq
}

// FinishDelivery implements ports.JobStore.
func (s *Store) FinishDelivery(_ context.Context, p *ports.FinishDeliveryParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	j, ok := s.jobs[p.ID]
	if !ok || j.Phase() != domain.PhaseDeliver {
		return domain.ErrNotFound
	}
	status := domain.DeliveryDelivered
	if !p.Delivered {
		status = domain.DeliveryFailed
	}
	j.Delivery = &domain.Delivery{Status: status, Attempts: p.Attempts, ResponseStatus: p.Response, Reason: p.Reason}
	j.ReadyQueue, j.UpdatedAt, j.ExpiresAt = "", p.Now, p.Now.Add(domain.RetentionTTL(j.Status, p.Retention))
	return nil
}

// ListReady implements ports.JobStore.
func (s *Store) ListReady(_ context.Context, p *ports.ListReadyParams) ([]*domain.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	var out []*domain.Job
	for _, j := range s.jobs {
		if j.ReadyQueue == p.Queue && j.Priority == p.Priority && j.ReadySeq > p.AfterSeq && j.Status != domain.StatusInFlight && !j.Expired(p.Now) {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ReadySeq < out[b].ReadySeq })
	if len(out) > p.Limit {
		out = out[:p.Limit]
	}
	for i, j := range out {
		out[i] = j.Clone()
	}
	return out, nil
}

// ReadyQueues implements ports.JobStore.
func (s *Store) ReadyQueues(_ context.Context) ([]domain.QueueKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	seen := map[domain.QueueKey]bool{}
	var out []domain.QueueKey
	for _, j := range s.jobs {
		if j.ReadyQueue != "" && !seen[j.ReadyQueue] {
			seen[j.ReadyQueue] = true
			out = append(out, j.ReadyQueue)
		}
	}
	return out, nil
}

// RecoverInFlight implements ports.JobStore.
func (s *Store) RecoverInFlight(_ context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return 0, err
	}
	n := 0
	for _, j := range s.jobs {
		if j.Status == domain.StatusInFlight {
			j.Status = domain.StatusQueued
			n++
		}
	}
	return n, nil
}

// ResetStale implements ports.JobStore.
func (s *Store) ResetStale(_ context.Context, p *ports.ResetStaleParams) ([]*domain.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	var out []*domain.Job
	for _, j := range s.jobs {
		if j.Status == domain.StatusInFlight && j.DispatchedAt.Before(p.DispatchedBefore) && !p.Exclude[j.ID] {
			j.Status, j.UpdatedAt, j.ExpiresAt = domain.StatusQueued, p.Now, p.Now.Add(domain.QueuedTTL)
			out = append(out, j.Clone())
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ReadySeq < out[b].ReadySeq })
	return out, nil
}

// Purge implements ports.JobStore.
func (s *Store) Purge(_ context.Context, p *ports.PurgeParams) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return 0, err
	}
	n := 0
	for _, j := range s.jobs {
		if n >= p.Limit {
			break
		}
		if j.Expired(p.Now) {
			s.deleteLocked(j)
			n++
		}
	}
	return n, nil
}

// Counts implements ports.JobStore.
func (s *Store) Counts(_ context.Context) (ports.Counts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c ports.Counts
	if err := s.check(); err != nil {
		return c, err
	}
	now := s.now()
	for _, j := range s.jobs {
		if j.Expired(now) {
			continue
		}
		switch {
		case j.Status == domain.StatusQueued:
			c.Queued++
		case j.Status == domain.StatusInFlight:
			c.InFlight++
		case j.Phase() == domain.PhaseDeliver:
			c.Deliveries++
		}
	}
	return c, nil
}

// Ping implements ports.JobStore.
func (s *Store) Ping(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.check()
}

// SizeBytes implements ports.JobStore: an in-memory store has no size to report.
func (s *Store) SizeBytes(context.Context) (int64, error) { return -1, nil }

// Close implements ports.JobStore.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

var (
	_ ports.LedgerStore   = (*Store)(nil)
	_ ports.TenantCounter = (*Store)(nil)
)

// CountUnfinished implements ports.TenantCounter.
func (s *Store) CountUnfinished(_ context.Context, prefix string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return 0, err
	}
	now := s.now()
	var n int64
	for _, j := range s.jobs {
		if strings.HasPrefix(j.UserID, prefix) && !j.Status.Terminal() && !j.Expired(now) {
			n++
		}
	}
	return n, nil
}

// Ledger implements ports.LedgerStore.
func (s *Store) Ledger(_ context.Context, p *ports.LedgerParams) ([]ports.LedgerEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	var after int64
	if p.After != "" {
		var err error
		if after, err = strconv.ParseInt(p.After, 10, 64); err != nil {
			return nil, fmt.Errorf("bad ledger cursor %q", p.After)
		}
	}
	seqs := make([]int64, 0, len(s.bySeq))
	for seq := range s.bySeq {
		if seq > after {
			seqs = append(seqs, seq)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	var out []ports.LedgerEntry
	for _, seq := range seqs {
		if len(out) >= p.Limit {
			break
		}
		j := s.jobs[s.bySeq[seq]]
		if j.Expired(p.Now) {
			continue
		}
		out = append(out, ports.LedgerEntry{Cursor: strconv.FormatInt(j.Seq, 10), Seq: j.Seq, ID: j.ID, UserID: j.UserID, IdempotentKey: j.IdempotentKey, Status: j.Status})
	}
	return out, nil
}

// DeleteFinished implements ports.LedgerStore.
func (s *Store) DeleteFinished(_ context.Context, throughSeq int64, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return 0, err
	}
	n := 0
	for seq, id := range s.bySeq {
		if n >= limit {
			break
		}
		j := s.jobs[id]
		if seq <= throughSeq && j.Status.Terminal() && j.ReadyQueue == "" {
			s.deleteLocked(j)
			n++
		}
	}
	return n, nil
}

// InsertBatch implements ports.ScheduleStore.
func (s *Store) InsertBatch(_ context.Context, jobs []*domain.Job) ([]ports.InsertOutcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make([]ports.InsertOutcome, len(jobs))
	for i, job := range jobs {
		j, fresh := s.insertLocked(job)
		out[i] = ports.InsertOutcome{Job: j.Clone(), Fresh: fresh}
	}
	return out, nil
}

// PromoteDue implements ports.ScheduleStore.
func (s *Store) PromoteDue(_ context.Context, p *ports.PromoteParams) ([]*domain.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	var due []*domain.Job
	for _, j := range s.jobs {
		if j.Scheduled() && !j.NotBefore.After(p.Now) {
			due = append(due, j)
		}
	}
	sort.Slice(due, func(a, b int) bool {
		if !due[a].NotBefore.Equal(due[b].NotBefore) {
			return due[a].NotBefore.Before(due[b].NotBefore)
		}
		return due[a].Seq < due[b].Seq
	})
	if len(due) > p.Limit {
		due = due[:p.Limit]
	}
	out := make([]*domain.Job, len(due))
	for i, j := range due {
		s.seq++
		j.ReadyQueue, j.ReadySeq = j.Queue, s.seq
		out[i] = j.Clone()
	}
	return out, nil
}

// NextDue implements ports.ScheduleStore.
func (s *Store) NextDue(context.Context) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return time.Time{}, err
	}
	var next time.Time
	for _, j := range s.jobs {
		if j.Scheduled() && (next.IsZero() || j.NotBefore.Before(next)) {
			next = j.NotBefore
		}
	}
	return next, nil
}

// Overdue implements ports.ScheduleStore.
func (s *Store) Overdue(_ context.Context, p *ports.OverdueParams) ([]*domain.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	var out []*domain.Job
	for _, j := range s.jobs {
		if j.Status == domain.StatusQueued && !j.Deadline.IsZero() && !j.Deadline.After(p.Now) && !j.Expired(p.Now) {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].Deadline.Equal(out[b].Deadline) {
			return out[a].Deadline.Before(out[b].Deadline)
		}
		return out[a].Seq < out[b].Seq
	})
	if len(out) > p.Limit {
		out = out[:p.Limit]
	}
	for i, j := range out {
		out[i] = j.Clone()
	}
	return out, nil
}
