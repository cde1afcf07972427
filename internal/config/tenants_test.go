package config_test

import (
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/app/tenant"
	"github.com/aquiferhq/aquifer/internal/config"
	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestTenants(t *testing.T) {
	t.Parallel()
	ha, hb := config.HashKey("key-a"), config.HashKey("key-b")
	path := writeYAML(t, `tenants:
  - name: Alpha
    key_sha256: `+strings.ToUpper(ha)+`
  - name: bravo
    key_sha256: `+hb+`
    max_queued: 7
    upstreams:
      API.example.com: {rps: 5, max_concurrent: 2}
  - name: ops
    key_sha256: `+config.HashKey("key-ops")+`
    role: admin
`)
	cfg := mustLoad(t, envOf(map[string]string{"CONFIG_PATH": path}))
	if len(cfg.Tenants) != 3 {
		t.Fatalf("tenants %+v", cfg.Tenants)
	}
	a, b := cfg.Tenants[0], cfg.Tenants[1]
	if a.Role != "" || b.Role != "" || cfg.Tenants[2].Role != tenant.RoleAdmin {
		t.Fatalf("roles %q, %q, %q; want only ops an admin", a.Role, b.Role, cfg.Tenants[2].Role)
	}
	if a.Name != "Alpha" || a.KeySHA256 != ha || a.MaxQueued != 0 {
		t.Fatalf("alpha %+v (names keep their case; hashes are lower-cased)", a)
	}
	if b.MaxQueued != 7 || b.Rates["api.example.com"] != (domain.Rate{RPS: 5, MaxConcurrent: 2}) {
		t.Fatalf("bravo %+v", b)
	}
}

func TestTenantErrors(t *testing.T) {
	t.Parallel()
	h := config.HashKey("k")
	for name, c := range map[string]struct{ yaml, want string }{
		"no name":      {"tenants:\n  - key_sha256: " + h + "\n", "tenants[0].name"},
		"bad name":     {"tenants:\n  - name: 'a b'\n    key_sha256: " + h + "\n", "tenants.a b.name"},
		"twice":        {"tenants:\n  - name: a\n    key_sha256: " + h + "\n  - name: a\n    key_sha256: " + config.HashKey("x") + "\n", `tenant "a" is listed twice`},
		"bad hash":     {"tenants:\n  - name: a\n    key_sha256: nothex\n", "tenants.a.key_sha256"},
		"shared key":   {"tenants:\n  - name: a\n    key_sha256: " + h + "\n  - name: b\n    key_sha256: " + h + "\n", `the same key as tenant "a"`},
		"unknown":      {"tenants:\n  - name: a\n    key_sha256: " + h + "\n    colour: blue\n", "colour: unknown setting"},
		"negative cap": {"tenants:\n  - name: a\n    key_sha256: " + h + "\n    max_queued: -1\n", "max_queued"},
		"bad rate":     {"tenants:\n  - name: a\n    key_sha256: " + h + "\n    upstreams:\n      x.test: {rps: -1}\n", "tenants[0].upstreams.x.test"},
		"adaptive":     {"tenants:\n  - name: a\n    key_sha256: " + h + "\n    upstreams:\n      x.test: {rps: 1, adaptive: true}\n", "YAML key tenants[0].upstreams.x.test.adaptive: set adaptive in the global upstreams"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(envOf(map[string]string{"CONFIG_PATH": writeYAML(t, c.yaml)}))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to mention %q", err, c.want)
			}
		})
	}
}

// TestTenantChecksNameYAMLKeys: the tenant list is checked by the one
// tenant check; its findings come back under the YAML keys they are about.
func TestTenantChecksNameYAMLKeys(t *testing.T) {
	t.Parallel()
	h := config.HashKey("k")
	for name, c := range map[string]struct{ yaml, want string }{
		"no key":        {"tenants:\n  - name: a\n", "YAML key tenants.a.key_sha256: is required"},
		"negative cap":  {"tenants:\n  - name: a\n    key_sha256: " + h + "\n    max_queued: -1\n", "YAML key tenants.a.max_queued: must be 0 (no cap) or more"},
		"twice":         {"tenants:\n  - name: a\n    key_sha256: " + h + "\n  - name: a\n    key_sha256: " + config.HashKey("x") + "\n", `YAML key tenants.a.name: must be unique`},
		"host twice":    {"tenants:\n  - name: a\n    key_sha256: " + h + "\n    upstreams:\n      x.test: {rps: 1}\n      X.test: {rps: 2}\n", "host is listed twice"},
		"host is a URL": {"tenants:\n  - name: a\n    key_sha256: " + h + "\n    upstreams:\n      \"https://x.test\": {rps: 1}\n", "YAML key tenants[0].upstreams.https://x.test: must be a host or host:port"},
		"bad rules":     {"tenants:\n  - name: a\n    key_sha256: " + h + "\n    destinations:\n      deny: [\"not a host!\"]\n", "YAML key tenants[0].destinations"},
		"unknown role":  {"tenants:\n  - name: a\n    key_sha256: " + h + "\n    role: superuser\n", `YAML key tenants.a.role: must be "admin" or empty`},
		"role not text": {"tenants:\n  - name: a\n    key_sha256: " + h + "\n    role: [admin]\n", "YAML key tenants[0].role"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(envOf(map[string]string{"CONFIG_PATH": writeYAML(t, c.yaml)}))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to mention %q", err, c.want)
			}
			if n := strings.Count(err.Error(), "YAML key"); n != 1 {
				t.Errorf("%d problems reported, want 1 (each once):\n%v", n, err)
			}
		})
	}
}
