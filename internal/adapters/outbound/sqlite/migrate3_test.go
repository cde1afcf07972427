package sqlite_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// writeOldDB creates a database at path from a testdata schema and runs
// stmts on it, as an older aquiferd left it.
func writeOldDB(t *testing.T, path, schemaFile string, stmts ...string) {
	t.Helper()
	ddl, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range append([]string{string(ddl)}, stmts...) {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// openOldDB writes a database of schema version (v1, v2, ...) from
// testdata holding rows, opens it (which migrates it), and closes it at
// the test's end.
func openOldDB(t *testing.T, version string, rows ...string) *sqlite.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), version+".db")
	writeOldDB(t, path, "testdata/schema_"+version+".sql", rows...)
	s, err := sqlite.Open(t.Context(), sqlite.Options{Path: path})
	if err != nil {
		t.Fatalf("open %s database: %v", version, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// v2Rows are jobs as the version-2 store wrote them: a tenant's failed job
// in a tenant queue, a queued pool job, a completed job with a webhook
// delivered.
var v2Rows = []string{
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, method, lane, status, attempts, created_at, updated_at,
		expires_at, response_status, reason) VALUES (1, '00000000000000000000000000000001', 'acme' || char(31) || 'alice', 'k1',
		'https://API.test/v1/Chat?token=Secret', 'POST', 'https://api.test:443|acme', 'failed', 3, 1000, 2000,
		99999999999999, 503, 'connection refused')`,
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, pool_id, method, lane, status, created_at, updated_at, expires_at,
		ready_lane, ready_seq) VALUES (2, '00000000000000000000000000000002', 'bob', 'k2', 'p1', 'GET', 'pool:p1', 'queued',
		1001, 1001, 99999999999999, 'pool:p1', 2)`,
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, method, webhook_url, lane, status, attempts, created_at, updated_at,
		expires_at, response_status, delivery_status, delivery_attempts, delivery_response) VALUES (3,
		'00000000000000000000000000000003', 'bob', 'k3', 'http://b.test/hooks/in', 'POST', 'http://h.test/', 'http://b.test:80',
		'completed', 1, 1002, 1003, 99999999999999, 200, 'delivered', 1, 204)`,
}

// TestMigratesVersion2 opens a database written by schema version 2 and
// checks that its jobs are listed, filtered, counted and retried like new
// ones: the columns the filters read were derived for the existing rows.
func TestMigratesVersion2(t *testing.T) {
	t.Parallel()
	s := openOldDB(t, "v2", v2Rows...)
	now := time.Now()
	for _, tc := range []struct {
		f    domain.JobFilter
		want []int64
	}{
		{domain.JobFilter{}, []int64{3, 2, 1}},
		{domain.JobFilter{Tenant: "acme"}, []int64{1}},
		{domain.JobFilter{Destination: "https://api.test:443"}, []int64{1}},
		{domain.JobFilter{Destination: "pool:p1"}, []int64{2}},
		{domain.JobFilter{PoolID: "p1"}, []int64{2}},
		{domain.JobFilter{UserID: "bob"}, []int64{3, 2}},
		{domain.JobFilter{Q: "CHAT"}, []int64{1}},
		{domain.JobFilter{Q: "hooks"}, []int64{3}},
		{domain.JobFilter{Q: "refused"}, []int64{1}},
		{domain.JobFilter{Q: "secret"}, nil},
		{domain.JobFilter{Statuses: []domain.Status{domain.StatusFailed, domain.StatusQueued}}, []int64{2, 1}},
		{domain.JobFilter{ResponseStatus: 200}, []int64{3}},
	} {
		jobs, err := s.ListJobs(t.Context(), &ports.ListJobsParams{Filter: tc.f, Limit: 10, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, j := range jobs {
			got = append(got, j.Seq)
			if j.History != nil {
				t.Fatalf("migrated job %d has history %+v", j.Seq, j.History)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Fatalf("filter %+v listed seqs %v, want %v", tc.f, got, tc.want)
		}
	}
	counts, err := s.CountJobs(t.Context(), &ports.CountJobsParams{Filter: domain.JobFilter{UserID: "bob"}, Now: now})
	if err != nil || len(counts) != 2 || counts[domain.StatusQueued] != 1 || counts[domain.StatusCompleted] != 1 {
		t.Fatalf("counts of bob's jobs = %v, %v", counts, err)
	}
	retried, err := s.Retry(t.Context(), &ports.RetryParams{ID: "00000000000000000000000000000001", Now: now})
	if err != nil || retried.Status != domain.StatusQueued || retried.ReadySeq <= 3 {
		t.Fatalf("Retry of a migrated job = %+v, %v", retried, err)
	}
	ready, err := s.ListReady(t.Context(), &ports.ListReadyParams{Queue: "https://api.test:443|acme", Limit: 10, Now: now})
	if err != nil || len(ready) != 1 || ready[0].Seq != 1 {
		t.Fatalf("the retried job is not ready in its tenant queue: %v, %v", ready, err)
	}
}

// schemaOf describes a database's tables, columns and indexes, in an order
// that does not depend on how they were created (a column that a migration
// added comes last in its table, not where schema.sql puts it).
func schemaOf(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var lines []string
	query := func(q string, args ...any) [][]string {
		rows, err := db.Query(q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var out [][]string
		for rows.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			row := make([]string, len(vals))
			for i, v := range vals {
				row[i] = v.String
			}
			out = append(out, row)
		}
		return out
	}
	for _, obj := range query("SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'") {
		switch obj[0] {
		case "table":
			lines = append(lines, "table "+obj[1]+" "+strings.Join(strings.Fields(obj[3][strings.LastIndex(obj[3], ")")+1:]), " "))
			for _, c := range query("SELECT name, type, \"notnull\", coalesce(dflt_value, ''), pk FROM pragma_table_info(?)", obj[1]) {
				lines = append(lines, "column "+obj[1]+"."+strings.Join(c, " "))
			}
			// Every index, the constraints' own among them (UNIQUE, PRIMARY KEY).
			for _, ix := range query("SELECT name, \"unique\", origin, partial FROM pragma_index_list(?)", obj[1]) {
				lines = append(lines, "index_of "+obj[1]+" "+strings.Join(ix, " "))
			}
		case "index":
			// The index's definition as written, but for spacing and
			// "IF NOT EXISTS" (which schema.sql says and a migration need not).
			def := strings.Join(strings.Fields(obj[3]), " ")
			lines = append(lines, "index "+strings.Replace(def, "IF NOT EXISTS ", "", 1))
		}
	}
	sort.Strings(lines)
	var version int
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("user_version %d\n%s", version, strings.Join(lines, "\n"))
}

// TestMigratedSchemaIsTheFreshSchema checks that a database migrated from
// each older version has exactly the tables, columns and indexes of one
// created from schema.sql.
func TestMigratedSchemaIsTheFreshSchema(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fresh := filepath.Join(dir, "fresh.db")
	s, err := sqlite.Open(t.Context(), sqlite.Options{Path: fresh})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	want := schemaOf(t, fresh)
	for _, v := range []string{"v1", "v2", "v3", "v4"} {
		path := filepath.Join(dir, v+".db")
		writeOldDB(t, path, "testdata/schema_"+v+".sql")
		s, err := sqlite.Open(t.Context(), sqlite.Options{Path: path})
		if err != nil {
			t.Fatalf("open %s database: %v", v, err)
		}
		s.Close()
		if got := schemaOf(t, path); got != want {
			t.Fatalf("schema migrated from %s:\n%s\n\nwant (fresh):\n%s", v, got, want)
		}
	}
}
