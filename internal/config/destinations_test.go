package config_test

import (
	"reflect"
	"testing"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestLoadDestinations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		want domain.DestinationRules
	}{
		{"none", "port: 8080\n", nil, domain.DestinationRules{}},
		{"empty section", "destinations:\n", nil, domain.DestinationRules{}},
		{"full section", `
destinations:
  allow:
    - api.vendor-a.com
    - "*.vendor-b.com"
    - 203.0.113.0/24
    - "2001:db8::/32"
  deny: [10.0.0.0/8, Admin.Vendor-B.com.]
  deny_private: true
`, nil, domain.DestinationRules{
			Allow:       []string{"api.vendor-a.com", "*.vendor-b.com", "203.0.113.0/24", "2001:db8::/32"},
			Deny:        []string{"10.0.0.0/8", "Admin.Vendor-B.com."},
			DenyPrivate: true,
		}},
		{"comma-separated string", "destinations:\n  deny: \"10.0.0.0/8, *.corp ,\"\n", nil,
			domain.DestinationRules{Deny: []string{"10.0.0.0/8", "*.corp"}}},
		{"env deny_private", "destinations:\n  allow: [api.example.com]\n", map[string]string{"AQUIFER_DENY_PRIVATE": "yes"},
			domain.DestinationRules{Allow: []string{"api.example.com"}, DenyPrivate: true}},
		{"env wins over yaml", "destinations:\n  deny_private: true\n", map[string]string{"AQUIFER_DENY_PRIVATE": "false"},
			domain.DestinationRules{}},
		{"yaml deny_private only", "destinations:\n  deny_private: yes\n", nil, domain.DestinationRules{DenyPrivate: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadYAML(t, tc.yaml, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Destinations, tc.want) {
				t.Fatalf("Destinations = %#v, want %#v", cfg.Destinations, tc.want)
			}
			if _, err := domain.NewDestinationPolicy(cfg.Destinations); err != nil {
				t.Fatalf("loaded rules do not compile: %v", err)
			}
		})
	}
}

func TestLoadDestinationsEnvOnly(t *testing.T) {
	t.Parallel()
	cfg := mustLoad(t, envOf(map[string]string{"AQUIFER_DENY_PRIVATE": "TRUE"}))
	if !cfg.Destinations.DenyPrivate || cfg.Destinations.Allow != nil || cfg.Destinations.Deny != nil {
		t.Fatalf("Destinations = %#v", cfg.Destinations)
	}
}

func TestLoadDestinationsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		yaml      string
		env       map[string]string
		fragments []string
	}{
		{"entry with a port", "destinations:\n  allow: [\"api.example.com:443\"]\n", nil,
			[]string{`YAML key destinations: allow entry "api.example.com:443": not a host name`}},
		{"every bad entry", "destinations:\n  allow: [\"http://x.example/\", ok.example]\n  deny: [10.0.0.0/33, \"a b\"]\n", nil,
			[]string{`allow entry "http://x.example/": a URL`, `deny entry "10.0.0.0/33": not a valid CIDR`, `deny entry "a b"`}},
		{"unknown key", "destinations:\n  alow: [api.example.com]\n", nil,
			[]string{"YAML key destinations.alow: unknown setting"}},
		{"not a map", "destinations: [api.example.com]\n", nil,
			[]string{"YAML key destinations: must be a map"}},
		{"list of maps", "destinations:\n  deny:\n    - host: x\n", nil,
			[]string{"YAML key destinations.deny: entry", "must be a host name"}},
		{"allow is a map", "destinations:\n  allow: {a: b}\n", nil,
			[]string{"YAML key destinations.allow: must be a list"}},
		{"bad yaml bool", "destinations:\n  deny_private: maybe\n", nil,
			[]string{"YAML key destinations.deny_private", `"maybe" is not a boolean`}},
		{"bad env bool", "port: 8080\n", map[string]string{"AQUIFER_DENY_PRIVATE": "sometimes"},
			[]string{"AQUIFER_DENY_PRIVATE", `"sometimes" is not a boolean`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadYAML(t, tc.yaml, tc.env)
			wantErr(t, cfg, err, tc.fragments...)
		})
	}
}
