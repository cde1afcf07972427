package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// jobRequestJSON is the wire shape of POST /jobs. Unknown fields are ignored
// (BEHAVIOR.md §3); wrong types are rejected naming the field.
type jobRequestJSON struct {
	UserID        string            `json:"user_id"`
	IdempotentKey string            `json:"idempotent_key"`
	URL           string            `json:"url"`
	PoolID        string            `json:"pool_id"`
	Method        string            `json:"method"`
	Headers       map[string]string `json:"headers"`
	Body          string            `json:"body"`
	WebhookURL    string            `json:"webhook_url"`
}

// enqueueJSON is the answer to POST /jobs.
type enqueueJSON struct {
	JobID     string `json:"job_id"`
	Status    string `json:"status"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// Account-queue request headers (BEHAVIOR.md §11.1); the Aqueduct name wins.
const (
	hdrAccountQueue      = "X-Aqueduct-Account-Queue"
	hdrAccountQueueAlias = "X-Aquifer-Account-Queue"
)

func (h *Handler) postJob(w http.ResponseWriter, r *http.Request) {
	var in jobRequestJSON
	if !h.decodeBody(w, r, &in) {
		return
	}
	req := &domain.JobRequest{
		UserID: in.UserID, IdempotentKey: in.IdempotentKey, URL: in.URL, PoolID: in.PoolID,
		Method: in.Method, Headers: in.Headers, Body: in.Body, WebhookURL: in.WebhookURL,
		AccountQueue: accountQueueMode(r.Header),
	}
	res, err := h.core.Enqueue(r.Context(), req)
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	setLoadHeaders(w.Header(), res.Load)
	if res.Duplicate {
		writeJSON(w, http.StatusOK, enqueueJSON{JobID: string(res.JobID), Status: string(res.Status), Duplicate: true})
		return
	}
	// The hot path: ids are hex and statuses plain words, so no encoder is needed.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"job_id":"`+string(res.JobID)+`","status":"`+string(res.Status)+"\"}\n")
}

// Load headers on POST /jobs responses, in both namespaces, so callers can
// autoscale on Aquifer's backlog too (BEHAVIOR.md §13).
var loadHeaderNames = [...][3]string{
	{"X-Aqueduct-Total-Jobs", "X-Aqueduct-Queue-Depth", "X-Aqueduct-Flow-Rate"},
	{"X-Aquifer-Total-Jobs", "X-Aquifer-Queue-Depth", "X-Aquifer-Flow-Rate"},
}

func setLoadHeaders(h http.Header, l app.Load) {
	total, depth, rate := strconv.FormatInt(l.Total, 10), strconv.FormatInt(l.Depth, 10), l.FlowRateText()
	for _, n := range loadHeaderNames {
		h[n[0]], h[n[1]], h[n[2]] = []string{total}, []string{depth}, []string{rate}
	}
}

func accountQueueMode(h http.Header) domain.AccountQueueMode {
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

// decodeBody reads one JSON object from the body under the size limit. On
// failure it writes the error response and returns false.
func (h *Handler) decodeBody(w http.ResponseWriter, r *http.Request, dst any) bool {
	return h.decodeBodyLimit(w, r, dst, h.opts.MaxBodyBytes)
}

// decodeBodyLimit is decodeBody with an explicit limit (0: none).
func (h *Handler) decodeBodyLimit(w http.ResponseWriter, r *http.Request, dst any, limit int64) bool {
	if limit > 0 {
		if r.ContentLength > limit {
			writeTooLarge(w, limit)
			return false
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
	}
	raw, err := readAll(r.Body, r.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeTooLarge(w, limit)
			return false
		}
		writeError(w, http.StatusBadRequest, "could not read request body")
		return false
	}
	if msg := decodeJSON(raw, dst); msg != "" {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: msg})
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
// for the caller when it cannot.
func decodeJSON(raw []byte, dst any) string {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return "invalid json: request body is empty"
	}
	if trimmed[0] != '{' {
		return "invalid json: expected a JSON object"
	}
	// json.Unmarshal checks the whole input, so anything after the object
	// (a second object, a stray '}') is a syntax error too.
	if err := json.Unmarshal(trimmed, dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" {
				return "invalid json: expected a JSON object"
			}
			return fmt.Sprintf("invalid json: %s must be %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
		}
		var se *json.SyntaxError
		if errors.As(err, &se) && strings.Contains(se.Error(), "after top-level value") {
			return "invalid json: unexpected data after the JSON object"
		}
		return "invalid json: " + strings.TrimPrefix(err.Error(), "json: ")
	}
	return ""
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "an array"
	case "bool":
		return "a boolean"
	default:
		return "a number"
	}
}

func writeTooLarge(w http.ResponseWriter, limit int64) {
	writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: "request body too large", LimitBytes: limit})
}

// jobJSON is the wire shape of GET /jobs/{id}: the five keys of BEHAVIOR.md
// §5 plus additive fields. Secret request headers are redacted and the
// request body is never echoed.
type jobJSON struct {
	JobID          string            `json:"job_id"`
	Status         string            `json:"status"`
	URL            string            `json:"url"`
	Method         string            `json:"method"`
	CreatedAt      int64             `json:"created_at"`
	UpdatedAt      int64             `json:"updated_at"`
	UserID         string            `json:"user_id"`
	PoolID         string            `json:"pool_id,omitempty"`
	WebhookURL     string            `json:"webhook_url,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	Attempts       int               `json:"attempts"`
	ResponseStatus *int              `json:"response_status,omitempty"`
	Body           *string           `json:"body,omitempty"`
	BodyEncoding   string            `json:"body_encoding,omitempty"`
	BodyTruncated  bool              `json:"body_truncated,omitempty"`
	ContentType    string            `json:"content_type,omitempty"`
	Reason         string            `json:"reason,omitempty"`
	Webhook        *webhookJSON      `json:"webhook,omitempty"`
}

// webhookJSON reports the delivery of a finished job's result to its
// webhook_url.
type webhookJSON struct {
	Status         string `json:"status"` // pending, delivered or failed
	Attempts       int    `json:"attempts"`
	ResponseStatus int    `json:"response_status,omitempty"`
	Reason         string `json:"reason,omitempty"`
}

func toJobJSON(j *domain.Job) jobJSON {
	out := jobJSON{
		JobID: string(j.ID), Status: string(j.Status), URL: j.URL, Method: j.Method,
		CreatedAt: j.CreatedAt.UnixMilli(), UpdatedAt: j.UpdatedAt.UnixMilli(), UserID: j.UserID,
		PoolID: j.PoolID, WebhookURL: j.WebhookURL, Headers: domain.RedactHeaders(j.Headers), Attempts: j.Attempts,
	}
	if r := j.Result; r != nil {
		status := r.ResponseStatus
		body, enc := app.EncodeBody(r.Body)
		out.ResponseStatus, out.Body, out.BodyEncoding = &status, &body, enc
		out.BodyTruncated, out.ContentType, out.Reason = r.BodyTruncated, r.ContentType, r.Reason
	}
	if d := j.Delivery; d != nil {
		out.Webhook = &webhookJSON{Status: string(d.Status), Attempts: d.Attempts, ResponseStatus: d.ResponseStatus, Reason: d.Reason}
	}
	return out
}

func (h *Handler) getJob(w http.ResponseWriter, r *http.Request) {
	j, err := h.core.Get(r.Context(), domain.JobID(chi.URLParam(r, "id")))
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toJobJSON(j))
}

// cancelJob serves DELETE /jobs/{id}: 200 with the cancelled job, 409 when
// it was already dispatched or finished, 404 when unknown.
func (h *Handler) cancelJob(w http.ResponseWriter, r *http.Request) {
	j, err := h.core.Cancel(r.Context(), domain.JobID(chi.URLParam(r, "id")))
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toJobJSON(j))
}

func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	hs := h.core.Health(r.Context())
	status := http.StatusOK
	if hs.Status != "ok" {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, hs)
}
