package storekit

import (
	"encoding/json"
	"fmt"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// filterJSON is a bulk operation's job filter as the stores keep it. The
// filter is only ever read back whole (to resume the operation), never
// queried, so one JSON column holds it.
type filterJSON struct {
	Statuses       []domain.Status `json:"statuses,omitempty"`
	Tenant         string          `json:"tenant,omitempty"`
	UserID         string          `json:"user_id,omitempty"`
	Destination    string          `json:"destination,omitempty"`
	PoolID         string          `json:"pool_id,omitempty"`
	CreatedAfter   int64           `json:"created_after,omitempty"`  // Unix milliseconds
	CreatedBefore  int64           `json:"created_before,omitempty"` // Unix milliseconds
	ResponseStatus int             `json:"response_status,omitempty"`
	Q              string          `json:"q,omitempty"`
}

// EncodeFilter is a job filter as the stores keep it with its operation: a
// JSON object, "{}" for the empty filter.
func EncodeFilter(f domain.JobFilter) (string, error) {
	b, err := json.Marshal(filterJSON{
		Statuses: f.Statuses, Tenant: f.Tenant, UserID: f.UserID, Destination: string(f.Destination), PoolID: f.PoolID,
		CreatedAfter: Millis(f.CreatedAfter), CreatedBefore: Millis(f.CreatedBefore), ResponseStatus: f.ResponseStatus, Q: f.Q,
	})
	if err != nil {
		return "", fmt.Errorf("encode job filter: %w", err)
	}
	return string(b), nil
}

// DecodeFilter reads a filter written by EncodeFilter.
func DecodeFilter(s string) (domain.JobFilter, error) {
	var in filterJSON
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return domain.JobFilter{}, fmt.Errorf("decode job filter: %w", err)
	}
	return domain.JobFilter{
		Statuses: in.Statuses, Tenant: in.Tenant, UserID: in.UserID, Destination: domain.UpstreamKey(in.Destination),
		PoolID: in.PoolID, CreatedAfter: FromMillis(in.CreatedAfter), CreatedBefore: FromMillis(in.CreatedBefore),
		ResponseStatus: in.ResponseStatus, Q: in.Q,
	}, nil
}
