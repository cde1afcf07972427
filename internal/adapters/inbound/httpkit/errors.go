// Package httpkit is the plumbing Aquifer's inbound adapters share (the
// REST API, the edge proxy, MCP and A2A): the JSON error shape and the one
// table mapping domain errors to statuses, request body decoding with clear
// messages, the job request's wire shape and the job view, API-key
// authentication, and job event streams (SSE).
package httpkit

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

// ErrorBody is the JSON shape of every error.
type ErrorBody struct {
	Error      string `json:"error"`
	Field      string `json:"field,omitempty"`
	LimitBytes int64  `json:"limit_bytes,omitempty"`
}

// RejectedBody is the 429 of admission control (BEHAVIOR.md §4.3).
type RejectedBody struct {
	Error       string `json:"error"`
	LimitReason string `json:"limit_reason"`
	Limit       int64  `json:"limit"`
	Current     int64  `json:"current"`
}

// WriteDomainError answers with the status for err's code. Internal errors
// are logged here, at the edge, and shown to the caller only generically.
func WriteDomainError(w http.ResponseWriter, r *http.Request, log *zap.Logger, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away; nobody to answer
	}
	var rej *domain.RejectedError
	if errors.As(err, &rej) {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(rej.RetryAfter.Seconds())), 10))
		WriteJSON(w, http.StatusTooManyRequests, RejectedBody{Error: rej.Error(), LimitReason: rej.Limit, Limit: rej.Max, Current: rej.Current})
		return
	}
	status, body := ErrorResponse(err)
	if status >= 500 {
		log.Error("request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	WriteJSON(w, status, body)
}

// ErrorResponse is the status and body for err's code (admission
// rejections aside: they have RejectedBody). Internal errors show only
// generically; the caller logs them.
func ErrorResponse(err error) (int, ErrorBody) {
	status, ok := statusOf[domain.CodeOf(err)]
	if !ok {
		status = http.StatusInternalServerError
	}
	body := ErrorBody{Error: domain.PublicMessage(err)}
	var de *domain.Error
	var dd *domain.DestinationDeniedError
	switch {
	case errors.As(err, &de):
		body.Field = de.Field
	case errors.As(err, &dd):
		body.Field = dd.Field
	}
	return status, body
}

// WriteError answers {"error": msg} with status.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, ErrorBody{Error: msg})
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// Marshal encodes v as compact JSON without escaping <, > and & (bodies are
// shown as sent, not HTML-escaped).
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}
