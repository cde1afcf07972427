package httpapi

import (
	"io"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
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
