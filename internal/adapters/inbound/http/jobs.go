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
	req, err := in.Request(r.Header)
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	res, err := h.core.Enqueue(r.Context(), req)
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

// postBatch serves POST /jobs/batch: up to app.MaxBatch job requests in
// one body (at most MaxBatchBytes), each decoded and validated on its own
// and all valid ones stored in one commit. It answers 200 with one result
// per item, in order; only what concerns the whole request fails it: a body
// that is no object with jobs (400), too large (413), admission control
// (429, nothing stored) or the store (503).
func (h *Handler) postBatch(w http.ResponseWriter, r *http.Request) {
	var in httpkit.BatchJSON
	if !h.decodeBodyLimit(w, r, &in, h.batchLimit()) {
		return
	}
	if err := httpkit.CheckBatchSize(len(in.Jobs)); err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	b := httpkit.NewBatch(in.Jobs, r.Header, h.opts.MaxBodyBytes)
	var done []app.BatchItem
	if len(b.Requests) > 0 {
		var err error
		if done, err = h.core.EnqueueBatch(r.Context(), b.Requests); err != nil {
			h.writeDomainError(w, r, err)
			return
		}
	}
	out, load := b.Result(done, h.log)
	if load != nil {
		httpkit.SetLoadHeaders(w.Header(), *load)
	}
	writeJSON(w, http.StatusOK, out)
}

// batchLimit is the body limit of POST /jobs/batch: MaxBatchBytes, or
// without it DefaultMaxBatchBytes; negative: none.
func (h *Handler) batchLimit() int64 {
	switch n := h.opts.MaxBatchBytes; {
	case n < 0:
		return 0
	case n == 0:
		return DefaultMaxBatchBytes
	default:
		return n
	}
}

func (h *Handler) getJob(w http.ResponseWriter, r *http.Request) {
	j, err := h.core.Get(r.Context(), domain.JobID(chi.URLParam(r, "id")))
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, httpkit.NewJobView(j))
}

// cancelJob serves DELETE /jobs/{id}: 200 with the cancelled job, 409 when
// it was already dispatched or finished, 404 when unknown.
func (h *Handler) cancelJob(w http.ResponseWriter, r *http.Request) {
	j, err := h.core.Cancel(r.Context(), domain.JobID(chi.URLParam(r, "id")))
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, httpkit.NewJobView(j))
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
