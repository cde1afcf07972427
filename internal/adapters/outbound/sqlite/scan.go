package sqlite

import (
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// jobColumns is the column list of a job as this store reads it: the SQL
// stores' shared row (storekit.JobColumns).
const jobColumns = storekit.JobColumns

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
