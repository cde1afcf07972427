package sqlite

import (
	"database/sql"
	"fmt"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// jobColumns is the column list of a job as this store reads it: the SQL
// stores' shared row, then the attempt history.
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
func collect(rows *sql.Rows) ([]*domain.Job, error) {
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
