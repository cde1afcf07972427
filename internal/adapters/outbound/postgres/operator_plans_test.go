package postgres

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// seedListing fills the jobs table of schema with n jobs of the shape a
// long-running store has: most finished (80% completed, 5% failed), 14%
// queued, 1% in flight (more than the lanes' concurrency would allow at
// once, unless the table is small); 199 destinations, 997 users, 2 jobs in
// 11 belonging to one of 7 API-key tenants (in tenant queues), each spread
// evenly over the others (coprime moduli). Seq and creation time grow
// together. It writes SQL directly (the store's
// inserts would take minutes for a million jobs), filling the derived
// columns as the writer does, and ends with VACUUM ANALYZE, as autovacuum
// would.
func seedListing(tb testing.TB, schema string, n int) {
	tb.Helper()
	sql := `INSERT INTO jobs (id, seq, user_id, idempotent_key, url, method, lane, status, attempts,
		created_at, updated_at, expires_at, response_status, reason, ready_lane, ready_seq, owner, tenant, upstream, url_path)
	SELECT 'j' || g, g, u.user_id, 'k' || g, 'http://up' || (g % 199) || '.test:80/v1/items/' || g, 'POST', l.lane,
		st.status, 1, 1700000000000 + g * 10, 1700000000000 + g * 10, 9000000000000000,
		CASE st.status WHEN 'completed' THEN 200 WHEN 'failed' THEN 503 ELSE 0 END,
		CASE st.status WHEN 'failed' THEN 'upstream returned 503 Service Unavailable' ELSE '' END,
		CASE WHEN st.status IN ('queued', 'in_flight') THEN l.lane ELSE '' END, g, 'p' || (g % 3),
		t.tenant, 'http://up' || (g % 199) || '.test:80', '/v1/items/' || g
	FROM generate_series(1, $1::int) g,
	LATERAL (SELECT CASE WHEN g % 11 < 2 THEN 't' || (g % 7) ELSE '' END AS tenant) t,
	LATERAL (SELECT CASE WHEN t.tenant <> '' THEN t.tenant || E'\x1f' ELSE '' END || 'u' || (g % 997) AS user_id) u,
	LATERAL (SELECT 'http://up' || (g % 199) || '.test:80' ||
		CASE WHEN t.tenant <> '' THEN '|' || md5(t.tenant) ELSE '' END AS lane) l,
	LATERAL (SELECT CASE WHEN g % 100 < 80 THEN 'completed' WHEN g % 100 < 85 THEN 'failed'
		WHEN g % 100 = 99 THEN 'in_flight' ELSE 'queued' END AS status) st`
	// A million rows take longer than exec's bound.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	err := pgx.BeginFunc(ctx, admin(tb), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql, n)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	exec(tb, schema, "SELECT setval('jobs_seq', $1::bigint)", n)
	if _, err := admin(tb).Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{schema, "jobs"}.Sanitize()); err != nil {
		tb.Fatal(err)
	}
}

// TestOperatorQueriesUseIndexes checks, on a table seeded by seedListing
// (AQUIFER_EXPLAIN_ROWS jobs, default 50000), that a first page of the
// common listings reads a few pages of an index, never the table, and that
// counting per status for a destination, a user or a tenant reads its index
// (index-only once VACUUM has set the visibility map), never the table. Both for the custom and the generic plan of each
// statement. With -v the plans
// are logged (doc.go quotes them, from a million jobs).
func TestOperatorQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	rows := 50000
	if v, err := strconv.Atoi(os.Getenv("AQUIFER_EXPLAIN_ROWS")); err == nil && v > 0 {
		rows = v
	}
	schema := newSchema(t)
	openStore(t, schema, "a:1", nil)
	start := time.Now()
	seedListing(t, schema, rows)
	t.Logf("%d rows in %v", rows, time.Since(start).Round(time.Millisecond))

	now := time.UnixMilli(1800000000000)
	failed := []domain.Status{domain.StatusFailed}
	lists := []struct {
		name   string
		filter domain.JobFilter
		before int64
	}{
		{"no filter", domain.JobFilter{}, 0},
		{"status=failed", domain.JobFilter{Statuses: failed}, 0},
		{"status=failed, a later page", domain.JobFilter{Statuses: failed}, int64(rows / 2)},
		{"status=failed&status=completed", domain.JobFilter{Statuses: []domain.Status{domain.StatusFailed, domain.StatusCompleted}}, 0},
		{"destination", domain.JobFilter{Destination: "http://up7.test:80"}, 0},
		{"destination&status=failed", domain.JobFilter{Destination: "http://up7.test:80", Statuses: failed}, 0},
		{"user_id", domain.JobFilter{UserID: "u42"}, 0},
		{"user_id&status=failed", domain.JobFilter{UserID: "u42", Statuses: failed}, 0},
		{"tenant", domain.JobFilter{Tenant: "t3"}, 0},
		{"tenant&status=failed", domain.JobFilter{Tenant: "t3", Statuses: failed}, 0},
		{"tenant&user_id", domain.JobFilter{Tenant: "t3", UserID: domain.Scope("t3", "u10")}, 0},
	}
	for _, c := range lists {
		sql, args := listQuery(&ports.ListJobsParams{Filter: c.filter, BeforeSeq: c.before, Limit: 100, Now: now})
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			root := explainRoot(t, schema, "ListJobs "+c.name, mode, sql, args)
			if root.scans("jobs") {
				t.Errorf("ListJobs %s (%s) scans jobs sequentially", c.name, mode)
			}
			// A page of 100 jobs costs about 100 heap pages and a few index
			// pages per status; a scan of a range would cost thousands. The
			// in-flight jobs, which the filtered indexes leave out, may all
			// be read (a heap page each).
			if blocks := root.SharedHit + root.SharedRead; blocks > 600+rows/100 {
				t.Errorf("ListJobs %s (%s) read %d blocks for one page", c.name, mode, blocks)
			}
		}
	}
	// Counting every job reads every job: the planner picks an index-only
	// scan of a listing index or, on a large table, a parallel scan of the
	// table (as fast when it is cached), so only the filtered counts are
	// held to an index-only scan.
	counts := []struct {
		name      string
		filter    domain.JobFilter
		indexOnly bool
	}{
		{"no filter", domain.JobFilter{}, false},
		{"destination", domain.JobFilter{Destination: "http://up7.test:80"}, true},
		{"destination&status (counts ignore it)", domain.JobFilter{Destination: "http://up7.test:80", Statuses: failed}, true},
		{"user_id", domain.JobFilter{UserID: "u42"}, true},
		{"tenant", domain.JobFilter{Tenant: "t3"}, true},
	}
	for _, c := range counts {
		sql, args := countQuery(&ports.CountJobsParams{Filter: c.filter, Now: now})
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			root := explainRoot(t, schema, "CountJobs "+c.name, mode, sql, args)
			// An index-only scan needs the visibility map set by VACUUM, which
			// cannot mark pages all-visible while another test's transaction
			// in the same database is older than the seed: the planner then
			// reads the same index with heap fetches (an index or bitmap
			// scan). Either way it must read the filter's index, never the
			// table.
			if c.indexOnly && (root.scans("jobs") ||
				!(root.has("Index Only Scan") || root.has("Index Scan") || root.has("Bitmap Index Scan"))) {
				t.Errorf("CountJobs %s (%s) does not read an index", c.name, mode)
			}
		}
	}
	// A q filter reads along the narrowest index and tests each job: it may
	// scan (doc.go says so). Logged for the record.
	sql, args := listQuery(&ports.ListJobsParams{Filter: domain.JobFilter{Q: "items/4", Statuses: failed}, Limit: 100, Now: now})
	explainRoot(t, schema, "ListJobs q&status=failed", "force_custom_plan", sql, args)
}

// explainRoot is explain's plan, decoded.
func explainRoot(t *testing.T, schema, name, mode, sql string, args []any) planNode {
	t.Helper()
	plan := explain(t, schema, name, mode, sql, args)
	var nodes []struct{ Plan planNode }
	if err := json.Unmarshal(plan, &nodes); err != nil || len(nodes) != 1 {
		t.Fatalf("%s: unreadable plan (%v): %s", name, err, plan)
	}
	return nodes[0].Plan
}
