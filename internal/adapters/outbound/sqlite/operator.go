package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

var _ ports.OperatorStore = (*Store)(nil)

// where is a conjunction of SQL conditions and their arguments, in order.
type where struct {
	conds []string
	args  []any
	// indexed: a condition picks one of the filter indexes (user_id,
	// upstream, tenant). rowsOnly: some condition reads columns no index
	// has (pool_id, created_at, the result, the path).
	indexed, rowsOnly bool
}

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

func (w *where) String() string { return strings.Join(w.conds, " AND ") }

// filterWhere is the SQL of f but its Statuses, for jobs live at now: the
// exact rule of domain.JobFilter.MatchesIgnoringStatus and
// domain.Job.Expired. The conditions that pick an index (user_id,
// upstream, tenant) are plain equalities; doc.go has the plans.
func filterWhere(f *domain.JobFilter, nowMillis int64) *where {
	w := &where{}
	w.add("(expires_at = 0 OR expires_at > ?)", nowMillis)
	if f.Tenant != "" {
		addTenant(w, f)
	}
	if f.UserID != "" {
		w.add("user_id = ?", f.UserID)
		w.indexed = true
	}
	if f.Destination != "" {
		w.add("upstream = ?", string(f.Destination))
		w.indexed = true
	}
	w.rowsOnly = f.PoolID != "" || !f.CreatedAfter.IsZero() || !f.CreatedBefore.IsZero() || f.ResponseStatus != 0 || f.Q != ""
	if f.PoolID != "" {
		w.add("pool_id = ?", f.PoolID)
	}
	if !f.CreatedAfter.IsZero() {
		w.add("created_at > ?", storekit.Millis(f.CreatedAfter))
	}
	if !f.CreatedBefore.IsZero() {
		w.add("created_at < ?", storekit.Millis(f.CreatedBefore))
	}
	// A job has a result only once it is terminal (storekit.Row.Job), so
	// the result's columns count only then. The unary plus keeps SQLite
	// from reading these two statuses through jobs_status, which would
	// visit every finished job and sort them.
	if f.ResponseStatus != 0 {
		w.add("+status IN ('completed', 'failed') AND response_status = ?", f.ResponseStatus)
	}
	if f.Q != "" {
		// SQLite's lower() folds ASCII letters only, as domain.ContainsFold
		// does; instr has no wildcards to escape.
		q := asciiLower(f.Q)
		w.add("(instr(lower(url_path), ?) > 0 OR (+status IN ('completed', 'failed') AND instr(lower(reason), ?) > 0))", q, q)
	}
	return w
}

// addTenant adds the tenant filter: jobs whose user_id is scoped to
// f.Tenant.
func addTenant(w *where, f *domain.JobFilter) {
	prefix := domain.Scope(f.Tenant, "") // "<tenant><separator>"
	switch {
	case f.UserID != "":
		// The user_id filter decides it, and jobs_user is the narrower
		// index to list by.
		if !strings.HasPrefix(f.UserID, prefix) {
			w.add("0")
		}
	case strings.Contains(f.Tenant, prefix[len(f.Tenant):]):
		// A tenant name holding the separator is no tenant column's
		// value, but it can still prefix a user_id.
		w.add("user_id >= ? AND user_id < ?", prefix, prefixEnd(prefix))
	default:
		// The literal "tenant != ''" lets SQLite use the partial index.
		w.add("tenant = ? AND tenant != ''", f.Tenant)
		w.indexed = true
	}
}

// asciiLower lower-cases the ASCII letters of s, and nothing else.
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// listStatuses returns the distinct statuses a listing filters on, in a
// fixed order; none when the filter names none, or all four.
func listStatuses(f *domain.JobFilter) []domain.Status {
	var out []domain.Status
	for _, st := range []domain.Status{domain.StatusQueued, domain.StatusInFlight, domain.StatusCompleted, domain.StatusFailed} {
		if slices.Contains(f.Statuses, st) {
			out = append(out, st)
		}
	}
	if len(out) == 4 {
		return nil
	}
	for _, st := range f.Statuses {
		if !st.Valid() && !slices.Contains(out, st) {
			out = append(out, st) // matches nothing, as Matches says
		}
	}
	return out
}

// listQuery is the SQL of one ListJobs page. With one status (or none) it
// is one index range read newest first. With several it is one such range
// per status, merged by seq (SQLite's MERGE (UNION ALL)), so that no
// listing sorts the jobs it matches: each arm stops as soon as the page is
// full.
func listQuery(p *ports.ListJobsParams) (string, []any) {
	base := filterWhere(&p.Filter, storekit.Millis(p.Now))
	if p.BeforeSeq > 0 {
		base.add("seq < ?", p.BeforeSeq)
	}
	limit := max(p.Limit, 1)
	statuses := listStatuses(&p.Filter)
	if len(statuses) == 0 {
		return "SELECT " + jobColumns + " FROM jobs WHERE " + base.String() + " ORDER BY seq DESC LIMIT ?", append(base.args, limit)
	}
	var arms []string
	var args []any
	for _, st := range statuses {
		arms = append(arms, "SELECT "+jobColumns+" FROM jobs WHERE status = ? AND "+base.String())
		args = append(append(args, string(st)), base.args...)
	}
	return strings.Join(arms, " UNION ALL ") + " ORDER BY seq DESC LIMIT ?", append(args, limit)
}

// ListJobs implements ports.OperatorStore, on a read connection.
func (s *Store) ListJobs(ctx context.Context, p *ports.ListJobsParams) ([]*domain.Job, error) {
	q, args := listQuery(p)
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return collect(rows)
}

// countQuery is the SQL of CountJobs: the filter but its statuses, grouped
// by status.
func countQuery(p *ports.CountJobsParams) (string, []any) {
	w := filterWhere(&p.Filter, storekit.Millis(p.Now))
	from := "jobs"
	if w.rowsOnly && !w.indexed {
		// Left to itself SQLite walks jobs_status for the grouping and
		// looks every row up from it; reading the table in order is
		// cheaper.
		from = "jobs NOT INDEXED"
	}
	return "SELECT status, count(*) FROM " + from + " WHERE " + w.String() + " GROUP BY status", w.args
}

// CountJobs implements ports.OperatorStore, on a read connection.
func (s *Store) CountJobs(ctx context.Context, p *ports.CountJobsParams) (map[domain.Status]int64, error) {
	q, args := countQuery(p)
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	defer rows.Close()
	out := map[domain.Status]int64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("count jobs: %w", err)
		}
		out[domain.Status(st)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	return out, nil
}

const operationColumns = `id, kind, state, filter, cursor_seq, total, processed, changed, skipped, error, created_at, updated_at`

func scanOperation(row storekit.Scanner) (*domain.Operation, error) {
	var op domain.Operation
	var kind, state, filter string
	var created, updated int64
	if err := row.Scan(&op.ID, &kind, &state, &filter, &op.Cursor, &op.Total, &op.Processed, &op.Changed, &op.Skipped,
		&op.Error, &created, &updated); err != nil {
		return nil, err
	}
	f, err := storekit.DecodeFilter(filter)
	if err != nil {
		return nil, fmt.Errorf("operation %s: %w", op.ID, err)
	}
	op.Kind, op.State, op.Filter = domain.OperationKind(kind), domain.OperationState(state), f
	op.CreatedAt, op.UpdatedAt = storekit.FromMillis(created), storekit.FromMillis(updated)
	return &op, nil
}

// GetOperation implements ports.OperatorStore.
func (s *Store) GetOperation(ctx context.Context, id string) (*domain.Operation, error) {
	op, err := scanOperation(s.rdb.QueryRowContext(ctx, "SELECT "+operationColumns+" FROM operations WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, domain.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get operation: %w", err)
	}
	return op, nil
}

// Operations implements ports.OperatorStore. The table holds a handful of
// rows (one per bulk action an operator started), so it is read whole.
func (s *Store) Operations(ctx context.Context, running bool) ([]*domain.Operation, error) {
	q := "SELECT " + operationColumns + " FROM operations"
	var args []any
	if running {
		q += " WHERE state = ?"
		args = append(args, string(domain.OpRunning))
	}
	rows, err := s.rdb.QueryContext(ctx, q+" ORDER BY created_at DESC, id DESC", args...)
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	defer rows.Close()
	var out []*domain.Operation
	for rows.Next() {
		op, err := scanOperation(rows)
		if err != nil {
			return nil, fmt.Errorf("list operations: %w", err)
		}
		out = append(out, op)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	return out, nil
}

// LanePauses implements ports.OperatorStore.
func (s *Store) LanePauses(ctx context.Context) ([]domain.LanePause, error) {
	rows, err := s.rdb.QueryContext(ctx, "SELECT upstream, at, reason FROM lane_pauses ORDER BY upstream")
	if err != nil {
		return nil, fmt.Errorf("list lane pauses: %w", err)
	}
	defer rows.Close()
	out := []domain.LanePause{}
	for rows.Next() {
		var p domain.LanePause
		var upstream string
		var at int64
		if err := rows.Scan(&upstream, &at, &p.Reason); err != nil {
			return nil, fmt.Errorf("list lane pauses: %w", err)
		}
		p.Upstream, p.At = domain.UpstreamKey(upstream), storekit.FromMillis(at)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list lane pauses: %w", err)
	}
	return out, nil
}
