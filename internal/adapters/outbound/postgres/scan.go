package postgres

import (
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// jobColumns is the column list of a job as this store reads it: the SQL
// stores' shared row (storekit.JobColumns).
const jobColumns = storekit.JobColumns

// scanJob rebuilds a job from a row of jobColumns.
func scanJob(row storekit.Scanner) (*domain.Job, error) { return storekit.ScanJob(row) }

// collect scans every row of jobColumns into a job and closes rows.
func collect(rows pgx.Rows) ([]*domain.Job, error) {
	defer rows.Close()
	return storekit.CollectJobs(rows)
}

// derived are the columns computed from a job's request when it is
// inserted, so that the operators' filters compare plain, indexed columns
// (domain.JobFilter.MatchesIgnoringStatus is the reference).
type derived struct {
	tenant   string // the API-key tenant of the user id, '' when unscoped
	upstream string // the destination of the job's queue
	urlPath  string // what the q filter searches in the URL
}

func derive(userID string, queue domain.QueueKey, url string) derived {
	tenant, _ := domain.Unscope(userID)
	return derived{tenant: tenant, upstream: string(queue.Upstream()), urlPath: domain.URLPath(url)}
}

// text makes free text (a reason, a receiver's content type) storable in a
// PostgreSQL text column, which refuses NUL and invalid UTF-8: one bad value
// must not fail the group commit it shares with other callers.
func text(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
