package postgres

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/storekit"
)

// optionsEpoch is when the scheduled jobs and deadlines of the plan tests
// tables begin (Unix ms).
const optionsEpoch int64 = 1700000000000

// TestQueriesUseIndexes checks, on a table of realistic shape (many lanes,
// tenant lanes, a finished tail, a few in-flight jobs of several owners),
// that the statements whose cost must not grow with the backlog read
// through indexes, never a sequential scan of jobs (in-flight jobs: about
// 1%), and that the reads of job options use the index made for them
// (priorities, scheduled jobs, deadlines: see the seed). AQUIFER_EXPLAIN_ROWS
// sets the table's size (default 20000); with -v the plans are logged.
func TestQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	rows := 20000
	if v, err := strconv.Atoi(os.Getenv("AQUIFER_EXPLAIN_ROWS")); err == nil && v > 0 {
		rows = v
	}
	schema := newSchema(t)
	openStore(t, schema, "a:1", nil)
	start := time.Now()
	// Job options: a seventh of the jobs high priority and a seventh low
	// (7 is coprime with the other moduli, so every lane has each); one
	// in 50 scheduled (in no lane yet, due over the next 20000 s); one in
	// 30 with a deadline (1000 s apart).
	exec(t, schema, `INSERT INTO jobs (id, seq, user_id, idempotent_key, method, lane, status, created_at, updated_at,
		dispatched_at, expires_at, ready_lane, ready_seq, owner, priority, not_before, deadline)
	SELECT 'j' || g, g, 'u', 'k' || g, 'POST', l.lane,
		CASE WHEN g % 10 = 0 THEN 'completed' WHEN g % 97 = 0 THEN 'in_flight' ELSE 'queued' END,
		1, 1, 1, 9000000000000000,
		CASE WHEN g % 10 = 0 OR (g % 50 = 3 AND g % 97 <> 0) THEN '' ELSE l.lane END,
		CASE WHEN g % 50 = 3 AND g % 97 <> 0 THEN 0 ELSE g END, 'p' || (g % 3),
		CASE g % 7 WHEN 1 THEN 1 WHEN 2 THEN -1 ELSE 0 END,
		CASE WHEN g % 50 = 3 THEN $2::bigint + g * 1000 ELSE 0 END,
		CASE WHEN g % 30 = 7 THEN $2::bigint + g * 1000 ELSE 0 END
	FROM generate_series(1, $1::int) g,
	LATERAL (SELECT 'http://up' || (g % 40) || '.test:80' ||
		CASE WHEN g % 4 = 0 THEN '|' || substr(md5((g % 7)::text), 1, 24) ELSE '' END AS lane) l`, rows, optionsEpoch)
	exec(t, schema, "ANALYZE jobs")
	t.Logf("%d rows in %v", rows, time.Since(start).Round(time.Millisecond))

	now := time.Now().UnixMilli()
	// Counts counts every waiting job, most of this table: the planner may
	// read the table for that part; its scheduled jobs' part must still be
	// an index-only count of jobs_scheduled.
	mayScan := map[string]bool{"Counts": true}
	// The reads that must find something in this table, so that their
	// plans are of real work.
	finds := map[string]bool{"ListReady": true, "ListReady (high)": true, "ListReady (tenant lane)": true,
		"PromoteDue": true, "NextDue": true, "Overdue": true}
	for _, c := range []struct {
		name  string
		sql   string
		args  []any
		index string // an index the plan must use ("": any)
	}{
		{"Position", sqlPosition, []any{"http://up7.test:80", int64(rows / 2), now}, "jobs_ready"},
		{"ListReady", sqlListReady, []any{"http://up7.test:80", int64(rows / 2), now, 100, int16(0)}, "jobs_ready"},
		{"ListReady (high)", sqlListReady, []any{"http://up7.test:80", int64(rows / 2), now, 100, int16(1)}, "jobs_ready"},
		{"ListReady (tenant lane)", sqlListReady, []any{"http://up8.test:80|" + "c4ca4238a0b923820dcc509a", int64(0), now, 100, int16(1)}, "jobs_ready"},
		{"ReadyQueues", sqlReadyQueues, nil, "jobs_ready"},
		{"Counts", sqlCounts, []any{now}, "jobs_scheduled"},
		// Job options: promoting the first 100 of the jobs due (about a
		// quarter of the scheduled ones), the next one due, 100 of the
		// jobs past their deadline (about half of those with one).
		{"PromoteDue", sqlPromote, []any{optionsEpoch + int64(rows)*250, 100, "a:1"}, "jobs_scheduled"},
		{"NextDue", sqlNextDue, nil, "jobs_scheduled"},
		{"Overdue", sqlOverdue, []any{optionsEpoch + int64(rows)*500, 100}, "jobs_deadline"},
		{"InsertBatch (expired holders)", sqlDeleteExpiredHolders, []any{[]string{"u", "u"}, []string{"k7", "new"}, []int64{now, now}}, "jobs_idempotency"},
		{"InsertBatch (holders)", sqlBatchHolders, []any{[]string{"u", "u"}, []string{"k7", "new"}, []string{"x1", "x2"}}, "jobs_idempotency"},
		{"RecoverLane", sqlRecoverLane, []any{"http://up1.test:80", now}, ""},
		{"RecoverInFlight", `UPDATE jobs SET status = 'queued', updated_at = $2
			WHERE ` + mineOrDead("$1") + ` AND ready_lane <> '' AND status = 'in_flight'`, []any{"a:1", now}, ""},
		// The writer's merged lifecycle writes (merge.go), of 100 jobs:
		// one lookup of jobs_pkey per job, never a scan of the table.
		{"MarkInFlight (merged)", sqlMarks, []any{mergedIDs, mergedInts(now), "a:1"}, "jobs_pkey"},
		{"Requeue (merged)", sqlRequeuesDispatch, []any{mergedIDs, mergedInts(1), mergedInts(0), mergedInts(now), mergedInts(now),
			make([]*string, len(mergedIDs)), "a:1"}, "jobs_pkey"},
		{"Requeue delivery (merged)", sqlRequeuesDeliver, []any{mergedIDs, mergedInts(1), mergedInts(0), mergedInts(503),
			mergedStrings(""), mergedInts(now), "a:1"}, "jobs_pkey"},
		{"Finish (merged)", sqlFinishes, []any{mergedIDs, mergedStrings("completed"), mergedInts(1), mergedInts(now), mergedInts(now),
			mergedInts(200), make([][]byte, len(mergedIDs)), make([]bool, len(mergedIDs)), mergedStrings(""), mergedStrings(""),
			mergedStrings("http://hooks.test:80"), mergedStrings("pending"), make([]*string, len(mergedIDs)), "a:1"}, "jobs_pkey"},
		{"FinishDelivery (merged)", sqlDeliveries, []any{mergedIDs, mergedStrings("delivered"), mergedInts(1), mergedInts(204),
			mergedStrings(""), mergedInts(now), mergedInts(1000), mergedInts(1000), "a:1"}, "jobs_pkey"},
		{"ResetStale (read)", "SELECT " + storekit.JobColumns + ` FROM jobs WHERE ` + mineOrDead("$1") + `
			AND ready_lane <> '' AND status = 'in_flight' AND dispatched_at < $2 ORDER BY ready_seq`, []any{"a:1", now}, ""},
	} {
		// A prepared statement runs with a custom plan (for its values)
		// or a generic one (for any values), as PostgreSQL decides: both
		// must use the indexes.
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explain(t, schema, c.name, mode, c.sql, c.args)
			var nodes []struct{ Plan planNode }
			if err := json.Unmarshal(plan, &nodes); err != nil || len(nodes) != 1 {
				t.Fatalf("%s: unreadable plan (%v): %s", c.name, err, plan)
			}
			if !mayScan[c.name] && nodes[0].Plan.scans("jobs") {
				t.Errorf("%s (%s) scans jobs sequentially:\n%s", c.name, mode, plan)
			}
			if finds[c.name] && nodes[0].Plan.Rows == 0 {
				t.Errorf("%s (%s) found nothing: the seed does not exercise it", c.name, mode)
			}
			if c.index != "" && !nodes[0].Plan.uses(c.index) {
				t.Errorf("%s (%s) does not use %s:\n%s", c.name, mode, c.index, plan)
			}
		}
	}
}

// mergedIDs are the jobs of the merged writes TestQueriesUseIndexes
// explains: 100 of its table's, sorted by id as the writer sorts them,
// and one that is not there.
var mergedIDs = func() []string {
	ids := []string{"missing"}
	for g := 1; g <= 100; g++ {
		ids = append(ids, fmt.Sprintf("j%d", g*97+1))
	}
	sort.Strings(ids)
	return ids
}()

// mergedInts is v for each of mergedIDs.
func mergedInts(v int64) []int64 {
	out := make([]int64, len(mergedIDs))
	for i := range out {
		out[i] = v
	}
	return out
}

// mergedStrings is v for each of mergedIDs.
func mergedStrings(v string) []string {
	out := make([]string, len(mergedIDs))
	for i := range out {
		out[i] = v
	}
	return out
}

// explain prepares sql (the statement name), runs it with args under plan_cache_mode mode in
// EXPLAIN ANALYZE (undoing its writes) and returns the JSON plan. With -v
// it logs the text plan too.
func explain(t *testing.T, schema, name, mode, sql string, args []any) []byte {
	t.Helper()
	return explainAfter(t, schema, name, mode, "", sql, args)
}

// explainAfter is explain with the statement setup (if not empty) run first
// in the same transaction.
func explainAfter(t *testing.T, schema, name, mode, setup, sql string, args []any) []byte {
	t.Helper()
	lits := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			lits[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		case []byte:
			lits[i] = "'\\x" + hex.EncodeToString(v) + "'::bytea"
		case []string:
			q := make([]string, len(v))
			for n, e := range v {
				q[n] = "'" + strings.ReplaceAll(e, "'", "''") + "'"
			}
			lits[i] = "ARRAY[" + strings.Join(q, ", ") + "]::text[]"
		case []int64:
			q := make([]string, len(v))
			for n, e := range v {
				q[n] = strconv.FormatInt(e, 10)
			}
			lits[i] = "ARRAY[" + strings.Join(q, ", ") + "]::int8[]"
		case []bool:
			q := make([]string, len(v))
			for n, e := range v {
				q[n] = strconv.FormatBool(e)
			}
			lits[i] = "ARRAY[" + strings.Join(q, ", ") + "]::bool[]"
		case []*string:
			q := make([]string, len(v))
			for n, e := range v {
				q[n] = "NULL"
				if e != nil {
					q[n] = "'" + strings.ReplaceAll(*e, "'", "''") + "'"
				}
			}
			lits[i] = "ARRAY[" + strings.Join(q, ", ") + "]::text[]"
		case [][]byte:
			q := make([]string, len(v))
			for n, e := range v {
				q[n] = "NULL"
				if e != nil {
					q[n] = "'\\x" + hex.EncodeToString(e) + "'::bytea"
				}
			}
			lits[i] = "ARRAY[" + strings.Join(q, ", ") + "]::bytea[]"
		default:
			lits[i] = fmt.Sprint(v)
		}
	}
	params := "" // EXECUTE takes no parentheses without parameters
	if len(lits) > 0 {
		params = " (" + strings.Join(lits, ", ") + ")"
	}
	var plan []byte
	query(t, schema, func(tx pgx.Tx) error {
		ctx := context.Background()
		stmts := []string{"SET LOCAL plan_cache_mode = " + mode, "PREPARE explained AS " + sql}
		if setup != "" {
			stmts = append([]string{setup}, stmts...)
		}
		for _, stmt := range stmts {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		defer func() { _, _ = tx.Exec(ctx, "DEALLOCATE explained") }()
		for _, format := range []string{"TEXT", "JSON"} {
			if format == "TEXT" && !testing.Verbose() {
				continue
			}
			if _, err := tx.Exec(ctx, "SAVEPOINT x"); err != nil {
				return err
			}
			r, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT "+format+") EXECUTE explained"+params,
				pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				return err
			}
			lines, err := pgx.CollectRows(r, pgx.RowTo[string])
			if err != nil {
				return err
			}
			if format == "TEXT" {
				t.Logf("%s (%s):\n%s", name, mode, strings.Join(lines, "\n"))
			} else {
				plan = []byte(strings.Join(lines, ""))
			}
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT x"); err != nil {
				return err
			}
		}
		return nil
	})
	return plan
}

// planNode is a node of an EXPLAIN (FORMAT JSON) plan.
type planNode struct {
	NodeType   string     `json:"Node Type"`
	Relation   string     `json:"Relation Name"`
	Index      string     `json:"Index Name"`
	Rows       int        `json:"Actual Rows"`
	SharedHit  int        `json:"Shared Hit Blocks"`
	SharedRead int        `json:"Shared Read Blocks"`
	Plans      []planNode `json:"Plans"`
}

// has reports whether the plan has a node of type nodeType.
func (n planNode) has(nodeType string) bool {
	if n.NodeType == nodeType {
		return true
	}
	for _, c := range n.Plans {
		if c.has(nodeType) {
			return true
		}
	}
	return false
}

// scans reports whether the plan reads relation with a sequential scan.
func (n planNode) scans(relation string) bool {
	if n.NodeType == "Seq Scan" && n.Relation == relation {
		return true
	}
	for _, c := range n.Plans {
		if c.scans(relation) {
			return true
		}
	}
	return false
}

// uses reports whether the plan reads index.
func (n planNode) uses(index string) bool {
	if n.Index == index {
		return true
	}
	for _, c := range n.Plans {
		if c.uses(index) {
			return true
		}
	}
	return false
}

// TestMergedWritesPlanByID: on a small table with no statistics, where the
// planner would rather scan the table, the merged writes, planned as the
// writer plans them (sqlPlanByID), find their rows through jobs_pkey, in
// custom and generic plans alike: a generic plan made while the table is
// small is kept as it grows.
func TestMergedWritesPlanByID(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	openStore(t, schema, "a:1", nil)
	exec(t, schema, `INSERT INTO jobs (id, seq, user_id, idempotent_key, method, lane, status, created_at, updated_at, expires_at, owner)
		SELECT 'j' || g, g, 'u', 'k' || g, 'POST', 'x', 'queued', 1, 1, 9000000000000000, 'o' FROM generate_series(1, 30) g`)
	ids := []string{"j1", "j2", "j3", "missing"}
	n := len(ids)
	ints := func(v int64) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	strs := func(v string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	now := time.Now().UnixMilli()
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"MarkInFlight (merged)", sqlMarks, []any{ids, ints(now), "a:1"}},
		{"Requeue (merged)", sqlRequeuesDispatch, []any{ids, ints(1), ints(0), ints(now), ints(now), make([]*string, n), "a:1"}},
		{"Requeue delivery (merged)", sqlRequeuesDeliver, []any{ids, ints(1), ints(0), ints(503), strs(""), ints(now), "a:1"}},
		{"Finish (merged)", sqlFinishes, []any{ids, strs("completed"), ints(1), ints(now), ints(now), ints(200), make([][]byte, n),
			make([]bool, n), strs(""), strs(""), strs("http://hooks.test:80"), strs("pending"), make([]*string, n), "a:1"}},
		{"FinishDelivery (merged)", sqlDeliveries, []any{ids, strs("delivered"), ints(1), ints(204), strs(""), ints(now), ints(1000),
			ints(1000), "a:1"}},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explainAfter(t, schema, c.name, mode, sqlPlanByID, c.sql, c.args)
			var nodes []struct{ Plan planNode }
			if err := json.Unmarshal(plan, &nodes); err != nil || len(nodes) != 1 {
				t.Fatalf("%s: unreadable plan (%v): %s", c.name, err, plan)
			}
			if nodes[0].Plan.scans("jobs") || nodes[0].Plan.has("Bitmap Heap Scan") || !nodes[0].Plan.uses("jobs_pkey") {
				t.Errorf("%s (%s) does not find its rows by jobs_pkey:\n%s", c.name, mode, plan)
			}
		}
	}
}
