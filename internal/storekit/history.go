package storekit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// attemptJSON is one attempt of a job's history as the stores keep it: a
// JSON object with short keys and empty fields left out, since a history is
// rewritten with every attempt and kept for the job's life.
type attemptJSON struct {
	At       int64  `json:"at"`               // Unix milliseconds, like every stored time
	Duration int64  `json:"dur_us,omitempty"` // microseconds
	Status   int    `json:"status,omitempty"`
	Error    string `json:"error,omitempty"`
	Signal   string `json:"signal,omitempty"`
	Member   string `json:"member,omitempty"`
}

// EncodeHistory is a job's attempt history as the stores keep it: a JSON
// array, oldest attempt first, or "" when there are no attempts (a job that
// was never tried stores nothing).
func EncodeHistory(h []domain.Attempt) (string, error) {
	if len(h) == 0 {
		return "", nil
	}
	out := make([]attemptJSON, len(h))
	for i, a := range h {
		out[i] = attemptJSON{At: Millis(a.At), Duration: a.Duration.Microseconds(), Status: a.Status,
			Error: a.Error, Signal: a.Signal, Member: a.Member}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("encode attempt history: %w", err)
	}
	return string(b), nil
}

// DecodeHistory reads a history written by EncodeHistory; "" is none (nil).
func DecodeHistory(s string) ([]domain.Attempt, error) {
	if s == "" {
		return nil, nil
	}
	var in []attemptJSON
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return nil, fmt.Errorf("decode attempt history: %w", err)
	}
	if len(in) == 0 {
		return nil, nil
	}
	h := make([]domain.Attempt, len(in))
	for i, a := range in {
		h[i] = domain.Attempt{At: FromMillis(a.At), Duration: time.Duration(a.Duration) * time.Microsecond, Status: a.Status,
			Error: a.Error, Signal: a.Signal, Member: a.Member}
	}
	return h, nil
}
