package httpkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// JobRequestJSON is the wire shape of POST /jobs. Unknown fields are ignored
// (BEHAVIOR.md §3); wrong types are rejected naming the field.
type JobRequestJSON struct {
	UserID        string            `json:"user_id"`
	IdempotentKey string            `json:"idempotent_key"`
	URL           string            `json:"url"`
	PoolID        string            `json:"pool_id"`
	Method        string            `json:"method"`
	Headers       map[string]string `json:"headers"`
	Body          string            `json:"body"`
	WebhookURL    string            `json:"webhook_url"`

	// OptionsJSON are the optional job options (schedule, deadline,
	// priority, retry policy, timeout, trace context).
	OptionsJSON
}

// EnqueueJSON is the answer to POST /jobs.
type EnqueueJSON struct {
	JobID     string `json:"job_id"`
	Status    string `json:"status"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// Account-queue request headers (BEHAVIOR.md §11.1); the Aqueduct name wins.
const (
	hdrAccountQueue      = "X-Aqueduct-Account-Queue"
	hdrAccountQueueAlias = "X-Aquifer-Account-Queue"
)

// ToDomain is the request as the application takes it, without its job
// options (they need parsing that can fail: see Request); h supplies the
// account-queue header.
func (in *JobRequestJSON) ToDomain(h http.Header) *domain.JobRequest {
	return &domain.JobRequest{
		UserID: in.UserID, IdempotentKey: in.IdempotentKey, URL: in.URL, PoolID: in.PoolID,
		Method: in.Method, Headers: in.Headers, Body: in.Body, WebhookURL: in.WebhookURL,
		AccountQueue: AccountQueueMode(h),
	}
}

// Request is ToDomain with the job options: h supplies the account-queue
// header and, when the body names no traceparent, the W3C trace context
// headers (TraceHeaders). An option that cannot be read (a not_before that
// is no time) is a *domain.Error naming the field; the options' values are
// checked later, by the application.
func (in *JobRequestJSON) Request(h http.Header) (*domain.JobRequest, error) {
	req := in.ToDomain(h)
	o, err := in.Options()
	if err != nil {
		return nil, err
	}
	if o.TraceParent == "" {
		o.TraceParent, o.TraceState = TraceHeaders(h)
	}
	req.Options = o
	return req, nil
}

// Load headers on POST /jobs responses, in both namespaces, so callers can
// autoscale on Aquifer's backlog too (BEHAVIOR.md §13).
var loadHeaderNames = [...][3]string{
	{"X-Aqueduct-Total-Jobs", "X-Aqueduct-Queue-Depth", "X-Aqueduct-Flow-Rate"},
	{"X-Aquifer-Total-Jobs", "X-Aquifer-Queue-Depth", "X-Aquifer-Flow-Rate"},
}

// SetLoadHeaders sets the load headers of l on h.
func SetLoadHeaders(h http.Header, l app.Load) {
	total, depth, rate := l.Texts() // shared read-only: net/http only reads them
	for _, n := range loadHeaderNames {
		h[n[0]], h[n[1]], h[n[2]] = total, depth, rate
	}
}

// AccountQueueMode reads the account-queue request header.
func AccountQueueMode(h http.Header) domain.AccountQueueMode {
	v := h.Get(hdrAccountQueue)
	if v == "" {
		v = h.Get(hdrAccountQueueAlias)
	}
	switch {
	case v == "":
		return domain.AccountQueueUnchanged
	case v == "enabled":
		return domain.AccountQueueEnabled
	default:
		return domain.AccountQueueDisabled
	}
}

// DecodeBody reads one JSON object from the body under limit (0: none). On
// failure it writes the error response (400, or 413 above the limit) and
// returns false.
func DecodeBody(w http.ResponseWriter, r *http.Request, dst any, limit int64) bool {
	if limit > 0 {
		if r.ContentLength > limit {
			WriteTooLarge(w, limit)
			return false
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
	}
	raw, err := readAll(r.Body, r.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			WriteTooLarge(w, limit)
			return false
		}
		WriteError(w, http.StatusBadRequest, "could not read request body")
		return false
	}
	if msg, field := decodeJSON(raw, dst); msg != "" {
		WriteJSON(w, http.StatusBadRequest, ErrorBody{Error: msg, Field: field})
		return false
	}
	return true
}

// readAll reads the body into a buffer sized from Content-Length when the
// client sent one, instead of growing it step by step.
func readAll(r io.Reader, contentLength int64) ([]byte, error) {
	if contentLength <= 0 || contentLength > 64<<20 {
		return io.ReadAll(r)
	}
	buf := make([]byte, contentLength+1) // +1 to see EOF without growing
	n, err := io.ReadFull(r, buf)
	switch err {
	case io.ErrUnexpectedEOF, io.EOF:
		return buf[:n], nil
	case nil:
		// More than Content-Length: let the limiter or ReadAll report it.
		rest, err := io.ReadAll(r)
		return append(buf, rest...), err
	}
	return buf[:n], err
}

// decodeJSON decodes exactly one JSON object into dst and returns a message
// for the caller when it cannot, with the field it is about when there is
// one (a value of the wrong type).
func decodeJSON(raw []byte, dst any) (msg, field string) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return "invalid json: request body is empty", ""
	}
	if trimmed[0] != '{' {
		return "invalid json: expected a JSON object", ""
	}
	if !utf8.Valid(trimmed) {
		// encoding/json would replace the bad bytes with U+FFFD: two
		// different keys could become one, and the caller would never know.
		return "invalid json: request body is not valid UTF-8", ""
	}
	if f, ok := dst.(fastDecoder); ok && f.decodeFast(trimmed) {
		return "", ""
	}
	// json.Unmarshal checks the whole input, so anything after the object
	// (a second object, a stray '}') is a syntax error too.
	if err := json.Unmarshal(trimmed, dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" {
				return "invalid json: expected a JSON object", ""
			}
			te.Field = JSONPath(te.Field)
			return "invalid json: " + TypeErrorMessage(dst, te), te.Field
		}
		var se *json.SyntaxError
		if errors.As(err, &se) && strings.Contains(se.Error(), "after top-level value") {
			return "invalid json: unexpected data after the JSON object", ""
		}
		return "invalid json: " + strings.TrimPrefix(err.Error(), "json: "), ""
	}
	return "", ""
}

// TypeErrorMessage says in words what is wrong with a value of the wrong
// JSON type that decoding into dst met: "user_id must be a string, not a
// number", "every value of headers must be a string, not an object",
// "weight: the number 1e999 is out of range".
func TypeErrorMessage(dst any, te *json.UnmarshalTypeError) string {
	te.Field = JSONPath(te.Field)
	want := jsonKind(te.Type.Kind())
	if n, ok := strings.CutPrefix(te.Value, "number "); ok {
		if isInt(te.Type.Kind()) && strings.ContainsAny(n, ".eE") {
			return fmt.Sprintf("%s must be a whole number, not %s", te.Field, n)
		}
		return fmt.Sprintf("%s: the number %s is out of range", te.Field, n)
	}
	got := jsonValueKind(te.Value)
	if te.Type == timeJSONType {
		return fmt.Sprintf("%s must be a string (an RFC 3339 time) or a number (Unix milliseconds), not %s", te.Field, got)
	}
	if ft, ok := fieldType(reflect.TypeOf(dst), te.Field); ok && ft.Kind() == reflect.Map && ft != te.Type {
		return fmt.Sprintf("every value of %s must be %s, not %s", te.Field, want, got)
	}
	return fmt.Sprintf("%s must be %s, not %s", te.Field, want, got)
}

// JSONPath is a decoding error's field path as the caller wrote it:
// encoding/json names the struct a promoted field comes from
// ("OptionsJSON.retry.max_attempts"), the caller's JSON does not.
func JSONPath(field string) string {
	return strings.ReplaceAll(field, "OptionsJSON.", "")
}

// fieldType is the Go type of the field at a dotted JSON path in t.
func fieldType(t reflect.Type, path string) (reflect.Type, bool) {
	for name := range strings.SplitSeq(path, ".") {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct {
			return nil, false
		}
		f, found := structField(t, name)
		if !found {
			return nil, false
		}
		t = f
	}
	return t, t != nil
}

// structField is the type of t's field with the JSON name, looking into
// embedded structs as encoding/json does.
func structField(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
			if ft, ok := structField(f.Type, name); ok {
				return ft, true
			}
			continue
		}
		if tag == name || tag == "" && strings.EqualFold(f.Name, name) {
			return f.Type, true
		}
	}
	return nil, false
}

// isInt reports whether k is an integer kind.
func isInt(k reflect.Kind) bool {
	return k >= reflect.Int && k <= reflect.Uint64
}

// jsonKind names the JSON kind a Go kind decodes from, with its article.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Bool:
		return "a boolean"
	default:
		return "a number"
	}
}

// jsonValueKind is encoding/json's name of the value it met, with its
// article.
func jsonValueKind(v string) string {
	switch v {
	case "array", "object":
		return "an " + v
	case "bool":
		return "a boolean"
	case "string", "number":
		return "a " + v
	}
	return v
}

// WriteTooLarge answers 413 with the limit.
func WriteTooLarge(w http.ResponseWriter, limit int64) {
	WriteJSON(w, http.StatusRequestEntityTooLarge, ErrorBody{Error: "request body too large", LimitBytes: limit})
}
