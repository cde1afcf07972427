package postgres

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// jobColumns is the column list of a job row: the SQL stores' shared
// columns, then the attempt history (version 3).
const jobColumns = storekit.JobColumns + ", history"

// scanJob rebuilds a job from a row of jobColumns.
func scanJob(row storekit.Scanner) (*domain.Job, error) {
	var r storekit.Row
	var history string
	if err := row.Scan(append(r.Dest(), &history)...); err != nil {
		return nil, err
	}
	j, err := r.Job()
	if err != nil {
		return nil, err
	}
	if j.History, err = storekit.DecodeHistory(history); err != nil {
		return nil, fmt.Errorf("job %s: %w", r.ID, err)
	}
	return j, nil
}

// collect scans every row of jobColumns into a job and closes rows.
func collect(rows pgx.Rows) ([]*domain.Job, error) {
	defer rows.Close()
	var out []*domain.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("scan job: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("scan jobs: %w", err)
	}
	return out, nil
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
