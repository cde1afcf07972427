package domain

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Priority orders jobs inside one queue: high before normal before low,
// first in first out inside one priority. The zero value is normal.
type Priority int8

const (
	PriorityLow    Priority = -1
	PriorityNormal Priority = 0
	PriorityHigh   Priority = 1
)

// Priorities lists every priority, high first: the order of Class.
var Priorities = [3]Priority{PriorityHigh, PriorityNormal, PriorityLow}

// Class is p's index in Priorities (0 high, 1 normal, 2 low).
func (p Priority) Class() int { return 1 - int(max(min(p, PriorityHigh), PriorityLow)) }

// String is p's wire name.
func (p Priority) String() string {
	switch p {
	case PriorityHigh:
		return "high"
	case PriorityLow:
		return "low"
	}
	return "normal"
}

// Valid reports whether p is one of the three priorities.
func (p Priority) Valid() bool { return p >= PriorityLow && p <= PriorityHigh }

// ParsePriority reads a priority's wire name; "" is normal.
func ParsePriority(field, s string) (Priority, error) {
	switch s {
	case "", "normal":
		return PriorityNormal, nil
	case "high":
		return PriorityHigh, nil
	case "low":
		return PriorityLow, nil
	}
	return 0, Invalid(field, "%s must be \"high\", \"normal\" or \"low\"", field)
}

// RetryOptions is a job's own retry policy for its dispatch; a zero field
// means the server's default.
type RetryOptions struct {
	MaxAttempts int           // attempts in all, the first included
	Backoff     time.Duration // the wait after the first failed attempt, doubling after each further one
	MaxBackoff  time.Duration // the longest wait between two attempts
}

// Delay is the wait before the attempt after attempt n (1-based) under this
// policy: Backoff doubled n-1 times, at most MaxBackoff. It is only
// meaningful when Backoff is set.
func (r RetryOptions) Delay(n int) time.Duration {
	d := r.Backoff
	for i := 1; i < n && d < r.MaxBackoff; i++ {
		d *= 2
	}
	if r.MaxBackoff > 0 {
		d = min(d, r.MaxBackoff)
	}
	return d
}

// JobOptions are what a caller may say about when and how a job runs. The
// zero value is today's default: now, normal priority, the server's retry
// policy and request timeout, no deadline, no trace.
type JobOptions struct {
	// NotBefore is when the job becomes due; zero or past: at once. A job
	// whose NotBefore is still ahead is scheduled: durable, but in no
	// lane until it is due.
	NotBefore time.Time
	// Deadline is the latest time the job may be dispatched; a job still
	// waiting then fails with ReasonDeadlineExceeded. Zero: none.
	Deadline time.Time
	Priority Priority
	Retry    RetryOptions
	// Timeout bounds each outbound attempt of the job's request; zero:
	// the server's request timeout.
	Timeout time.Duration
	// TraceParent and TraceState are the W3C Trace Context the submitter
	// sent, kept so the dispatched request and the webhook continue its
	// trace.
	TraceParent string
	TraceState  string
}

// Plain reports whether o holds nothing beyond the indexed fields
// (NotBefore, Deadline, Priority): the stores skip encoding the rest then.
func (o *JobOptions) Plain() bool {
	return o.Retry == (RetryOptions{}) && o.Timeout == 0 && o.TraceParent == "" && o.TraceState == ""
}

// ReasonDeadlineExceeded is the Result.Reason of a job that was not
// dispatched by its deadline (its status is failed).
const ReasonDeadlineExceeded = "deadline exceeded"

// Scheduled reports whether the job waits for its NotBefore: queued, and
// not yet in any lane.
func (j *Job) Scheduled() bool {
	return j.Status == StatusQueued && j.ReadyQueue == "" && !j.NotBefore.IsZero()
}

// DueAt is when the job's current phase became (or becomes) due: its
// NotBefore when it has one later than its submission, else PhaseStart.
func (j *Job) DueAt() time.Time {
	if j.Phase() == PhaseDispatch && j.NotBefore.After(j.CreatedAt) {
		return j.NotBefore
	}
	return j.PhaseStart()
}

// PastDeadline reports whether the job still waits for dispatch after its
// deadline.
func (j *Job) PastDeadline(now time.Time) bool {
	return !j.Deadline.IsZero() && !j.Status.Terminal() && !now.Before(j.Deadline)
}

// OptionsRequest is the caller's job options as sent, before they are
// checked against the server's bounds and resolved against the submission
// time. Pointers are nil when the caller left the field out.
type OptionsRequest struct {
	NotBefore      time.Time // zero: not given (front doors parse ParseTime)
	DelaySeconds   *float64
	Deadline       time.Time
	MaxWaitSeconds *float64
	Priority       string
	Retry          *RetryRequest
	TimeoutSeconds *float64
	TraceParent    string
	TraceState     string
}

// RetryRequest is the wire form of RetryOptions.
type RetryRequest struct {
	MaxAttempts       *int
	BackoffSeconds    *float64
	MaxBackoffSeconds *float64
}

// OptionBounds are the server's limits on job options.
type OptionBounds struct {
	MaxDelay    time.Duration // how far ahead a job may be scheduled
	MaxAttempts int
	MaxBackoff  time.Duration
	MaxTimeout  time.Duration
	// DefaultMaxBackoff caps a job's backoff when it sets backoff_seconds
	// but no max_backoff_seconds.
	DefaultMaxBackoff time.Duration
}

// DefaultOptionBounds are the bounds unless the operator sets others.
var DefaultOptionBounds = OptionBounds{
	MaxDelay:          30 * 24 * time.Hour,
	MaxAttempts:       25,
	MaxBackoff:        6 * time.Hour,
	MaxTimeout:        10 * time.Minute,
	DefaultMaxBackoff: 5 * time.Minute,
}

// WithDefaults fills b's zero fields from DefaultOptionBounds.
func (b OptionBounds) WithDefaults() OptionBounds {
	d := DefaultOptionBounds
	if b.MaxDelay <= 0 {
		b.MaxDelay = d.MaxDelay
	}
	if b.MaxAttempts <= 0 {
		b.MaxAttempts = d.MaxAttempts
	}
	if b.MaxBackoff <= 0 {
		b.MaxBackoff = d.MaxBackoff
	}
	if b.MaxTimeout <= 0 {
		b.MaxTimeout = d.MaxTimeout
	}
	if b.DefaultMaxBackoff <= 0 {
		b.DefaultMaxBackoff = min(d.DefaultMaxBackoff, b.MaxBackoff)
	}
	return b
}

// Resolve checks the options against b and turns them into JobOptions for
// a job submitted at now. Errors are *Error values naming the field.
func (o *OptionsRequest) Resolve(now time.Time, b OptionBounds) (JobOptions, error) {
	b = b.WithDefaults()
	var out JobOptions
	due := now
	switch {
	case !o.NotBefore.IsZero() && o.DelaySeconds != nil:
		return out, Invalid("delay_seconds", "not_before and delay_seconds are mutually exclusive — give one")
	case o.DelaySeconds != nil:
		d, err := seconds("delay_seconds", *o.DelaySeconds, 0, b.MaxDelay)
		if err != nil {
			return out, err
		}
		if d > 0 {
			out.NotBefore = now.Add(d).Truncate(time.Millisecond)
		}
	case !o.NotBefore.IsZero():
		if o.NotBefore.Sub(now) > b.MaxDelay {
			return out, Invalid("not_before", "not_before is more than %s ahead (the server's limit)", b.MaxDelay)
		}
		if o.NotBefore.After(now) {
			out.NotBefore = o.NotBefore.Truncate(time.Millisecond)
		}
	}
	if !out.NotBefore.IsZero() {
		due = out.NotBefore
	}
	switch {
	case !o.Deadline.IsZero() && o.MaxWaitSeconds != nil:
		return out, Invalid("max_wait_seconds", "deadline and max_wait_seconds are mutually exclusive — give one")
	case o.MaxWaitSeconds != nil:
		d, err := seconds("max_wait_seconds", *o.MaxWaitSeconds, time.Millisecond, b.MaxDelay)
		if err != nil {
			return out, err
		}
		out.Deadline = due.Add(d).Truncate(time.Millisecond)
	case !o.Deadline.IsZero():
		if !o.Deadline.After(now) {
			return out, Invalid("deadline", "deadline is in the past")
		}
		if !o.Deadline.After(due) {
			return out, Invalid("deadline", "deadline is not after not_before: the job could never run")
		}
		if o.Deadline.Sub(now) > b.MaxDelay+b.MaxDelay {
			return out, Invalid("deadline", "deadline is more than %s ahead (the server's limit)", 2*b.MaxDelay)
		}
		out.Deadline = o.Deadline.Truncate(time.Millisecond)
	}
	p, err := ParsePriority("priority", o.Priority)
	if err != nil {
		return out, err
	}
	out.Priority = p
	if r := o.Retry; r != nil {
		if r.MaxAttempts != nil {
			if *r.MaxAttempts < 1 || *r.MaxAttempts > b.MaxAttempts {
				return out, Invalid("retry.max_attempts", "retry.max_attempts must be between 1 and %d", b.MaxAttempts)
			}
			out.Retry.MaxAttempts = *r.MaxAttempts
		}
		if r.BackoffSeconds != nil {
			if out.Retry.Backoff, err = seconds("retry.backoff_seconds", *r.BackoffSeconds, time.Millisecond, b.MaxBackoff); err != nil {
				return out, err
			}
		}
		if r.MaxBackoffSeconds != nil {
			if r.BackoffSeconds == nil {
				return out, Invalid("retry.max_backoff_seconds", "retry.max_backoff_seconds needs retry.backoff_seconds")
			}
			if out.Retry.MaxBackoff, err = seconds("retry.max_backoff_seconds", *r.MaxBackoffSeconds, time.Millisecond, b.MaxBackoff); err != nil {
				return out, err
			}
			if out.Retry.MaxBackoff < out.Retry.Backoff {
				return out, Invalid("retry.max_backoff_seconds", "retry.max_backoff_seconds is less than retry.backoff_seconds")
			}
		} else if out.Retry.Backoff > 0 {
			out.Retry.MaxBackoff = max(out.Retry.Backoff, b.DefaultMaxBackoff)
		}
	}
	if o.TimeoutSeconds != nil {
		if out.Timeout, err = seconds("timeout_seconds", *o.TimeoutSeconds, time.Millisecond, b.MaxTimeout); err != nil {
			return out, err
		}
	}
	if o.TraceParent != "" {
		if !ValidTraceParent(o.TraceParent) {
			return out, Invalid("traceparent", "traceparent is not a valid W3C traceparent (version-trace_id-parent_id-flags)")
		}
		out.TraceParent = strings.ToLower(o.TraceParent)
		if o.TraceState != "" {
			if err := checkTraceState(o.TraceState); err != nil {
				return out, err
			}
			out.TraceState = o.TraceState
		}
	}
	return out, nil
}

// seconds turns a number of seconds into a duration within [lo, hi].
func seconds(field string, v float64, lo, hi time.Duration) (time.Duration, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, Invalid(field, "%s must be a number of seconds ≥ 0", field)
	}
	if v > hi.Seconds() {
		return 0, Invalid(field, "%s must be at most %s", field, strconv.FormatFloat(hi.Seconds(), 'f', -1, 64))
	}
	d := time.Duration(v * float64(time.Second))
	if d < lo {
		return 0, Invalid(field, "%s must be at least %s", field, strconv.FormatFloat(lo.Seconds(), 'f', -1, 64))
	}
	return d, nil
}

// ParseTime reads a point in time as callers give one: an RFC 3339
// timestamp, or a Unix time in milliseconds (digits only).
func ParseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, Invalid(field, "%s is empty", field)
	}
	if allDigits(s) {
		if len(s) > 15 {
			return time.Time{}, Invalid(field, "%s is out of range", field)
		}
		ms, _ := strconv.ParseInt(s, 10, 64)
		if ms == 0 {
			return time.Time{}, Invalid(field, "%s must be after the Unix epoch", field)
		}
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, Invalid(field, "%s must be an RFC 3339 time (2026-12-01T15:04:05Z) or Unix milliseconds", field)
	}
	if t.UnixMilli() <= 0 {
		return time.Time{}, Invalid(field, "%s must be after the Unix epoch", field)
	}
	return t, nil
}

// ValidTraceParent reports whether s is a W3C traceparent this version of
// the spec defines (version 00), or a later version's that starts the same
// way: 2 hex version (not ff), 32 hex trace id (not all zero), 16 hex parent
// id (not all zero), 2 hex flags.
func ValidTraceParent(s string) bool {
	if len(s) < 55 || (len(s) > 55 && (s[:2] == "00" || s[55] != '-')) {
		return false
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	ver, trace, parent, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	if !lowerHex(ver) || ver == "ff" || !lowerHex(trace) || !lowerHex(parent) || !lowerHex(flags) {
		return false
	}
	return strings.Trim(trace, "0") != "" && strings.Trim(parent, "0") != ""
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// MaxTraceStateLen is the longest tracestate kept (W3C: 32 members of at
// most 256 characters would be more; vendors keep 512).
const MaxTraceStateLen = 512

func checkTraceState(s string) error {
	if len(s) > MaxTraceStateLen {
		return Invalid("tracestate", "tracestate is longer than %d bytes", MaxTraceStateLen)
	}
	members := strings.Split(s, ",")
	if len(members) > 32 {
		return Invalid("tracestate", "tracestate has more than 32 members")
	}
	for _, m := range members {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		k, v, ok := strings.Cut(m, "=")
		if !ok || k == "" || v == "" {
			return Invalid("tracestate", "tracestate member %q is not key=value", truncate(m, 40))
		}
		for i := 0; i < len(m); i++ {
			if c := m[i]; c < 0x20 || c > 0x7e {
				return Invalid("tracestate", "tracestate contains a character outside printable ASCII")
			}
		}
	}
	return nil
}

// FormatWhen is t as the API shows a time: RFC 3339 in UTC with
// milliseconds, "" for the zero time.
func FormatWhen(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// String describes the options for logs.
func (o JobOptions) String() string {
	return fmt.Sprintf("not_before=%s deadline=%s priority=%s", FormatWhen(o.NotBefore), FormatWhen(o.Deadline), o.Priority)
}
