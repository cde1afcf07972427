package sqlite

import (
	"database/sql"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// jobColumns is the column list of a job as this store reads it: the SQL
// stores' shared row (storekit.JobColumns).
const jobColumns = storekit.JobColumns

// scanJob rebuilds a job from a row of jobColumns.
func scanJob(row storekit.Scanner) (*domain.Job, error) { return storekit.ScanJob(row) }

// collect scans every row of jobColumns into a job and closes rows.
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
