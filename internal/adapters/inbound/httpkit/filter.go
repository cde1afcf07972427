package httpkit

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// FilterJSON is the filter of POST /jobs/retry and /jobs/cancel: the
// filters of GET /jobs, as a JSON object. Times are RFC 3339 strings or
// Unix milliseconds (a number, or a string of digits).
type FilterJSON struct {
	Status         []string        `json:"status"`
	Tenant         string          `json:"tenant"`
	UserID         string          `json:"user_id"`
	Destination    string          `json:"destination"`
	PoolID         string          `json:"pool_id"`
	CreatedAfter   json.RawMessage `json:"created_after"`
	CreatedBefore  json.RawMessage `json:"created_before"`
	ResponseStatus int             `json:"response_status"`
	Q              string          `json:"q"`
}

// Query is the filter as the core takes it; a time that does not parse is
// an error naming its field, at prefix + the field's name.
func (f *FilterJSON) Query(prefix string) (*app.JobQuery, error) {
	q := &app.JobQuery{Tenant: f.Tenant, UserID: f.UserID, Destination: f.Destination, PoolID: f.PoolID,
		ResponseStatus: f.ResponseStatus, Q: f.Q}
	for _, s := range f.Statuses() {
		q.Statuses = append(q.Statuses, domain.Status(s))
	}
	var err error
	if q.CreatedAfter, err = jsonTime(prefix+"created_after", f.CreatedAfter); err != nil {
		return nil, err
	}
	if q.CreatedBefore, err = jsonTime(prefix+"created_before", f.CreatedBefore); err != nil {
		return nil, err
	}
	return q, nil
}

// Statuses are the filter's statuses; "failed,queued" counts as two.
func (f *FilterJSON) Statuses() []string {
	var out []string
	for _, s := range f.Status {
		out = append(out, SplitList(s)...)
	}
	return out
}

// SplitList splits a comma-separated value, dropping empty items.
func SplitList(v string) []string {
	var out []string
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func jsonTime(field string, raw json.RawMessage) (time.Time, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return time.Time{}, nil
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return time.Time{}, domain.Invalid(field, "%s must be an RFC 3339 time or Unix milliseconds", field)
		}
	} else {
		s = string(raw)
	}
	return ParseTime(field, s)
}

// ParseTime reads a time given as RFC 3339 ("2026-05-01T12:00:00Z") or as
// Unix milliseconds; "" is the zero time. A bad one is an error naming
// field.
func ParseTime(field, v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, nil
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		if ms <= 0 || ms > 1<<53 {
			return time.Time{}, domain.Invalid(field, "%s: %d is not a time in Unix milliseconds", field, ms)
		}
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, domain.Invalid(field, "%s must be an RFC 3339 time (2026-05-01T12:00:00Z) or Unix milliseconds, not %q", field, clip(v))
	}
	return t, nil
}

// clip shortens a caller's value for an error message.
func clip(v string) string {
	if len(v) > 64 {
		return v[:64] + "…"
	}
	return v
}

// Int reads a whole number given for field.
func Int(field, v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, domain.Invalid(field, "%s must be a whole number, not %q", field, clip(v))
	}
	return n, nil
}
