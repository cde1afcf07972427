package httpapi

import (
	"net/http"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
)

// writeDomainError answers with the status for err's code (httpkit's table).
func (h *Handler) writeDomainError(w http.ResponseWriter, r *http.Request, err error) {
	httpkit.WriteDomainError(w, r, h.log, err)
}

// decodeBody reads the request's JSON object under the body limit.
func (h *Handler) decodeBody(w http.ResponseWriter, r *http.Request, dst any) bool {
	return httpkit.DecodeBody(w, r, dst, h.opts.MaxBodyBytes)
}

func (h *Handler) decodeBodyLimit(w http.ResponseWriter, r *http.Request, dst any, limit int64) bool {
	return httpkit.DecodeBody(w, r, dst, limit)
}

var (
	writeJSON  = httpkit.WriteJSON
	writeError = httpkit.WriteError
)
