package aquifer

import (
	"errors"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Error codes returned by ErrorCode. They are stable: an adapter can map
// them onto its own protocol (the HTTP API maps invalid to 400, not_found to
// 404, conflict to 409, too_large to 413, rejected to 429, unavailable to
// 503, forbidden to 403, unauthorized to 401 and internal to 500).
const (
	CodeInvalid      = string(domain.CodeInvalid)     // the request is wrong (a destination rule refuses it, too); ErrorField names the field
	CodeNotFound     = string(domain.CodeNotFound)    // no such job, or it expired
	CodeConflict     = string(domain.CodeConflict)    // valid, but the job's state forbids it (cancel after dispatch)
	CodeTooLarge     = string(domain.CodeTooLarge)    // a size limit was exceeded
	CodeRejected     = string(domain.CodeRejected)    // admission control or a tenant quota shed it; see RetryAfter
	CodeUnavailable  = string(domain.CodeUnavailable) // the store is unreachable, or Aquifer is stopping; retry later
	CodeForbidden    = string(domain.CodeForbidden)   // authenticated, but not allowed
	CodeUnauthorized = string(domain.CodeUnauth)      // missing or wrong credentials
	CodeInternal     = string(domain.CodeInternal)    // anything else: a bug or an unexpected failure
)

// Sentinel errors; compare with errors.Is.
var (
	// ErrNotFound: the job does not exist, has expired, or belongs to
	// another tenant. A Store returns it from Get, Lookup and the other
	// methods whose contract names it.
	ErrNotFound error = domain.ErrNotFound
	// ErrClosed: Aquifer (or a store) was used after it stopped.
	ErrClosed error = domain.ErrClosed
)

// ErrorCode classifies an error returned by Aquifer as one of the Code…
// constants. Errors Aquifer does not know are CodeInternal; nil is "".
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	return string(domain.CodeOf(err))
}

// ErrorMessage returns the part of err that may be shown to the caller who
// caused it: the message of a classified error, "internal error" for
// anything else (whose details belong in your logs only).
func ErrorMessage(err error) string { return domain.PublicMessage(err) }

// ErrorField names the request field an invalid request was refused for
// ("url", "headers", …), or "" when the error is not about one field.
func ErrorField(err error) string {
	var de *domain.Error
	if errors.As(err, &de) {
		return de.Field
	}
	return ""
}

// IsNotFound reports whether err means the job does not exist (any more).
func IsNotFound(err error) bool { return ErrorCode(err) == CodeNotFound }

// RetryAfter reports how long to wait before submitting again when err is a
// rejection by admission control or a tenant quota (CodeRejected).
func RetryAfter(err error) (time.Duration, bool) {
	var rej *domain.RejectedError
	if errors.As(err, &rej) {
		return rej.RetryAfter, true
	}
	return 0, false
}
