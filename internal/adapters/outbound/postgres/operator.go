package postgres

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

var _ ports.OperatorStore = (*Store)(nil)

// listStatuses are the statuses a listing reads, one index range each, in a
// fixed order; a filter's statuses are matched against these (a status not
// among them matches no job).
var listStatuses = []domain.Status{domain.StatusQueued, domain.StatusInFlight, domain.StatusCompleted, domain.StatusFailed}

// terminal is the SQL condition that a job has a result (domain.Job.Result
// is set for terminal jobs only).
const terminal = `status IN ('completed', 'failed')`

// sqlArgs collects the parameters of a statement built from a filter.
type sqlArgs []any

// add appends v and returns its placeholder.
func (a *sqlArgs) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// filterConds returns the SQL conditions that select the unexpired jobs
// matching every filter of f but its statuses, exactly as
// domain.JobFilter.MatchesIgnoringStatus does, adding their parameters to
// args. The tenant, user and destination equalities are on the columns the
// listing indexes lead with, so the planner can start from the narrowest.
func filterConds(f *domain.JobFilter, now time.Time, args *sqlArgs) []string {
	conds := []string{"expires_at > " + args.add(storekit.Millis(now))}
	if f.Tenant != "" {
		// A tenant without the scope separator is exactly the tenant column
		// of the user ids it prefixes; one with it (never a real tenant) is
		// matched as the prefix it is.
		prefix := domain.Scope(f.Tenant, "")
		if t, _ := domain.Unscope(prefix); t == f.Tenant {
			// tenant <> '' lets a generic plan use the partial index.
			conds = append(conds, "tenant = "+args.add(f.Tenant), "tenant <> ''")
		} else {
			conds = append(conds, "starts_with(user_id, "+args.add(prefix)+")")
		}
	}
	if f.UserID != "" {
		conds = append(conds, "user_id = "+args.add(f.UserID))
	}
	if f.Destination != "" {
		conds = append(conds, "upstream = "+args.add(string(f.Destination)))
	}
	if f.PoolID != "" {
		conds = append(conds, "pool_id = "+args.add(f.PoolID))
	}
	after, before := storekit.CreatedBounds(f)
	if !f.CreatedAfter.IsZero() {
		conds = append(conds, "created_at > "+args.add(after))
	}
	if !f.CreatedBefore.IsZero() {
		conds = append(conds, "created_at < "+args.add(before))
	}
	if f.ResponseStatus != 0 {
		conds = append(conds, "response_status = "+args.add(f.ResponseStatus))
	}
	if f.Q != "" {
		// Bytes against bytes, ASCII letters lowered on both sides (lower
		// under the C collation lowers ASCII only): domain.ContainsFold,
		// for any q, even one that is not valid text.
		q := args.add(storekit.FoldQ(f.Q))
		conds = append(conds, `(position(`+q+` in convert_to(lower(url_path), 'UTF8')) > 0 OR (`+terminal+
			` AND position(`+q+` in convert_to(lower(reason COLLATE "C"), 'UTF8')) > 0))`)
	}
	return conds
}

// statusesToList returns the statuses of listStatuses that f lets through:
// those it names (all when it names none), and only terminal ones when it
// filters by response status.
func statusesToList(f *domain.JobFilter) []domain.Status {
	var out []domain.Status
	for _, st := range listStatuses {
		if f.HasStatus(st) && (f.ResponseStatus == 0 || st.Terminal()) {
			out = append(out, st)
		}
	}
	return out
}

// listQuery builds ListJobs' statement: per status, the newest matching
// jobs below the cursor (one index range, read backwards, stopping at the
// limit), merged newest first. The status is a literal of each branch, so
// every branch, in a generic plan too, is a range of one index.
func listQuery(p *ports.ListJobsParams) (string, []any) {
	statuses := statusesToList(&p.Filter)
	if len(statuses) == 0 {
		return "", nil
	}
	var args sqlArgs
	conds := filterConds(&p.Filter, p.Now, &args)
	before := p.BeforeSeq
	if before <= 0 {
		before = math.MaxInt64
	}
	conds = append(conds, "seq < "+args.add(before))
	limit := args.add(max(p.Limit, 1))
	where := strings.Join(conds, " AND ")
	branches := make([]string, len(statuses))
	for i, st := range statuses {
		branches[i] = "SELECT " + jobColumns + " FROM jobs WHERE status = '" + string(st) + "' AND " + where +
			" ORDER BY seq DESC LIMIT " + limit
	}
	if len(branches) == 1 {
		return branches[0], args
	}
	return "SELECT " + jobColumns + " FROM ((" + strings.Join(branches, ") UNION ALL (") + ")) AS b ORDER BY seq DESC LIMIT " + limit, args
}

// countQuery builds CountJobs' statement: the matching jobs per status.
// With a destination, user or tenant it reads the filter's listing index,
// whose entries hold everything the common filters need (an index-only
// scan); those indexes leave out in-flight jobs, which are counted apart,
// among the few in flight.
func countQuery(p *ports.CountJobsParams) (string, []any) {
	var args sqlArgs
	f := &p.Filter
	where := strings.Join(filterConds(f, p.Now, &args), " AND ")
	switch {
	case f.ResponseStatus != 0: // only jobs with a result have a response status
		return "SELECT status, count(*) FROM jobs WHERE " + terminal + " AND " + where + " GROUP BY status", args
	case f.Tenant == "" && f.UserID == "" && f.Destination == "":
		return "SELECT status, count(*) FROM jobs WHERE " + where + " GROUP BY status", args
	}
	return "SELECT status, count(*) FROM jobs WHERE status <> 'in_flight' AND " + where + " GROUP BY status" +
		" UNION ALL SELECT 'in_flight', count(*) FROM jobs WHERE status = 'in_flight' AND " + where + " HAVING count(*) > 0", args
}

// scan runs fn, a read of jobs by filter (ListJobs, CountJobs), as one of
// at most Options.MaxConns/4 at a time: slow ones (a q filter, counts over
// a large table) never hold every connection of the pool, so the writer
// and the dispatcher's reads always find one.
func (s *Store) scan(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	return s.read(ctx, what, func(ctx context.Context) error {
		select {
		case s.reads <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-s.reads }()
		return fn(ctx)
	})
}

// read runs fn, an operator's read, bounded by Options.Timeout.
func (s *Store) read(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	if s.isClosed() {
		return domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	if err := fn(ctx); err != nil {
		var de *domain.Error
		if errors.As(err, &de) {
			return err
		}
		return unavailable(what, err)
	}
	return nil
}

// ListJobs implements ports.OperatorStore. Plans: doc.go.
func (s *Store) ListJobs(ctx context.Context, p *ports.ListJobsParams) ([]*domain.Job, error) {
	sql, args := listQuery(p)
	if sql == "" {
		return nil, nil
	}
	var jobs []*domain.Job
	err := s.scan(ctx, "list jobs", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, sql, args...)
		if err == nil {
			jobs, err = collect(rows)
		}
		return err
	})
	return jobs, err
}

// CountJobs implements ports.OperatorStore. Plans: doc.go.
func (s *Store) CountJobs(ctx context.Context, p *ports.CountJobsParams) (map[domain.Status]int64, error) {
	sql, args := countQuery(p)
	out := map[domain.Status]int64{}
	err := s.scan(ctx, "count jobs", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		var st string
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
			out[domain.Status(st)] = n
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

const opColumns = `id, kind, state, filter, cursor, total, processed, changed, skipped, error, created_at, updated_at`

func scanOperation(row storekit.Scanner) (*domain.Operation, error) {
	var op domain.Operation
	var kind, state, filter string
	var created, updated int64
	if err := row.Scan(&op.ID, &kind, &state, &filter, &op.Cursor, &op.Total, &op.Processed, &op.Changed,
		&op.Skipped, &op.Error, &created, &updated); err != nil {
		return nil, err
	}
	f, err := storekit.DecodeFilter(filter)
	if err != nil {
		return nil, err
	}
	op.Kind, op.State, op.Filter = domain.OperationKind(kind), domain.OperationState(state), f
	op.CreatedAt, op.UpdatedAt = storekit.FromMillis(created), storekit.FromMillis(updated)
	return &op, nil
}

// GetOperation implements ports.OperatorStore.
func (s *Store) GetOperation(ctx context.Context, id string) (*domain.Operation, error) {
	var op *domain.Operation
	err := s.read(ctx, "get operation", func(ctx context.Context) error {
		var err error
		op, err = scanOperation(s.pool.QueryRow(ctx, "SELECT "+opColumns+" FROM aquifer_operations WHERE id = $1", id))
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.ErrNotFound
		}
		return err
	})
	return op, err
}

// Operations implements ports.OperatorStore.
func (s *Store) Operations(ctx context.Context, running bool) ([]*domain.Operation, error) {
	sql := "SELECT " + opColumns + " FROM aquifer_operations ORDER BY created_at DESC, id DESC"
	if running {
		sql = "SELECT " + opColumns + " FROM aquifer_operations WHERE state = 'running' ORDER BY created_at DESC, id DESC"
	}
	var ops []*domain.Operation
	err := s.read(ctx, "list operations", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, sql)
		if err != nil {
			return err
		}
		ops, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (*domain.Operation, error) { return scanOperation(r) })
		return err
	})
	return ops, err
}

// LanePauses implements ports.OperatorStore: every process's view, since
// the pauses live in one shared table.
func (s *Store) LanePauses(ctx context.Context) ([]domain.LanePause, error) {
	var out []domain.LanePause
	err := s.read(ctx, "list lane pauses", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, "SELECT upstream, at, reason FROM aquifer_lane_pauses ORDER BY upstream")
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.LanePause, error) {
			var p domain.LanePause
			var up string
			var at int64
			err := r.Scan(&up, &at, &p.Reason)
			p.Upstream, p.At = domain.UpstreamKey(up), storekit.FromMillis(at)
			return p, err
		})
		return err
	})
	if out == nil && err == nil {
		out = []domain.LanePause{}
	}
	return out, err
}
