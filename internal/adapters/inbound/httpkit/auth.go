package httpkit

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/aquiferhq/aquifer/internal/app"
)

// Auth authenticates API-key tenants: "Authorization: Bearer <key>" is
// hashed (SHA-256) and looked up among the configured tenants' key hashes;
// the request then carries the tenant's name (app.WithTenant). With no
// tenants configured it lets everything through (open mode).
type Auth struct {
	byHash map[string]string // hex SHA-256 of the key → tenant name
}

// NewAuth takes tenant name → hex SHA-256 of its key.
func NewAuth(keyHashes map[string]string) *Auth {
	a := &Auth{byHash: map[string]string{}}
	for name, h := range keyHashes {
		a.byHash[strings.ToLower(h)] = name
	}
	return a
}

// Enabled reports whether any tenant is configured.
func (a *Auth) Enabled() bool { return a != nil && len(a.byHash) > 0 }

// Tenant returns the tenant whose key r carries.
func (a *Auth) Tenant(r *http.Request) (string, bool) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || key == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(key))
	name, ok := a.byHash[hex.EncodeToString(sum[:])]
	return name, ok
}

// Middleware requires a valid key (when tenants are configured) and puts
// its tenant in the request context; anything else is a 401.
func (a *Auth) Middleware(next http.Handler) http.Handler {
	if !a.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := a.Tenant(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="aquifer"`)
			WriteError(w, http.StatusUnauthorized, "an API key is required: send Authorization: Bearer <key>")
			return
		}
		next.ServeHTTP(w, r.WithContext(app.WithTenant(r.Context(), name)))
	})
}
