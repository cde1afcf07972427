package storekit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Millis is a time as Unix milliseconds, the stores' time format; 0 for the
// zero time.
func Millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// FromMillis is the time of Unix milliseconds v; the zero time for 0.
func FromMillis(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// JobColumns is the column list of a job row in the SQL stores (sqlite,
// postgres), in the order of Row.Dest.
const JobColumns = `seq, id, user_id, idempotent_key, url, pool_id, method, headers, body,
	webhook_url, lane, status, attempts, deferrals, created_at, updated_at, dispatched_at, expires_at,
	response_status, response_body, response_truncated, response_content_type, reason,
	ready_lane, ready_seq, delivery_status, delivery_attempts, delivery_response, delivery_reason, history,
	not_before, deadline, priority, options`

// Row is a job row of the SQL stores as scanned, a field a column.
type Row struct {
	Seq                                    int64
	ID, UserID, IdempotentKey, URL, PoolID string
	Method, Headers                        string
	Body                                   []byte
	WebhookURL, Queue, Status              string
	Attempts, Deferrals                    int
	Created, Updated, Dispatched, Expires  int64
	ResponseStatus                         int
	ResponseBody                           []byte
	Truncated                              bool
	ContentType, Reason, ReadyQueue        string
	ReadySeq                               int64
	DeliveryStatus                         string
	DeliveryAttempts, DeliveryResponse     int
	DeliveryReason                         string
	History                                string // EncodeHistory's JSON
	NotBefore, Deadline                    int64  // Millis
	Priority                               int
	Options                                string // EncodeOptions's JSON
}

// Dest returns pointers to r's fields in JobColumns order, for a Scan.
func (r *Row) Dest() []any {
	return []any{&r.Seq, &r.ID, &r.UserID, &r.IdempotentKey, &r.URL, &r.PoolID, &r.Method,
		&r.Headers, &r.Body, &r.WebhookURL, &r.Queue, &r.Status, &r.Attempts, &r.Deferrals,
		&r.Created, &r.Updated, &r.Dispatched, &r.Expires,
		&r.ResponseStatus, &r.ResponseBody, &r.Truncated, &r.ContentType, &r.Reason,
		&r.ReadyQueue, &r.ReadySeq, &r.DeliveryStatus, &r.DeliveryAttempts, &r.DeliveryResponse, &r.DeliveryReason, &r.History,
		&r.NotBefore, &r.Deadline, &r.Priority, &r.Options}
}

// Job rebuilds the job of a scanned row. Rows were written by the store, so
// the values are trusted.
func (r *Row) Job() (*domain.Job, error) {
	j := &domain.Job{
		Seq: r.Seq, ID: domain.JobID(r.ID), UserID: r.UserID, IdempotentKey: r.IdempotentKey, URL: r.URL,
		PoolID: r.PoolID, Method: r.Method, WebhookURL: r.WebhookURL, Queue: domain.QueueKey(r.Queue),
		Status: domain.Status(r.Status), Attempts: r.Attempts, Deferrals: r.Deferrals,
		CreatedAt: FromMillis(r.Created), UpdatedAt: FromMillis(r.Updated), ExpiresAt: FromMillis(r.Expires),
		ReadyQueue: domain.QueueKey(r.ReadyQueue), ReadySeq: r.ReadySeq,
	}
	if len(r.Body) > 0 {
		j.Body = r.Body
	}
	if r.Headers != "" && r.Headers != "{}" {
		if err := json.Unmarshal([]byte(r.Headers), &j.Headers); err != nil {
			return nil, fmt.Errorf("decode headers of job %s: %w", r.ID, err)
		}
	}
	if r.Dispatched > 0 {
		j.DispatchedAt = FromMillis(r.Dispatched)
	}
	if j.Status.Terminal() {
		j.Result = &domain.Result{ResponseStatus: r.ResponseStatus, Body: r.ResponseBody, BodyTruncated: r.Truncated,
			ContentType: r.ContentType, Reason: r.Reason}
	}
	if r.DeliveryStatus != "" {
		j.Delivery = &domain.Delivery{Status: domain.DeliveryStatus(r.DeliveryStatus), Attempts: r.DeliveryAttempts,
			ResponseStatus: r.DeliveryResponse, Reason: r.DeliveryReason}
	}
	h, err := DecodeHistory(r.History)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", r.ID, err)
	}
	j.History = h
	if err := DecodeOptions(r.Options, &j.JobOptions); err != nil {
		return nil, fmt.Errorf("job %s: %w", r.ID, err)
	}
	j.NotBefore, j.Deadline, j.Priority = FromMillis(r.NotBefore), FromMillis(r.Deadline), domain.Priority(r.Priority)
	return j, nil
}

// Scanner is a row of either SQL driver (database/sql, pgx).
type Scanner interface{ Scan(dest ...any) error }

// ScanJob rebuilds a job from a row of JobColumns.
func ScanJob(row Scanner) (*domain.Job, error) {
	var r Row
	if err := row.Scan(r.Dest()...); err != nil {
		return nil, err
	}
	return r.Job()
}

// Rows is a set of rows of either SQL driver.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// CollectJobs scans every row of JobColumns into a job. The caller closes
// rows.
func CollectJobs(rows Rows) ([]*domain.Job, error) {
	var out []*domain.Job
	for rows.Next() {
		j, err := ScanJob(rows)
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

// EncodeHeaders is a job's headers as the SQL stores keep them: a JSON
// object, "{}" when there are none.
func EncodeHeaders(h map[string]string) (string, error) {
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
