package app

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/app/ops"
	tenantpkg "github.com/aquiferhq/aquifer/internal/app/tenant"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// What operators do: find jobs (ListJobs), replay them (Retry, and in bulk
// StartOperation), and read the operations' progress. Lanes are in
// lanes.go.

// MaxListLimit is the largest page ListJobs returns.
const MaxListLimit = 500

// DefaultListLimit is the page size when the caller names none.
const DefaultListLimit = 50

// JobQuery selects jobs as a caller names them: user and pool ids as the
// caller's tenant knows them, a destination as a URL. The zero query selects
// every job the caller may see.
type JobQuery struct {
	Statuses []domain.Status
	// Tenant limits an operator's query to one tenant's jobs; a tenant's
	// key may only name itself.
	Tenant string
	UserID string
	PoolID string
	// Destination is scheme://host[:port] (a path is ignored): the jobs
	// sent there.
	Destination    string
	CreatedAfter   time.Time
	CreatedBefore  time.Time
	ResponseStatus int
	Q              string
	// Cursor is a page's NextCursor: the page after it. Limit is the page
	// size (default DefaultListLimit, at most MaxListLimit).
	Cursor string
	Limit  int
}

// JobPage is one page of a listing.
type JobPage struct {
	Jobs []*domain.Job
	// NextCursor fetches the next page; "" on the last.
	NextCursor string
	// Counts is, for the first page (no cursor), how many jobs match the
	// query's other filters in each status — whatever Statuses says, so a
	// view can show every tab's count. Nil on later pages: counting a large
	// store is not free, and it does not change while paging. Counts of the
	// same filter are reused for a second.
	Counts map[domain.Status]int64
}

// ErrNoOperatorStore answers operator calls on a store that does not
// implement ports.OperatorStore.
var ErrNoOperatorStore = &domain.Error{Code: domain.CodeUnavailable,
	Message: "this store does not support listing, retrying or pausing (it does not implement ports.OperatorStore)"}

func (s *Service) operatorStore() (ports.OperatorStore, error) {
	if s.opStore == nil {
		return nil, ErrNoOperatorStore
	}
	return s.opStore, nil
}

// filter turns q into the store's filter for the caller in ctx, checking
// every field.
func (s *Service) filter(ctx context.Context, q *JobQuery) (domain.JobFilter, error) {
	f := domain.JobFilter{CreatedAfter: q.CreatedAfter, CreatedBefore: q.CreatedBefore, ResponseStatus: q.ResponseStatus}
	for _, st := range q.Statuses {
		if !st.Valid() {
			return f, domain.Invalid("status", "status %q is not one of queued, in_flight, completed, failed", st)
		}
		if !f.HasStatus(st) || len(f.Statuses) == 0 {
			f.Statuses = append(f.Statuses, st)
		}
	}
	scope := tenantpkg.Scoped(ctx)
	switch {
	case scope != "" && q.Tenant != "" && q.Tenant != scope:
		return f, &domain.Error{Code: domain.CodeForbidden, Field: "tenant", Message: "only an admin key may list another tenant's jobs"}
	case scope != "":
		f.Tenant = scope
	default:
		f.Tenant = q.Tenant
	}
	if q.UserID != "" {
		f.UserID = domain.Scope(f.Tenant, q.UserID)
	}
	if q.PoolID != "" {
		f.PoolID = domain.Scope(f.Tenant, q.PoolID)
	}
	if q.Destination != "" {
		u, err := destination(q.Destination)
		if err != nil {
			return f, err
		}
		f.Destination = u
	}
	if q.ResponseStatus != 0 && (q.ResponseStatus < 100 || q.ResponseStatus > 599) {
		return f, domain.Invalid("response_status", "response_status must be an HTTP status, 100–599")
	}
	if !q.CreatedAfter.IsZero() && !q.CreatedBefore.IsZero() && !q.CreatedAfter.Before(q.CreatedBefore) {
		return f, domain.Invalid("created_after", "created_after must be before created_before")
	}
	if len(q.Q) > 200 {
		return f, domain.Invalid("q", "q must be at most 200 characters")
	}
	f.Q = q.Q
	return f, nil
}

// destination parses a destination as an operator names it:
// scheme://host[:port] (the default port filled in; a path is ignored).
func destination(raw string) (domain.UpstreamKey, error) {
	u, ok := domain.UpstreamOf(raw)
	if !ok || !strings.Contains(raw, "://") {
		return "", domain.Invalid("destination", "destination must be scheme://host[:port], e.g. https://api.example.com")
	}
	return u, nil
}

func encodeCursor(seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("s" + strconv.FormatInt(seq, 10)))
}

func decodeCursor(c string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil && len(b) > 1 && b[0] == 's' {
		if n, err := strconv.ParseInt(string(b[1:]), 10, 64); err == nil && n > 0 {
			return n, nil
		}
	}
	return 0, domain.Invalid("cursor", "cursor is not one this server returned (use next_cursor as given)")
}

// ListJobs returns a page of the jobs q selects that the caller may see,
// newest first.
func (s *Service) ListJobs(ctx context.Context, q *JobQuery) (*JobPage, error) {
	st, err := s.operatorStore()
	if err != nil {
		return nil, err
	}
	f, err := s.filter(ctx, q)
	if err != nil {
		return nil, err
	}
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultListLimit
	case limit < 0 || limit > MaxListLimit:
		return nil, domain.Invalid("limit", "limit must be 1–%d", MaxListLimit)
	}
	var before int64
	if q.Cursor != "" {
		if before, err = decodeCursor(q.Cursor); err != nil {
			return nil, err
		}
	}
	now := s.cfg.Clock.Now()
	jobs, err := st.ListJobs(ctx, &ports.ListJobsParams{Filter: f, BeforeSeq: before, Limit: limit + 1, Now: now})
	if err != nil {
		return nil, domain.StoreFailure("list jobs", err)
	}
	page := &JobPage{}
	if len(jobs) > limit {
		jobs = jobs[:limit]
		page.NextCursor = encodeCursor(jobs[limit-1].Seq)
	}
	for i, j := range jobs {
		jobs[i] = s.present(ctx, j)
	}
	page.Jobs = jobs
	if q.Cursor == "" {
		if page.Counts, err = s.counts.get(ctx, st, f, now); err != nil {
			return nil, domain.StoreFailure("count jobs", err)
		}
		s.countRunning(page.Counts, f)
	}
	return page, nil
}

// countCache keeps the counts of recent listings' filters for a second:
// a dashboard or a script polling the same first page must not make the
// store count a large table on every poll. Counts may be that much old;
// the jobs listed never are.
type countCache struct {
	mu      sync.Mutex
	entries map[string]countEntry
}

type countEntry struct {
	at     time.Time
	counts map[domain.Status]int64
}

const (
	countTTL        = time.Second
	countCacheLimit = 256
)

func (c *countCache) get(ctx context.Context, st ports.OperatorStore, f domain.JobFilter, now time.Time) (map[domain.Status]int64, error) {
	f.Statuses = nil // counts cover every status
	key := fmt.Sprintf("%q|%q|%q|%q|%d|%d|%d|%q", f.Tenant, f.UserID, f.Destination, f.PoolID,
		f.CreatedAfter.UnixMilli(), f.CreatedBefore.UnixMilli(), f.ResponseStatus, f.Q)
	c.mu.Lock()
	if e, ok := c.entries[key]; ok && now.Sub(e.at) < countTTL && !now.Before(e.at) {
		c.mu.Unlock()
		return maps.Clone(e.counts), nil
	}
	c.mu.Unlock()
	counts, err := st.CountJobs(ctx, &ports.CountJobsParams{Filter: f, Now: now})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= countCacheLimit {
		c.entries = make(map[string]countEntry) // simplest bound: start over
	}
	c.entries[key] = countEntry{at: now, counts: maps.Clone(counts)}
	return counts, nil
}

// present shows a stored job as the caller sees it: in flight when this
// process runs it, under the tenant's own names for a tenant's key.
func (s *Service) present(ctx context.Context, j *domain.Job) *domain.Job {
	if j.Status == domain.StatusQueued && s.d.Executing(j.ID) {
		j.Status = domain.StatusInFlight // quick attempts are in flight only in memory
	}
	if tenantpkg.Scoped(ctx) != "" {
		j = j.Display()
	}
	return j
}

// countRunning moves the jobs this process is running, which the store
// still counts as queued (quick attempts are in flight only in memory),
// to in_flight — for an unfiltered count, where every running job matches.
func (s *Service) countRunning(c map[domain.Status]int64, f domain.JobFilter) {
	if f.MatchesIgnoringStatus(&domain.Job{}) && f.Tenant == "" { // no filter but statuses
		running := min(int64(s.d.ExecutingCount()), c[domain.StatusQueued])
		c[domain.StatusQueued] -= running
		c[domain.StatusInFlight] += running
	}
}

// Retry re-queues a finished job — failed, or completed — as a new attempt
// cycle with its original request. It keeps its id and its attempt history
// and delivers a new webhook when it ends. A job still queued or running,
// or whose webhook is still being delivered, is a conflict.
func (s *Service) Retry(ctx context.Context, id domain.JobID) (*domain.Job, error) {
	st, err := s.operatorStore()
	if err != nil {
		return nil, err
	}
	j, err := s.Get(ctx, id) // visibility
	if err != nil {
		return nil, err
	}
	if !j.Retryable() {
		return nil, domain.ErrNotFinished
	}
	stored, err := st.Retry(ctx, &ports.RetryParams{ID: j.ID, Seq: j.Seq, Now: s.cfg.Clock.Now()})
	if err != nil {
		if errors.Is(err, domain.ErrNotFound) || errors.Is(err, domain.ErrNotFinished) {
			return nil, err
		}
		return nil, domain.StoreFailure("retry job", err)
	}
	s.retried(stored.Clone()) // the lane owns its copy from now on
	s.log.Info("job retried by an operator", zap.String("job_id", string(id)))
	return s.present(ctx, stored), nil
}

// retried tells the rest of the core that j is queued again.
func (s *Service) retried(j *domain.Job) {
	if t := domain.TenantOfJob(j); t != "" {
		s.tenants.Accepted(t)
	}
	s.d.Retried(j)
}

// OperationKinds an operator can start.
var operationStatuses = map[domain.OperationKind][]domain.Status{
	domain.OpKindRetry:  {domain.StatusCompleted, domain.StatusFailed},
	domain.OpKindCancel: {domain.StatusQueued},
}

// OperationResult answers StartOperation: the count a dry run found, or
// the operation started.
type OperationResult struct {
	DryRun    bool
	Count     int64
	Operation *domain.Operation // nil for a dry run
}

// StartOperation retries or cancels every job q selects (q's cursor and
// limit do not apply). A dry run only counts them. A real run is stored
// and runs in batches in the background: GetOperation reports its
// progress, and it resumes after a restart. It acts on the jobs that exist
// when it starts. A retry takes finished jobs (completed, failed) and a
// cancel jobs still queued; q's statuses narrow that further.
func (s *Service) StartOperation(ctx context.Context, kind domain.OperationKind, q *JobQuery, dryRun bool) (*OperationResult, error) {
	st, err := s.operatorStore()
	if err != nil {
		return nil, err
	}
	allowed, ok := operationStatuses[kind]
	if !ok {
		return nil, domain.Invalid("kind", "operation must be retry or cancel")
	}
	f, err := s.filter(ctx, q)
	if err != nil {
		return nil, err
	}
	var statuses []domain.Status
	for _, a := range allowed {
		if f.HasStatus(a) {
			statuses = append(statuses, a)
		}
	}
	if len(statuses) == 0 {
		return nil, domain.Invalid("status", "a %s acts on %s jobs only", kind, joinStatuses(allowed))
	}
	f.Statuses = statuses
	now := s.cfg.Clock.Now()
	counts, err := st.CountJobs(ctx, &ports.CountJobsParams{Filter: f, Now: now})
	if err != nil {
		return nil, domain.StoreFailure("count jobs", err)
	}
	var total int64
	for _, a := range statuses {
		total += counts[a]
	}
	if dryRun {
		return &OperationResult{DryRun: true, Count: total}, nil
	}
	newest, err := st.ListJobs(ctx, &ports.ListJobsParams{Limit: 1, Now: now})
	if err != nil {
		return nil, domain.StoreFailure("list jobs", err)
	}
	var newestSeq int64
	if len(newest) > 0 {
		newestSeq = newest[0].Seq
	}
	op, err := s.ops.Begin(ctx, "op_"+string(s.ids.New()), kind, f, newestSeq, total)
	if err != nil {
		return nil, err
	}
	s.log.Info("bulk operation started", zap.String("operation", op.ID), zap.String("kind", string(kind)), zap.Int64("jobs", total))
	return &OperationResult{Count: total, Operation: op}, nil
}

func joinStatuses(ss []domain.Status) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, " and ")
}

// ErrOperationNotFound answers GetOperation for an unknown operation (or
// another tenant's).
var ErrOperationNotFound = &domain.Error{Code: domain.CodeNotFound, Message: "operation not found"}

// GetOperation returns a bulk operation the caller started (an operator
// sees every one).
func (s *Service) GetOperation(ctx context.Context, id string) (*domain.Operation, error) {
	st, err := s.operatorStore()
	if err != nil {
		return nil, err
	}
	op, err := st.GetOperation(ctx, id)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return nil, ErrOperationNotFound
	case err != nil:
		return nil, domain.StoreFailure("read operation", err)
	}
	if scope := tenantpkg.Scoped(ctx); scope != "" && op.Filter.Tenant != scope {
		return nil, ErrOperationNotFound
	}
	return op, nil
}

// Operations lists the bulk operations the caller may see, newest first.
func (s *Service) Operations(ctx context.Context) ([]*domain.Operation, error) {
	st, err := s.operatorStore()
	if err != nil {
		return nil, err
	}
	all, err := st.Operations(ctx, false)
	if err != nil {
		return nil, domain.StoreFailure("list operations", err)
	}
	scope := tenantpkg.Scoped(ctx)
	out := all[:0]
	for _, op := range all {
		if scope == "" || op.Filter.Tenant == scope {
			out = append(out, op)
		}
	}
	return out, nil
}

// opHooks connects bulk operations to the dispatcher.
type opHooks struct{ s *Service }

var _ ops.Hooks = opHooks{}

// Claim implements ops.Hooks: a cancel claims each job against dispatch
// (ClaimCancel), leaving out the ones running now and those another
// process dispatches; a retry takes every job.
func (h opHooks) Claim(op *domain.Operation, page []*domain.Job) []ports.BatchItem {
	items := make([]ports.BatchItem, 0, len(page))
	for _, j := range page {
		it := ports.BatchItem{ID: j.ID, Seq: j.Seq}
		if op.Kind == domain.OpKindCancel {
			if j.Status != domain.StatusQueued || h.s.d.HeldElsewhere(j.Queue.Upstream()) != "" {
				continue
			}
			if h.s.d.ClaimCancel(j.ID) != nil {
				continue // being sent right now
			}
			it.DeliverIn = deliveryQueue(j)
		}
		items = append(items, it)
	}
	return items
}

func deliveryQueue(j *domain.Job) domain.QueueKey {
	if j.WebhookURL == "" {
		return ""
	}
	if u, ok := domain.UpstreamOf(j.WebhookURL); ok {
		return domain.SharedQueue(u)
	}
	return ""
}

// Applied implements ops.Hooks: the jobs a batch changed are announced to
// their lanes (re-read from the store), cancelled ones dropped from memory
// and their subscribers told; claims on jobs the batch left alone are
// released.
func (h opHooks) Applied(op *domain.Operation, page []*domain.Job, items []ports.BatchItem, changed []domain.JobID, committed bool) {
	done := make(map[domain.JobID]bool, len(changed))
	for _, id := range changed {
		done[id] = true
	}
	if op.Kind == domain.OpKindCancel {
		for _, it := range items {
			if !done[it.ID] {
				h.s.d.ReleaseCancel(it.ID)
			}
		}
	}
	if !committed {
		return
	}
	queues := map[domain.QueueKey]bool{}
	for _, j := range page {
		if !done[j.ID] {
			continue
		}
		switch op.Kind {
		case domain.OpKindRetry:
			if t := domain.TenantOfJob(j); t != "" {
				h.s.tenants.Accepted(t)
			}
			h.s.d.RetriedInBulk(j.ID, j.ReadySeq)
			queues[j.Queue] = true
		case domain.OpKindCancel:
			h.s.d.CanceledInBulk(j)
			if q := deliveryQueue(j); q != "" {
				queues[q] = true
			}
		}
	}
	for q := range queues {
		h.s.d.Reread(q)
	}
}
