package app_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// TestConfigValidateChecksTenants: the core runs the one tenant check and
// l8's secret check on its own Config too, for callers other than the
// facade.
func TestConfigValidateChecksTenants(t *testing.T) {
	t.Parallel()
	cfg := app.Config{Store: memory.New(nil), Doer: &http.Client{},
		Tenants: []app.Tenant{{Name: "a"}, {Name: "a", MaxQueued: -1}, {Name: "b", WebhookSecrets: []l8.Secret{l8.SecretFrom("nope")}}}}
	_, err := app.New(cfg)
	if err == nil {
		t.Fatal("app.New accepted bad tenants")
	}
	for _, want := range []string{`app: Tenants[1]: Name must be unique: duplicate name "a"`, "app: Tenants[1]: MaxQueued must be 0",
		"app: Tenants[2].WebhookSecrets[0] does not start with whsec_"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}
