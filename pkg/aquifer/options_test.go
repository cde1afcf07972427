package aquifer_test

import (
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// TestNewChecksTenants: the facade runs the one tenant check (the one the
// daemon's YAML tenants pass too) and names each finding by its Options
// field.
func TestNewChecksTenants(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("ab", 32)
	_, err := aquifer.New(aquifer.Options{
		Store: aquifer.NewMemoryStore(),
		Tenants: []aquifer.Tenant{
			{Name: "a", KeySHA256: key},
			{Name: "b\x1fc"},
			{Name: "d", KeySHA256: strings.ToUpper(key)},
			{Name: "e", MaxQueued: -1},
			{Name: "f", Rates: map[string]aquifer.Rate{"x.test": {RPS: 0.1, MaxConcurrent: 1}}},
			{Name: "g", Destinations: aquifer.DestinationRules{Allow: []string{"not a host!"}}},
			{Name: "h", WebhookSecrets: []aquifer.WebhookSecret{{}}},
		},
	})
	if err == nil {
		t.Fatal("New accepted bad tenants")
	}
	for _, want := range []string{
		"aquifer: Tenants[1]: Name must be 1–64 letters",
		`aquifer: Tenants[2]: KeySHA256 must be unique: the same key as tenant "a"`,
		"aquifer: Tenants[3]: MaxQueued must be 0 (no cap) or more",
		"aquifer: Tenants[4]: Rates are invalid: upstreams.x.test: rps must be",
		"aquifer: Tenants[5]: Destinations are invalid:",
		"aquifer: Tenants[6].WebhookSecrets[0]: a webhook secret is empty",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}

func TestNewNamesTheL8KeyOption(t *testing.T) {
	t.Parallel()
	_, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), L8: aquifer.L8Options{PrivateKey: make([]byte, 12)}})
	if err == nil || !strings.Contains(err.Error(), "aquifer: L8.PrivateKey holds 12 bytes, want 64") {
		t.Fatalf("a 12-byte key: %v", err)
	}
}

func TestWebhookSecrets(t *testing.T) {
	t.Parallel()
	if aquifer.WebhookSecrets() != nil {
		t.Error("no secrets are not nil")
	}
	good, _ := aquifer.NewWebhookSecret()
	ss := aquifer.WebhookSecrets(good, "nope")
	if len(ss) != 2 || ss[0].Check() != nil || ss[1].Check() == nil {
		t.Fatalf("WebhookSecrets(good, bad): %v, %v", ss[0].Check(), ss[1].Check())
	}
	if out := strings.Join([]string{ss[0].String(), ss[1].String()}, " "); strings.Contains(out, strings.TrimPrefix(good, "whsec_")) {
		t.Errorf("a secret prints: %s", out)
	}
}
