package sqlite

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// queryPlan returns SQLite's EXPLAIN QUERY PLAN of q, one step a line,
// indented by depth.
func queryPlan(t *testing.T, s *Store, q string, args []any) string {
	t.Helper()
	rows, err := s.rdb.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", q, err)
	}
	defer rows.Close()
	depth := map[int]int{0: -1}
	var lines []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		depth[id] = depth[parent] + 1
		lines = append(lines, strings.Repeat("  ", depth[id])+detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestQueryPlans pins the plans doc.go shows: a first page of each
// common listing reads one index range newest first (or merges one range
// per status) and sorts nothing; counts read jobs_status alone, or one
// index range and its rows. A change of SQLite or of the schema that
// changes a plan fails here, and doc.go must follow.
func TestQueryPlans(t *testing.T) {
	s, err := Open(t.Context(), Options{Path: filepath.Join(t.TempDir(), "a.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	failed := []domain.Status{domain.StatusFailed}
	for _, tc := range []struct {
		name        string
		filter      domain.JobFilter
		before      int64
		list, count string
	}{
		{"newest", domain.JobFilter{}, 0,
			"SCAN jobs" + bodyLookups("", 1),
			"SCAN jobs USING COVERING INDEX jobs_status"},
		{"status=failed", domain.JobFilter{Statuses: failed}, 0,
			"SEARCH jobs USING INDEX jobs_status (status=?)" + bodyLookups("", 1),
			"SCAN jobs USING COVERING INDEX jobs_status"},
		{"status=failed, next page", domain.JobFilter{Statuses: failed}, 1000,
			"SEARCH jobs USING INDEX jobs_status (status=? AND seq<?)" + bodyLookups("", 1),
			"SCAN jobs USING COVERING INDEX jobs_status"},
		{"status=queued&status=in_flight", domain.JobFilter{Statuses: []domain.Status{domain.StatusQueued, domain.StatusInFlight}}, 0,
			"MERGE (UNION ALL)\n  LEFT\n    SEARCH jobs USING INDEX jobs_status (status=?)" + bodyLookups("    ", 1) +
				"\n  RIGHT\n    SEARCH jobs USING INDEX jobs_status (status=?)" + bodyLookups("    ", 4),
			"SCAN jobs USING COVERING INDEX jobs_status"},
		{"destination", domain.JobFilter{Destination: "https://api.test:443"}, 0,
			"SEARCH jobs USING INDEX jobs_upstream (upstream=?)" + bodyLookups("", 1),
			"SEARCH jobs USING INDEX jobs_upstream (upstream=?)\nUSE TEMP B-TREE FOR GROUP BY"},
		{"destination&status=failed", domain.JobFilter{Destination: "https://api.test:443", Statuses: failed}, 0,
			"SEARCH jobs USING INDEX jobs_upstream (upstream=?)" + bodyLookups("", 1),
			"SEARCH jobs USING INDEX jobs_upstream (upstream=?)\nUSE TEMP B-TREE FOR GROUP BY"},
		{"user_id", domain.JobFilter{UserID: "alice"}, 0,
			"SEARCH jobs USING INDEX jobs_user (user_id=?)" + bodyLookups("", 1),
			"SEARCH jobs USING INDEX jobs_user (user_id=?)\nUSE TEMP B-TREE FOR GROUP BY"},
		{"tenant", domain.JobFilter{Tenant: "acme"}, 0,
			"SEARCH jobs USING INDEX jobs_tenant (tenant=?)" + bodyLookups("", 1),
			"SEARCH jobs USING INDEX jobs_tenant (tenant=?)\nUSE TEMP B-TREE FOR GROUP BY"},
		{"tenant&status=failed", domain.JobFilter{Tenant: "acme", Statuses: failed}, 0,
			"SEARCH jobs USING INDEX jobs_tenant (tenant=?)" + bodyLookups("", 1),
			"SEARCH jobs USING INDEX jobs_tenant (tenant=?)\nUSE TEMP B-TREE FOR GROUP BY"},
		{"tenant&user_id", domain.JobFilter{Tenant: "acme", UserID: domain.Scope("acme", "alice")}, 0,
			"SEARCH jobs USING INDEX jobs_user (user_id=?)" + bodyLookups("", 1),
			"SEARCH jobs USING INDEX jobs_user (user_id=?)\nUSE TEMP B-TREE FOR GROUP BY"},
		{"response_status", domain.JobFilter{ResponseStatus: 503}, 0,
			"SCAN jobs" + bodyLookups("", 1),
			"SCAN jobs\nUSE TEMP B-TREE FOR GROUP BY"},
		{"destination&response_status", domain.JobFilter{Destination: "https://api.test:443", ResponseStatus: 503}, 0,
			"SEARCH jobs USING INDEX jobs_upstream (upstream=?)" + bodyLookups("", 1),
			"SEARCH jobs USING INDEX jobs_upstream (upstream=?)\nUSE TEMP B-TREE FOR GROUP BY"},
		{"q", domain.JobFilter{Q: "chat"}, 0,
			"SCAN jobs" + bodyLookups("", 1),
			"SCAN jobs\nUSE TEMP B-TREE FOR GROUP BY"},
	} {
		q, args := listQuery(&ports.ListJobsParams{Filter: tc.filter, BeforeSeq: tc.before, Limit: 100, Now: now})
		list := queryPlan(t, s, q, args)
		q, args = countQuery(&ports.CountJobsParams{Filter: tc.filter, Now: now})
		count := queryPlan(t, s, q, args)
		t.Logf("%s\n  list:\n%s\n  count:\n%s", tc.name, indent(list), indent(count))
		if list != tc.list {
			t.Errorf("%s: listing plan\n%s\nwant\n%s", tc.name, list, tc.list)
		}
		if count != tc.count {
			t.Errorf("%s: count plan\n%s\nwant\n%s", tc.name, count, tc.count)
		}
	}
	for _, tc := range []struct {
		name, q string
		args    []any
		want    string
	}{
		{"ListReady", listReadySQL, []any{"a.test:80", 0, 1, 1, 100}, "SEARCH jobs USING INDEX jobs_ready (ready_lane=? AND priority=? AND ready_seq>?)" + bodyLookups("", 1)},
		{"Position", positionSQL, []any{"a.test:80", 1, 1}, "SEARCH jobs USING COVERING INDEX jobs_ready (ready_lane=? AND priority=? AND ready_seq<?)"},
		{"Counts", countsSQL, []any{1},
			"SCAN jobs USING COVERING INDEX jobs_ready\nSCALAR SUBQUERY 1\n  SEARCH jobs USING INDEX jobs_scheduled (not_before>?)"},
		{"ReadyQueues", readyQueuesSQL, nil, "SCAN jobs USING COVERING INDEX jobs_ready"},
		{"NextDue", nextDueSQL, nil, "SEARCH jobs USING INDEX jobs_scheduled (not_before>?)"},
		{"PromoteDue", promoteSQL, []any{1, 100}, "SEARCH jobs USING INDEX jobs_scheduled (not_before>? AND not_before<?)" + bodyLookups("", 1)},
		{"Overdue", overdueSQL, []any{1, 1, 100}, "SEARCH jobs USING INDEX jobs_deadline (deadline>? AND deadline<?)" + bodyLookups("", 1)},
		{"CountUnfinished", countUnfinishedSQL, []any{"acme\x1f", "acme\x20", 1}, "SEARCH jobs USING INDEX jobs_user (user_id>? AND user_id<?)"},
	} {
		got := queryPlan(t, s, tc.q, tc.args)
		t.Logf("%s:\n%s", tc.name, indent(got))
		if got != tc.want {
			t.Errorf("%s plan\n%s\nwant\n%s", tc.name, got, tc.want)
		}
	}
	purge := queryPlan(t, s, "SELECT seq FROM jobs WHERE expires_at <= ? LIMIT ?", []any{1, 1})
	t.Logf("purge:\n%s", indent(purge))
	if purge != "SCAN jobs USING COVERING INDEX jobs_status" {
		t.Errorf("purge plan\n%s\nwant a scan of jobs_status alone", purge)
	}
}

// bodyLookups is what jobColumns adds to a plan that reads whole jobs, at
// the given indent: one lookup in job_bodies by key per body, which runs
// only for a row that keeps that body apart.
func bodyLookups(indent string, first int) string {
	var b strings.Builder
	for i := range 2 {
		fmt.Fprintf(&b, "\n%sCORRELATED SCALAR SUBQUERY %d\n%s  SEARCH job_bodies USING INTEGER PRIMARY KEY (rowid=?)", indent, first+i, indent)
	}
	return b.String()
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

// TestNoListingSorts builds the listing and count of every combination of
// filters and checks that no listing sorts what it matches (a first page
// must not read every matching job) and that no count walks an index only
// to look each row up from it.
func TestNoListingSorts(t *testing.T) {
	s, err := Open(t.Context(), Options{Path: filepath.Join(t.TempDir(), "a.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	statusSets := [][]domain.Status{nil, {domain.StatusFailed}, {domain.StatusQueued, domain.StatusCompleted}}
	for _, statuses := range statusSets {
		for bits := range 1 << 8 {
			f := domain.JobFilter{Statuses: statuses}
			set := func(i int, apply func()) {
				if bits&(1<<i) != 0 {
					apply()
				}
			}
			set(0, func() { f.Tenant = "acme" })
			set(1, func() { f.UserID = domain.Scope("acme", "alice") })
			set(2, func() { f.Destination = "https://api.test:443" })
			set(3, func() { f.PoolID = "p" })
			set(4, func() { f.CreatedAfter = now.Add(-time.Hour) })
			set(5, func() { f.CreatedBefore = now })
			set(6, func() { f.ResponseStatus = 503 })
			set(7, func() { f.Q = "chat" })
			q, args := listQuery(&ports.ListJobsParams{Filter: f, BeforeSeq: 1000, Limit: 100, Now: now})
			if plan := queryPlan(t, s, q, args); strings.Contains(plan, "TEMP B-TREE FOR ORDER BY") {
				t.Errorf("listing %+v sorts:\n%s", f, plan)
			}
			q, args = countQuery(&ports.CountJobsParams{Filter: f, Now: now})
			if plan := queryPlan(t, s, q, args); strings.Contains(plan, "SCAN jobs USING INDEX") {
				t.Errorf("count %+v walks an index for its rows:\n%s", f, plan)
			}
		}
	}
}
