package sqlite

import (
	"strconv"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// jobColumns is the column list of a job as this store reads it: the SQL
// stores' shared row (storekit.JobColumns), except that body and
// response_body come from job_bodies when the row keeps them apart (the
// apart column's bits 1 and 2). TestJobColumnsAreTheSharedRow holds the two
// lists together.
const jobColumns = `seq, id, user_id, idempotent_key, url, pool_id, method, headers, ` + requestBodyColumn + `,
	webhook_url, lane, status, attempts, deferrals, created_at, updated_at, dispatched_at, expires_at,
	response_status, ` + responseBodyColumn + `, response_truncated, response_content_type, reason,
	ready_lane, ready_seq, delivery_status, delivery_attempts, delivery_response, delivery_reason, history,
	not_before, deadline, priority, options`

const (
	requestBodyColumn  = `CASE WHEN apart & 1 THEN (SELECT data FROM job_bodies WHERE key = jobs.seq * 2) ELSE body END`
	responseBodyColumn = `CASE WHEN apart & 2 THEN (SELECT data FROM job_bodies WHERE key = jobs.seq * 2 + 1) ELSE response_body END`
)

// sideBodyMin is the size from which a request or response body is kept in
// job_bodies, written once, instead of in its row, which every status
// change rewrites (docs/BENCHMARKS.md, a thirteenth look). Smaller bodies
// cost less in the row than a second B-tree entry.
const sideBodyMin = 256

// The apart column's bits.
const (
	apartRequest  = 1 // the request body is in job_bodies
	apartResponse = 2 // the response body is in job_bodies
	apartRows     = 4 // job_bodies may hold rows of this job (the trigger deletes them with it)
)

// keepRequestApart is apartRequest|apartRows in SQL: what of apart a write
// that replaces or clears the response keeps.
var keepRequestApart = strconv.Itoa(apartRequest | apartRows)

// bodyKey is a body's key in job_bodies.
func bodyKey(seq int64, response bool) int64 {
	if response {
		return seq*2 + 1
	}
	return seq * 2
}

// scanJob rebuilds a job from a row of jobColumns.
func scanJob(row storekit.Scanner) (*domain.Job, error) { return storekit.ScanJob(row) }

// closingRows are the rows of a read connection (*sql.Rows) or of the
// writer's (*wrows).
type closingRows interface {
	storekit.Rows
	Close() error
}

// collect scans every row of jobColumns into a job and closes rows.
func collect(rows closingRows) ([]*domain.Job, error) {
	defer rows.Close()
	return storekit.CollectJobs(rows)
}

func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
