package storekit

import (
	"encoding/json"
	"fmt"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// filterJSON is a job filter as the stores keep it: times as Unix
// milliseconds (0 for none), like every time they store.
type filterJSON struct {
	Statuses       []domain.Status `json:"statuses,omitempty"`
	Tenant         string          `json:"tenant,omitempty"`
	UserID         string          `json:"user_id,omitempty"`
	Destination    string          `json:"destination,omitempty"`
	PoolID         string          `json:"pool_id,omitempty"`
	CreatedAfter   int64           `json:"created_after,omitempty"`
	CreatedBefore  int64           `json:"created_before,omitempty"`
	ResponseStatus int             `json:"response_status,omitempty"`
	Q              string          `json:"q,omitempty"`
}

func toFilterJSON(f *domain.JobFilter) filterJSON {
	return filterJSON{Statuses: f.Statuses, Tenant: f.Tenant, UserID: f.UserID, Destination: string(f.Destination),
		PoolID: f.PoolID, CreatedAfter: Millis(f.CreatedAfter), CreatedBefore: Millis(f.CreatedBefore),
		ResponseStatus: f.ResponseStatus, Q: f.Q}
}

func (f *filterJSON) filter() domain.JobFilter {
	return domain.JobFilter{Statuses: f.Statuses, Tenant: f.Tenant, UserID: f.UserID,
		Destination: domain.UpstreamKey(f.Destination), PoolID: f.PoolID, CreatedAfter: FromMillis(f.CreatedAfter),
		CreatedBefore: FromMillis(f.CreatedBefore), ResponseStatus: f.ResponseStatus, Q: f.Q}
}

// EncodeFilter is a job filter as a JSON object, for a store that keeps a
// bulk operation's filter in a column of its own.
func EncodeFilter(f *domain.JobFilter) ([]byte, error) {
	b, err := json.Marshal(toFilterJSON(f))
	if err != nil {
		return nil, fmt.Errorf("encode job filter: %w", err)
	}
	return b, nil
}

// DecodeFilter rebuilds a job filter from EncodeFilter's JSON.
func DecodeFilter(b []byte) (domain.JobFilter, error) {
	var f filterJSON
	if err := json.Unmarshal(b, &f); err != nil {
		return domain.JobFilter{}, fmt.Errorf("decode job filter: %w", err)
	}
	return f.filter(), nil
}

// operationJSON is a whole bulk operation as one JSON object.
type operationJSON struct {
	ID        string                `json:"id"`
	Kind      domain.OperationKind  `json:"kind"`
	Filter    filterJSON            `json:"filter"`
	State     domain.OperationState `json:"state"`
	Cursor    int64                 `json:"cursor"`
	Total     int64                 `json:"total"`
	Processed int64                 `json:"processed"`
	Changed   int64                 `json:"changed"`
	Skipped   int64                 `json:"skipped"`
	Error     string                `json:"error,omitempty"`
	CreatedAt int64                 `json:"created_at"`
	UpdatedAt int64                 `json:"updated_at"`
}

// EncodeOperation is a bulk operation as one JSON object, for a store that
// keeps it as a single value (the pebble store).
func EncodeOperation(op *domain.Operation) ([]byte, error) {
	b, err := json.Marshal(operationJSON{ID: op.ID, Kind: op.Kind, Filter: toFilterJSON(&op.Filter), State: op.State,
		Cursor: op.Cursor, Total: op.Total, Processed: op.Processed, Changed: op.Changed, Skipped: op.Skipped,
		Error: op.Error, CreatedAt: Millis(op.CreatedAt), UpdatedAt: Millis(op.UpdatedAt)})
	if err != nil {
		return nil, fmt.Errorf("encode operation %s: %w", op.ID, err)
	}
	return b, nil
}

// DecodeOperation rebuilds a bulk operation from EncodeOperation's JSON.
func DecodeOperation(b []byte) (*domain.Operation, error) {
	var o operationJSON
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, fmt.Errorf("decode operation: %w", err)
	}
	return &domain.Operation{ID: o.ID, Kind: o.Kind, Filter: o.Filter.filter(), State: o.State, Cursor: o.Cursor,
		Total: o.Total, Processed: o.Processed, Changed: o.Changed, Skipped: o.Skipped, Error: o.Error,
		CreatedAt: FromMillis(o.CreatedAt), UpdatedAt: FromMillis(o.UpdatedAt)}, nil
}
