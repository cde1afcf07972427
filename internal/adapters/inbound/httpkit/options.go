package httpkit

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// OptionsJSON is the wire shape of the optional job options, the same on
// POST /jobs, every item of POST /jobs/batch, the MCP enqueue tools and A2A
// data parts. A field left out (or null) is not given; the application
// checks the values (domain.OptionsRequest.Resolve). The jsonschema tags
// describe the fields to agents (MCP input schemas).
type OptionsJSON struct {
	NotBefore      TimeJSON   `json:"not_before,omitempty" jsonschema:"Do not send the job before this time: an RFC 3339 timestamp (2026-12-01T15:04:05Z) or Unix milliseconds. The job is stored at once (status queued) and enters its destination's queue when due. Exclusive with delay_seconds."`
	DelaySeconds   *float64   `json:"delay_seconds,omitempty" jsonschema:"Do not send the job before this many seconds from now. Exclusive with not_before."`
	Deadline       TimeJSON   `json:"deadline,omitempty" jsonschema:"Fail the job (reason deadline exceeded) if it has not been sent by this time: RFC 3339 or Unix milliseconds. Exclusive with max_wait_seconds."`
	MaxWaitSeconds *float64   `json:"max_wait_seconds,omitempty" jsonschema:"Fail the job (reason deadline exceeded) if it has not been sent this many seconds after it became due. Exclusive with deadline."`
	Priority       string     `json:"priority,omitempty" jsonschema:"high, normal (the default) or low: the order of jobs waiting for the same destination; a waiting job is never passed for longer than the server's priority aging."`
	Retry          *RetryJSON `json:"retry,omitempty" jsonschema:"The job's own retry policy for sending its request (webhook deliveries keep the server's)."`
	TimeoutSeconds *float64   `json:"timeout_seconds,omitempty" jsonschema:"Limit on each attempt to send the request, in seconds (at most 600 by default)."`
	TraceParent    string     `json:"traceparent,omitempty" jsonschema:"W3C traceparent to continue: the sent request and the webhook carry a child of it."`
	TraceState     string     `json:"tracestate,omitempty" jsonschema:"W3C tracestate passed on with traceparent."`
}

// RetryJSON is the wire shape of a job's own retry policy.
type RetryJSON struct {
	MaxAttempts       *int     `json:"max_attempts,omitempty" jsonschema:"Attempts in all, the first included (1 to 25 by default)."`
	BackoffSeconds    *float64 `json:"backoff_seconds,omitempty" jsonschema:"Wait after the first failed attempt, doubled after each further one. Absent: the server's backoff."`
	MaxBackoffSeconds *float64 `json:"max_backoff_seconds,omitempty" jsonschema:"The longest wait between attempts (default 300 when backoff_seconds is given). Needs backoff_seconds."`
}

// TimeJSON is a point in time as a caller sends one, kept as sent: a JSON
// string (RFC 3339, or Unix milliseconds in digits) or a JSON number (Unix
// milliseconds). Decoding checks only the JSON kind, so a malformed time is
// reported by Options naming its field, as the other invalid values are;
// "" and null are "not given".
type TimeJSON string

// timeJSONType is the type TimeJSON's type errors name (TypeErrorMessage).
var timeJSONType = reflect.TypeFor[TimeJSON]()

// UnmarshalJSON implements json.Unmarshaler.
func (t *TimeJSON) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return &json.UnmarshalTypeError{Value: "nothing", Type: timeJSONType}
	}
	switch c := b[0]; {
	case c == 'n': // null: not given
		return nil
	case c == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*t = TimeJSON(s)
		return nil
	case c == '-' || c >= '0' && c <= '9':
		*t = TimeJSON(b)
		return nil
	case c == '{':
		return &json.UnmarshalTypeError{Value: "object", Type: timeJSONType}
	case c == '[':
		return &json.UnmarshalTypeError{Value: "array", Type: timeJSONType}
	}
	return &json.UnmarshalTypeError{Value: "bool", Type: timeJSONType}
}

// MarshalJSON writes the time as it was sent: digits as a number, anything
// else as a string.
func (t TimeJSON) MarshalJSON() ([]byte, error) {
	if t != "" && allDigits(string(t)) {
		return []byte(t), nil
	}
	return json.Marshal(string(t))
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// parse reads the time (domain.ParseTime); "" is the zero time.
func (t TimeJSON) parse(field string) (time.Time, error) {
	if t == "" {
		return time.Time{}, nil
	}
	return domain.ParseTime(field, string(t))
}

// Options is the options as the application takes them. A time that cannot
// be read is a *domain.Error naming its field (not_before, deadline).
func (o *OptionsJSON) Options() (domain.OptionsRequest, error) {
	out := domain.OptionsRequest{
		DelaySeconds: o.DelaySeconds, MaxWaitSeconds: o.MaxWaitSeconds, Priority: o.Priority,
		TimeoutSeconds: o.TimeoutSeconds, TraceParent: o.TraceParent, TraceState: o.TraceState,
	}
	var err error
	if out.NotBefore, err = o.NotBefore.parse("not_before"); err != nil {
		return domain.OptionsRequest{}, err
	}
	if out.Deadline, err = o.Deadline.parse("deadline"); err != nil {
		return domain.OptionsRequest{}, err
	}
	if r := o.Retry; r != nil {
		out.Retry = &domain.RetryRequest{MaxAttempts: r.MaxAttempts, BackoffSeconds: r.BackoffSeconds,
			MaxBackoffSeconds: r.MaxBackoffSeconds}
	}
	return out, nil
}

// TraceHeaders reads the W3C Trace Context request headers. As the
// recommendation asks of a receiver, a traceparent it cannot parse (or one
// given twice) is ignored with its tracestate — the job then starts a trace
// of its own instead of being refused for a header a proxy on the way may
// have set — and a tracestate it cannot parse is dropped on its own.
// Several tracestate lines are one list.
func TraceHeaders(h http.Header) (parent, state string) {
	tp := h.Values("Traceparent")
	if len(tp) != 1 || !domain.ValidTraceParent(tp[0]) {
		return "", ""
	}
	parent, state = tp[0], strings.Join(h.Values("Tracestate"), ",")
	if state != "" {
		// Resolve with nothing else set checks the trace context alone.
		probe := domain.OptionsRequest{TraceParent: parent, TraceState: state}
		if _, err := probe.Resolve(time.Time{}, domain.OptionBounds{}); err != nil {
			state = ""
		}
	}
	return parent, state
}
