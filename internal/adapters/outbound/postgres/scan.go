package postgres

import (
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// collect scans every row of storekit.JobColumns into a job and closes rows.
func collect(rows pgx.Rows) ([]*domain.Job, error) {
	defer rows.Close()
	return storekit.CollectJobs(rows)
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
