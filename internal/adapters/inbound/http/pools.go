package httpapi

import (
	"crypto/subtle"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// memberJSON is the body of POST /pools/{pool_id}/members (BEHAVIOR.md §8).
type memberJSON struct {
	MemberID          string  `json:"member_id"`
	Address           string  `json:"address"`
	CapacityRPS       float64 `json:"capacity_rps"`
	HeartbeatInterval float64 `json:"heartbeat_interval_seconds"`
}

// poolBodyLimit bounds registration bodies, which are tiny.
const poolBodyLimit = 16 << 10

func (h *Handler) registerMember(w http.ResponseWriter, r *http.Request) {
	if !h.poolAuthorized(w, r) {
		return
	}
	var in memberJSON
	if !h.decodeBodyLimit(w, r, &in, poolBodyLimit) {
		return
	}
	interval := time.Duration(0)
	if in.HeartbeatInterval > 0 && !math.IsInf(in.HeartbeatInterval, 0) {
		interval = time.Duration(math.Min(in.HeartbeatInterval, float64(domain.MaxHeartbeatInterval/time.Second)+1) * float64(time.Second))
	}
	created, err := h.core.RegisterMember(r.Context(), &domain.MemberRegistration{
		PoolID: chi.URLParam(r, "pool_id"), MemberID: in.MemberID, Address: in.Address,
		CapacityRPS: in.CapacityRPS, HeartbeatInterval: interval,
	})
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "registered", "created": created})
}

func (h *Handler) leaveMember(w http.ResponseWriter, r *http.Request) {
	if !h.poolAuthorized(w, r) {
		return
	}
	if err := h.core.LeaveMember(r.Context(), chi.URLParam(r, "pool_id"), chi.URLParam(r, "member_id")); err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "left"})
}

func (h *Handler) listPools(w http.ResponseWriter, r *http.Request) {
	if !h.poolAuthorized(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"pools": h.core.Pools(r.Context())})
}

func (h *Handler) getPool(w http.ResponseWriter, r *http.Request) {
	if !h.poolAuthorized(w, r) {
		return
	}
	p, ok := h.core.Pools(r.Context())[chi.URLParam(r, "pool_id")]
	if !ok {
		writeError(w, http.StatusNotFound, "pool not found (it has no members)")
		return
	}
	writeJSON(w, http.StatusOK, struct {
		PoolID string `json:"pool_id"`
		app.PoolHealth
	}{chi.URLParam(r, "pool_id"), p})
}

// hasPoolToken reports whether r may see and change pool membership: no
// token is configured, or r carries it.
func (h *Handler) hasPoolToken(r *http.Request) bool {
	if h.opts.PoolToken == "" || h.opts.Auth.Enabled() {
		return true // no token, or tenants' API keys guard the pool endpoints
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(h.opts.PoolToken)) == 1
}

// poolAuthorized enforces AQUIFER_POOL_TOKEN when it is set: without it,
// anyone who can reach Aquifer could register their own address into a pool
// and receive other callers' requests, credentials included.
func (h *Handler) poolAuthorized(w http.ResponseWriter, r *http.Request) bool {
	if h.hasPoolToken(r) {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="aquifer-pools"`)
	writeError(w, http.StatusUnauthorized, "pool membership requires Authorization: Bearer <AQUIFER_POOL_TOKEN>")
	return false
}
