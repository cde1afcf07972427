package storekit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// attemptJSON is one attempt of a job's history as the stores keep it:
// times in Unix milliseconds like every stored time, the duration in
// microseconds (attempts often take less than a millisecond on a local
// network), and empty fields left out, so ten attempts stay well under a
// kilobyte.
type attemptJSON struct {
	At     int64  `json:"at"`
	Micros int64  `json:"us"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	Signal string `json:"signal,omitempty"`
	Member string `json:"member,omitempty"`
}

// EncodeHistory is a job's attempt history as the stores keep it: a JSON
// array, "" when there is none.
func EncodeHistory(h []domain.Attempt) (string, error) {
	if len(h) == 0 {
		return "", nil
	}
	out := make([]attemptJSON, len(h))
	for i, a := range h {
		out[i] = attemptJSON{At: Millis(a.At), Micros: a.Duration.Microseconds(), Status: a.Status,
			Error: a.Error, Signal: a.Signal, Member: a.Member}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("encode history: %w", err)
	}
	return string(b), nil
}

// DecodeHistory rebuilds a history EncodeHistory made; nil for "".
func DecodeHistory(s string) ([]domain.Attempt, error) {
	if s == "" {
		return nil, nil
	}
	var in []attemptJSON
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return nil, fmt.Errorf("decode history: %w", err)
	}
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]domain.Attempt, len(in))
	for i, a := range in {
		out[i] = domain.Attempt{At: FromMillis(a.At), Duration: time.Duration(a.Micros) * time.Microsecond,
			Status: a.Status, Error: a.Error, Signal: a.Signal, Member: a.Member}
	}
	return out, nil
}
