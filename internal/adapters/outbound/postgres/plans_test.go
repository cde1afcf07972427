package postgres

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/storekit"
)

// TestQueriesUseIndexes checks, on a table of realistic shape (many lanes,
// tenant lanes, a finished tail, a few in-flight jobs of several owners),
// that the statements whose cost must not grow with the backlog read
// through indexes, never a sequential scan of jobs (in-flight jobs: about
// 1%). AQUIFER_EXPLAIN_ROWS
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
	exec(t, schema, `INSERT INTO jobs (id, seq, user_id, idempotent_key, method, lane, status, created_at, updated_at,
		dispatched_at, expires_at, ready_lane, ready_seq, owner)
	SELECT 'j' || g, g, 'u', 'k' || g, 'POST', l.lane,
		CASE WHEN g % 10 = 0 THEN 'completed' WHEN g % 97 = 0 THEN 'in_flight' ELSE 'queued' END,
		1, 1, 1, 9000000000000000,
		CASE WHEN g % 10 = 0 THEN '' ELSE l.lane END, g, 'p' || (g % 3)
	FROM generate_series(1, $1::int) g,
	LATERAL (SELECT 'http://up' || (g % 40) || '.test:80' ||
		CASE WHEN g % 4 = 0 THEN '|' || substr(md5((g % 7)::text), 1, 24) ELSE '' END AS lane) l`, rows)
	exec(t, schema, "ANALYZE jobs")
	t.Logf("%d rows in %v", rows, time.Since(start).Round(time.Millisecond))

	now := time.Now().UnixMilli()
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"Position", `SELECT count(*) FROM jobs
			WHERE ready_lane = $1 AND ready_lane <> '' AND ready_seq < $2 AND status <> 'in_flight' AND expires_at > $3`,
			[]any{"http://up7.test:80", int64(rows / 2), now}},
		{"ListReady", sqlListReady, []any{"http://up7.test:80", int64(rows / 2), now, 100}},
		{"ListReady (tenant lane)", sqlListReady, []any{"http://up8.test:80|" + "c4ca4238a0b923820dcc509a", int64(0), now, 100}},
		{"RecoverLane", sqlRecoverLane, []any{"http://up1.test:80", now}},
		{"RecoverInFlight", `UPDATE jobs SET status = 'queued', updated_at = $2
			WHERE ` + mineOrDead("$1") + ` AND ready_lane <> '' AND status = 'in_flight'`, []any{"a:1", now}},
		{"ResetStale (read)", "SELECT " + storekit.JobColumns + ` FROM jobs WHERE ` + mineOrDead("$1") + `
			AND ready_lane <> '' AND status = 'in_flight' AND dispatched_at < $2 ORDER BY ready_seq`, []any{"a:1", now}},
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
			if nodes[0].Plan.scans("jobs") {
				t.Errorf("%s (%s) scans jobs sequentially:\n%s", c.name, mode, plan)
			}
		}
	}
}

// explain prepares sql (the statement name), runs it with args under plan_cache_mode mode in
// EXPLAIN ANALYZE (undoing its writes) and returns the JSON plan. With -v
// it logs the text plan too.
func explain(t *testing.T, schema, name, mode, sql string, args []any) []byte {
	t.Helper()
	lits := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			lits[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		case []byte:
			lits[i] = "'\\x" + hex.EncodeToString(v) + "'::bytea"
		default:
			lits[i] = fmt.Sprint(v)
		}
	}
	var plan []byte
	query(t, schema, func(tx pgx.Tx) error {
		ctx := context.Background()
		for _, stmt := range []string{"SET LOCAL plan_cache_mode = " + mode, "PREPARE explained AS " + sql} {
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
			r, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT "+format+") EXECUTE explained ("+strings.Join(lits, ", ")+")",
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
