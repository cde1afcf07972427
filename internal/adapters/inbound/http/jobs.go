package httpapi

import (
	"io"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

func (h *Handler) postJob(w http.ResponseWriter, r *http.Request) {
	var in httpkit.JobRequestJSON
	if !h.decodeBody(w, r, &in) {
		return
	}
	res, err := h.core.Enqueue(r.Context(), in.ToDomain(r.Header))
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	httpkit.SetLoadHeaders(w.Header(), res.Load)
	if res.Duplicate {
		writeJSON(w, http.StatusOK, httpkit.EnqueueJSON{JobID: string(res.JobID), Status: string(res.Status), Duplicate: true})
		return
	}
	// The hot path: ids are hex and statuses plain words, so no encoder is needed.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"job_id":"`+string(res.JobID)+`","status":"`+string(res.Status)+"\"}\n")
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
	if !h.hasPoolToken(r) {
		// Member addresses are as sensitive as the pool endpoints that show
		// them; /health stays open for probes, so it leaves them out.
		for id, p := range hs.Pools {
			for i := range p.Members {
				p.Members[i].Address = ""
			}
			hs.Pools[id] = p
		}
	}
	status := http.StatusOK
	if hs.Status != "ok" {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, hs)
}
