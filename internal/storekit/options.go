package storekit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// optionsJSON is how the stores keep the job options no query looks at:
// the retry policy, the timeout and the trace context. NotBefore, Deadline
// and Priority have columns (or index keys) of their own.
type optionsJSON struct {
	MaxAttempts  int    `json:"a,omitempty"`
	BackoffMS    int64  `json:"b,omitempty"`
	MaxBackoffMS int64  `json:"mb,omitempty"`
	TimeoutMS    int64  `json:"t,omitempty"`
	TraceParent  string `json:"tp,omitempty"`
	TraceState   string `json:"ts,omitempty"`
}

// EncodeOptions is the unindexed part of o as the stores keep it: a small
// JSON object, "" when o has none (most jobs).
func EncodeOptions(o *domain.JobOptions) (string, error) {
	if o.Plain() {
		return "", nil
	}
	b, err := json.Marshal(optionsJSON{
		MaxAttempts: o.Retry.MaxAttempts, BackoffMS: o.Retry.Backoff.Milliseconds(), MaxBackoffMS: o.Retry.MaxBackoff.Milliseconds(),
		TimeoutMS: o.Timeout.Milliseconds(), TraceParent: o.TraceParent, TraceState: o.TraceState,
	})
	if err != nil {
		return "", fmt.Errorf("encode job options: %w", err)
	}
	return string(b), nil
}

// DecodeOptions reads what EncodeOptions wrote into o; "" leaves o as it is.
func DecodeOptions(s string, o *domain.JobOptions) error {
	if s == "" {
		return nil
	}
	var v optionsJSON
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return fmt.Errorf("decode job options: %w", err)
	}
	o.Retry = domain.RetryOptions{MaxAttempts: v.MaxAttempts, Backoff: time.Duration(v.BackoffMS) * time.Millisecond,
		MaxBackoff: time.Duration(v.MaxBackoffMS) * time.Millisecond}
	o.Timeout = time.Duration(v.TimeoutMS) * time.Millisecond
	o.TraceParent, o.TraceState = v.TraceParent, v.TraceState
	return nil
}
