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
// the request then carries the tenant's name (app.WithTenant), or for a
// tenant with Role admin the admin's (app.WithAdmin), which sees and acts
// on every tenant's jobs. With no tenants configured it lets everything
// through (open mode).
type Auth struct {
	byHash  map[string]apiKey // hex SHA-256 of the key → its tenant
	enabled bool              // tenants are configured, with keys or not
}

type apiKey struct {
	tenant string
	admin  bool
}

// NewAuth takes the configured tenants. It accepts the keys of those with
// a KeySHA256; the others (an embedding program may authenticate them its
// own way) have no key here, but still close open mode.
func NewAuth(tenants []app.Tenant) *Auth {
	a := &Auth{byHash: map[string]apiKey{}, enabled: len(tenants) > 0}
	for _, t := range tenants {
		if t.KeySHA256 != "" {
			a.byHash[strings.ToLower(t.KeySHA256)] = apiKey{tenant: t.Name, admin: t.Role == app.RoleAdmin}
		}
	}
	return a
}

// Enabled reports whether any tenant is configured.
func (a *Auth) Enabled() bool { return a != nil && a.enabled }

// Tenant returns the tenant whose key r carries, and whether it is an
// admin's.
func (a *Auth) Tenant(r *http.Request) (name string, admin, ok bool) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || key == "" {
		return "", false, false
	}
	sum := sha256.Sum256([]byte(key))
	k, ok := a.byHash[hex.EncodeToString(sum[:])]
	return k.tenant, k.admin, ok
}

// Middleware requires a valid key (when tenants are configured) and puts
// its tenant in the request context; anything else is a 401.
func (a *Auth) Middleware(next http.Handler) http.Handler {
	if !a.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, admin, ok := a.Tenant(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="aquifer"`)
			WriteError(w, http.StatusUnauthorized, "an API key is required: send Authorization: Bearer <key>")
			return
		}
		ctx := app.WithTenant(r.Context(), name)
		if admin {
			ctx = app.WithAdmin(r.Context(), name)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
