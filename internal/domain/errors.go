package domain

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Code classifies an error so that every inbound adapter can map it onto its
// own protocol (an HTTP status, an MCP tool error, an A2A task state) from one
// table instead of guessing from message text.
type Code string

const (
	CodeInvalid     Code = "invalid"      // the caller sent something wrong; fix the request
	CodeNotFound    Code = "not_found"    // no such job (or it expired)
	CodeConflict    Code = "conflict"     // the request is valid but the job's state forbids it
	CodeTooLarge    Code = "too_large"    // a size limit was exceeded
	CodeRejected    Code = "rejected"     // admission control shed the request; retry later
	CodeUnavailable Code = "unavailable"  // a dependency (the store) is down; retry later
	CodeInternal    Code = "internal"     // a bug or an unexpected failure
	CodeForbidden   Code = "forbidden"    // authenticated but not allowed
	CodeUnauth      Code = "unauthorized" // missing or wrong credentials
)

// Error is a domain error with a machine-readable code and a message written
// for the caller. Field names the offending request field when there is one.
type Error struct {
	Code    Code
	Field   string
	Message string
	Err     error // optional cause, never shown to callers
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Sentinel errors. Compare with errors.Is.
var (
	// ErrNotFound is returned when a job does not exist or has expired.
	ErrNotFound = &Error{Code: CodeNotFound, Message: "job not found"}
	// ErrClosed is returned by components used after Close/Stop.
	ErrClosed = &Error{Code: CodeUnavailable, Message: "aquifer is shutting down"}
)

// Invalid returns a CodeInvalid error about field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Unavailable wraps a dependency failure (for example the store) so adapters
// answer "try again later" instead of "your request was wrong".
func Unavailable(msg string, err error) *Error {
	return &Error{Code: CodeUnavailable, Message: msg, Err: err}
}

// StoreFailure classifies an error from the store for the caller: domain
// errors and cancellation pass through; anything else means the store could
// not do the work and is wrapped as CodeUnavailable, "<what> failed".
func StoreFailure(what string, err error) error {
	var de *Error
	if errors.As(err, &de) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return Unavailable(what+" failed", err)
}

// coded is implemented by every domain error type.
type coded interface {
	error
	code() Code
	public() string
}

func (e *Error) code() Code     { return e.Code }
func (e *Error) public() string { return e.Message }

// CodeOf returns the Code of err, or CodeInternal for errors that carry none.
func CodeOf(err error) Code {
	var c coded
	if errors.As(err, &c) {
		return c.code()
	}
	return CodeInternal
}

// PublicMessage returns the text that may be shown to a caller: the domain
// message for domain errors, a generic one for anything else (internal details
// stay in the logs).
func PublicMessage(err error) string {
	var c coded
	if errors.As(err, &c) {
		return c.public()
	}
	return "internal error"
}

// Admission limits (BEHAVIOR.md §16).
const (
	LimitMemory = "memory"  // process memory, in MiB
	LimitDBSize = "db_size" // store size, in bytes
)

// RejectedError is admission control shedding a new job: a limit is
// exceeded. Nothing was stored. Callers should retry after RetryAfter.
type RejectedError struct {
	Limit      string // LimitMemory or LimitDBSize
	Max        int64  // the configured limit (MiB for memory, bytes for DB size)
	Current    int64  // the measured value, same unit
	RetryAfter time.Duration
}

// Error says which limit shed the job: "admission rejected: memory at 431
// exceeds limit 400", or, for a count that may reach its limit but not pass
// it (a tenant's quota), "admission rejected: tenant_quota reached limit 2".
func (e *RejectedError) Error() string {
	if e.Current <= e.Max {
		return fmt.Sprintf("admission rejected: %s reached limit %d", e.Limit, e.Max)
	}
	return fmt.Sprintf("admission rejected: %s at %d exceeds limit %d", e.Limit, e.Current, e.Max)
}

func (e *RejectedError) code() Code     { return CodeRejected }
func (e *RejectedError) public() string { return e.Error() }
