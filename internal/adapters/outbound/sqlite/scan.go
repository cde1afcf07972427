package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

const jobColumns = `seq, id, kind, parent_id, user_id, idempotent_key, url, pool_id, method, headers, body,
	webhook_url, lane, status, attempts, created_at, updated_at, dispatched_at, expires_at,
	response_status, response_body, response_truncated, response_content_type, reason`

type scanner interface{ Scan(dest ...any) error }

// scanJob rebuilds a job from a row. Rows were written by this package, so
// the values are trusted.
func scanJob(row scanner) (*domain.Job, error) {
	var (
		j                                 domain.Job
		id, kind, parent, lane, status    string
		headers, ctype, reason            string
		body, respBody                    []byte
		created, updated, dispatched, exp int64
		respStatus, truncated, attempts   int
	)
	err := row.Scan(&j.Seq, &id, &kind, &parent, &j.UserID, &j.IdempotentKey, &j.URL, &j.PoolID, &j.Method,
		&headers, &body, &j.WebhookURL, &lane, &status, &attempts, &created, &updated, &dispatched, &exp,
		&respStatus, &respBody, &truncated, &ctype, &reason)
	if err != nil {
		return nil, err
	}
	j.ID, j.Kind, j.ParentID, j.Lane, j.Status = domain.JobID(id), domain.Kind(kind), domain.JobID(parent), domain.LaneKey(lane), domain.Status(status)
	j.Attempts = attempts
	if len(body) > 0 {
		j.Body = body
	}
	if headers != "" && headers != "{}" {
		if err := json.Unmarshal([]byte(headers), &j.Headers); err != nil {
			return nil, fmt.Errorf("decode headers of job %s: %w", id, err)
		}
	}
	j.CreatedAt, j.UpdatedAt, j.ExpiresAt = fromMS(created), fromMS(updated), fromMS(exp)
	if dispatched > 0 {
		j.DispatchedAt = fromMS(dispatched)
	}
	if j.Status.Terminal() {
		j.Result = &domain.Result{ResponseStatus: respStatus, Body: respBody, BodyTruncated: truncated != 0,
			ContentType: ctype, Reason: reason}
	}
	return &j, nil
}

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

func encodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	if len(h) == 1 && h["Content-Type"] == "application/json" {
		return `{"Content-Type":"application/json"}`, nil // every webhook job
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("encode headers: %w", err)
	}
	return string(b), nil
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
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
