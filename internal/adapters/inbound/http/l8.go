package httpapi

import (
	"net/http"

	"github.com/aquiferhq/aquifer/internal/l8"
)

// challengeBodyLimit bounds POST /l8/challenge bodies; a challenge is a few
// hundred bytes.
const challengeBodyLimit = 8 << 10

// l8Metadata serves GET /.well-known/l8: Aquifer's public key and where to
// challenge it.
func (h *Handler) l8Metadata(w http.ResponseWriter, _ *http.Request) {
	m := h.core.L8Metadata()
	if m == nil {
		writeError(w, http.StatusNotFound, "L8 is not enabled")
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// l8Challenge serves POST /l8/challenge: another party proves it holds its
// key and asks Aquifer to prove the same. Every rejection is a 400 with the
// protocol's message.
func (h *Handler) l8Challenge(w http.ResponseWriter, r *http.Request) {
	var in l8.ChallengeRequest
	if !h.decodeBodyLimit(w, r, &in, challengeBodyLimit) {
		return
	}
	resp, err := h.core.L8Challenge(r.Context(), &in)
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// l8Spec serves GET /l8-spec: the protocol as a receiver implements it.
func (h *Handler) l8Spec(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(l8.Spec)
}
