package sqlite

import (
	"database/sql"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// collect scans every row of storekit.JobColumns into a job and closes rows.
func collect(rows *sql.Rows) ([]*domain.Job, error) {
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
