package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

const jobColumns = `seq, id, user_id, idempotent_key, url, pool_id, method, headers, body,
	webhook_url, lane, status, attempts, deferrals, created_at, updated_at, dispatched_at, expires_at,
	response_status, response_body, response_truncated, response_content_type, reason,
	ready_lane, ready_seq, delivery_status, delivery_attempts, delivery_response, delivery_reason`

type scanner interface{ Scan(dest ...any) error }

// scanJob rebuilds a job from a row. Rows were written by this package, so
// the values are trusted.
func scanJob(row scanner) (*domain.Job, error) {
	var (
		j                                  domain.Job
		id, lane, status, readyLane        string
		headers, ctype, reason             string
		deliveryStatus, deliveryReason     string
		body, respBody                     []byte
		created, updated, dispatched, exp  int64
		respStatus, truncated, attempts    int
		deliveryAttempts, deliveryResponse int
	)
	err := row.Scan(&j.Seq, &id, &j.UserID, &j.IdempotentKey, &j.URL, &j.PoolID, &j.Method,
		&headers, &body, &j.WebhookURL, &lane, &status, &attempts, &j.Deferrals, &created, &updated, &dispatched, &exp,
		&respStatus, &respBody, &truncated, &ctype, &reason,
		&readyLane, &j.ReadySeq, &deliveryStatus, &deliveryAttempts, &deliveryResponse, &deliveryReason)
	if err != nil {
		return nil, err
	}
	j.ID, j.Queue, j.Status, j.ReadyQueue = domain.JobID(id), domain.QueueKey(lane), domain.Status(status), domain.QueueKey(readyLane)
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
	if deliveryStatus != "" {
		j.Delivery = &domain.Delivery{Status: domain.DeliveryStatus(deliveryStatus), Attempts: deliveryAttempts,
			ResponseStatus: deliveryResponse, Reason: deliveryReason}
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
