package httpkit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/app"
)

func sum(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}

// serve runs one request with key (none when "") through a's middleware
// and returns the status and the tenant the handler saw.
func serve(a *httpkit.Auth, key string) (int, string) {
	var seen string
	h := a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = app.TenantFrom(r.Context())
		w.WriteHeader(http.StatusNoContent)
	}))
	r := httptest.NewRequest(http.MethodGet, "/jobs", nil)
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, seen
}

func TestAuthKeysAndRoles(t *testing.T) {
	t.Parallel()
	a := httpkit.NewAuth([]app.Tenant{{Name: "acme", KeySHA256: sum("k-acme")},
		{Name: "ops", KeySHA256: sum("K-OPS"), Role: app.RoleAdmin}})
	if !a.Enabled() {
		t.Fatal("tenants configured, Auth not enabled")
	}
	for _, c := range []struct {
		key, tenant string
		admin       bool
	}{{"k-acme", "acme", false}, {"K-OPS", "ops", true}} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", "Bearer "+c.key)
		name, admin, ok := a.Tenant(r)
		if !ok || name != c.tenant || admin != c.admin {
			t.Errorf("key %s: tenant %q admin %v ok %v, want %q admin %v", c.key, name, admin, ok, c.tenant, c.admin)
		}
		if code, seen := serve(a, c.key); code != http.StatusNoContent || seen != c.tenant {
			t.Errorf("key %s: %d, tenant in context %q", c.key, code, seen)
		}
	}
	for _, key := range []string{"", "k-ops", "wrong"} {
		if code, _ := serve(a, key); code != http.StatusUnauthorized {
			t.Errorf("key %q: %d, want 401", key, code)
		}
	}
}

// TestAuthTenantsWithoutKeysCloseOpenMode: tenants an embedding program
// authenticates its own way (no KeySHA256) have no key at the built-in
// doors, which then refuse everyone rather than fall back to open mode.
func TestAuthTenantsWithoutKeysCloseOpenMode(t *testing.T) {
	t.Parallel()
	a := httpkit.NewAuth([]app.Tenant{{Name: "custom"}})
	if !a.Enabled() {
		t.Fatal("a tenant without a key left Auth open")
	}
	if code, _ := serve(a, "anything"); code != http.StatusUnauthorized {
		t.Fatalf("%d, want 401", code)
	}
	open := httpkit.NewAuth(nil)
	if open.Enabled() {
		t.Fatal("no tenants, Auth enabled")
	}
	if code, seen := serve(open, ""); code != http.StatusNoContent || seen != "" {
		t.Fatalf("open mode: %d, tenant %q", code, seen)
	}
}
