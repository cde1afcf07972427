package httpapi

import (
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/app"
)

// Lanes over REST: GET /lanes, GET /lanes/{destination}, and an
// operator's POST /lanes/{destination}/pause and /resume. {destination} is
// one path segment: a URL escaped whole (https%3A%2F%2Fapi.example.com%3A443)
// or pool:<id>.

// destinationParam is the {destination} segment, unescaped once. chi
// routes on the escaped path when the request has one (r.URL.RawPath), so
// an escaped "/" stays inside the segment instead of splitting it; the
// segment is then still escaped. Without RawPath the path needed no
// escaping and the segment is as sent.
func destinationParam(r *http.Request) (string, bool) {
	seg := chi.URLParam(r, "destination")
	if r.URL.RawPath == "" {
		return seg, true
	}
	d, err := url.PathUnescape(seg)
	return d, err == nil
}

func (h *Handler) listLanes(w http.ResponseWriter, r *http.Request) {
	lanes, err := h.core.Lanes(r.Context())
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	caller, now := app.TenantFrom(r.Context()), time.Now()
	out := make([]httpkit.LaneJSON, len(lanes))
	for i, l := range lanes {
		out[i] = httpkit.NewLaneJSON(l, caller, now)
	}
	writeJSON(w, http.StatusOK, map[string]any{"lanes": out})
}

func (h *Handler) getLane(w http.ResponseWriter, r *http.Request) {
	h.lane(w, r, func(dest string) (*app.LaneView, error) { return h.core.Lane(r.Context(), dest) })
}

// pauseLaneJSON is the optional body of POST /lanes/{destination}/pause.
type pauseLaneJSON struct {
	Reason string `json:"reason"`
}

func (h *Handler) pauseLane(w http.ResponseWriter, r *http.Request) {
	var in pauseLaneJSON
	if !httpkit.DecodeStrictBody(w, r, &in, poolBodyLimit, true) {
		return
	}
	h.lane(w, r, func(dest string) (*app.LaneView, error) { return h.core.PauseLane(r.Context(), dest, in.Reason) })
}

func (h *Handler) resumeLane(w http.ResponseWriter, r *http.Request) {
	h.lane(w, r, func(dest string) (*app.LaneView, error) { return h.core.ResumeLane(r.Context(), dest) })
}

// lane answers with the lane view do returns for the path's destination.
func (h *Handler) lane(w http.ResponseWriter, r *http.Request, do func(dest string) (*app.LaneView, error)) {
	dest, ok := destinationParam(r)
	if !ok {
		writeJSON(w, http.StatusBadRequest, httpkit.ErrorBody{Field: "destination",
			Error: "destination is not a validly escaped path segment (escape it whole: https%3A%2F%2Fapi.example.com)"})
		return
	}
	v, err := do(dest)
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, httpkit.NewLaneJSON(v, app.TenantFrom(r.Context()), time.Now()))
}
