package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// statusOf is the one table that maps domain error codes to HTTP statuses.
var statusOf = map[domain.Code]int{
	domain.CodeInvalid:     http.StatusBadRequest,
	domain.CodeUnauth:      http.StatusUnauthorized,
	domain.CodeForbidden:   http.StatusForbidden,
	domain.CodeNotFound:    http.StatusNotFound,
	domain.CodeConflict:    http.StatusConflict,
	domain.CodeTooLarge:    http.StatusRequestEntityTooLarge,
	domain.CodeRejected:    http.StatusTooManyRequests,
	domain.CodeInternal:    http.StatusInternalServerError,
	domain.CodeUnavailable: http.StatusServiceUnavailable,
}

// errorBody is the JSON shape of every error.
type errorBody struct {
	Error      string `json:"error"`
	Field      string `json:"field,omitempty"`
	LimitBytes int64  `json:"limit_bytes,omitempty"`
}

// rejectedBody is the 429 of admission control (BEHAVIOR.md §4.3).
type rejectedBody struct {
	Error       string `json:"error"`
	LimitReason string `json:"limit_reason"`
	Limit       int64  `json:"limit"`
	Current     int64  `json:"current"`
}

// writeDomainError answers with the status for err's code. Internal errors
// are logged here, at the edge, and shown to the caller only generically.
func (h *Handler) writeDomainError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away; nobody to answer
	}
	var rej *domain.RejectedError
	if errors.As(err, &rej) {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(rej.RetryAfter.Seconds())), 10))
		writeJSON(w, http.StatusTooManyRequests, rejectedBody{Error: rej.Error(), LimitReason: rej.Limit, Limit: rej.Max, Current: rej.Current})
		return
	}
	code := domain.CodeOf(err)
	status, ok := statusOf[code]
	if !ok {
		status = http.StatusInternalServerError
	}
	if status >= 500 {
		h.log.Error("request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
	}
	body := errorBody{Error: domain.PublicMessage(err)}
	var de *domain.Error
	if errors.As(err, &de) {
		body.Field = de.Field
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	writeJSON(w, status, body)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// marshal encodes v as compact JSON without escaping <, > and & (bodies are
// shown as sent, not HTML-escaped).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}
