package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// streamJob serves GET /jobs/{id}/stream: the job's events as SSE
// (httpkit.Stream).
func (h *Handler) streamJob(w http.ResponseWriter, r *http.Request) {
	job, sub, err := h.core.Subscribe(r.Context(), domain.JobID(chi.URLParam(r, "id")))
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	httpkit.Stream(w, r, h.core, job, sub, httpkit.StreamOptions{KeepAlive: h.opts.KeepAlive, Closing: h.closing})
}
