package storekit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// filterJSON is a bulk operation's job filter as the stores keep it, times
// in Unix milliseconds and unset fields left out.
type filterJSON struct {
	Statuses       []domain.Status    `json:"statuses,omitempty"`
	Tenant         string             `json:"tenant,omitempty"`
	UserID         string             `json:"user_id,omitempty"`
	Destination    domain.UpstreamKey `json:"destination,omitempty"`
	PoolID         string             `json:"pool_id,omitempty"`
	CreatedAfter   int64              `json:"created_after,omitempty"`
	CreatedBefore  int64              `json:"created_before,omitempty"`
	ResponseStatus int                `json:"response_status,omitempty"`
	Q              string             `json:"q,omitempty"`
}

// EncodeFilter is a bulk operation's filter as the stores keep it: a JSON
// object ("{}" for no filter).
func EncodeFilter(f domain.JobFilter) (string, error) {
	b, err := json.Marshal(filterJSON{Statuses: f.Statuses, Tenant: f.Tenant, UserID: f.UserID,
		Destination: f.Destination, PoolID: f.PoolID, CreatedAfter: Millis(f.CreatedAfter),
		CreatedBefore: Millis(f.CreatedBefore), ResponseStatus: f.ResponseStatus, Q: f.Q})
	if err != nil {
		return "", fmt.Errorf("encode filter: %w", err)
	}
	return string(b), nil
}

// DecodeFilter rebuilds a filter EncodeFilter made.
func DecodeFilter(s string) (domain.JobFilter, error) {
	var in filterJSON
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return domain.JobFilter{}, fmt.Errorf("decode filter: %w", err)
	}
	return domain.JobFilter{Statuses: in.Statuses, Tenant: in.Tenant, UserID: in.UserID,
		Destination: in.Destination, PoolID: in.PoolID, CreatedAfter: FromMillis(in.CreatedAfter),
		CreatedBefore: FromMillis(in.CreatedBefore), ResponseStatus: in.ResponseStatus, Q: in.Q}, nil
}

// CreatedBounds turns a filter's creation bounds into conditions on stored
// (millisecond) creation times that select exactly the jobs
// JobFilter.Matches does: created_at > after and created_at < before, a
// bound with a sub-millisecond part rounded away from the range (down for
// after, as UnixMilli does, up for before). Only the bounds the filter sets
// apply.
func CreatedBounds(f *domain.JobFilter) (after, before int64) {
	after, before = f.CreatedAfter.UnixMilli(), f.CreatedBefore.UnixMilli()
	if f.CreatedBefore.After(time.UnixMilli(before)) {
		before++
	}
	return after, before
}

// FoldQ is the q filter's substring with ASCII letters lowered, as bytes:
// stores compare it with the ASCII-lowered bytes of a job's URL path and
// failure reason (domain.ContainsFold), whatever bytes it holds.
func FoldQ(q string) []byte {
	b := []byte(q)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return b
}
