package domain_test

import (
	"maps"
	"testing"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestIsSecretHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want bool
	}{
		// By name, any case.
		{"Authorization", true},
		{"authorization", true},
		{"AUTHORIZATION", true},
		{"Proxy-Authorization", true},
		{"proxy-authorization", true},
		{"Cookie", true},
		{"cookie", true},
		{"Set-Cookie", true},
		{"X-Api-Key", true},
		{"x-api-key", true},
		{"X-API-KEY", true},
		{"Api-Key", true},
		{"api-key", true},
		// By word, anywhere in the name, any case.
		{"X-Auth-Token", true},
		{"x-auth-token", true},
		{"TOKEN", true},
		{"X-Secret", true},
		{"X-Client-SECRET-Value", true},
		{"X-Key-Id", true},
		{"Subscription-Key", true},
		{"Ocp-Apim-Subscription-Key", true},
		{"X-Password", true},
		{"X-Credential", true},
		{"X-Session-Id", true},
		{"X-Hub-Signature-256", true},
		// Not secret.
		{"Content-Type", false},
		{"Accept", false},
		{"User-Agent", false},
		{"X-Request-Id", false},
		{"X-Api", false},
		{"Authorisation-Hint", false},
		{"Cookie2", false},
		{"If-None-Match", false},
		{"", false},
	}
	for _, tc := range tests {
		if got := domain.IsSecretHeader(tc.name); got != tc.want {
			t.Errorf("IsSecretHeader(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRedactHeaders(t *testing.T) {
	t.Parallel()
	in := map[string]string{
		"Authorization":   "Bearer s3cr3t",
		"cookie":          "sid=1",
		"X-Api-Key":       "k",
		"api-key":         "k2",
		"X-Auth-Token":    "tok",
		"X-Client-Secret": "shh",
		"Content-Type":    "application/json",
		"x-request-id":    "abc",
		"Accept":          "",
	}
	orig := maps.Clone(in)
	got := domain.RedactHeaders(in)
	want := map[string]string{
		"Authorization":   domain.Redacted,
		"cookie":          domain.Redacted,
		"X-Api-Key":       domain.Redacted,
		"api-key":         domain.Redacted,
		"X-Auth-Token":    domain.Redacted,
		"X-Client-Secret": domain.Redacted,
		"Content-Type":    "application/json",
		"x-request-id":    "abc",
		"Accept":          "",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("RedactHeaders =\n%v\nwant\n%v", got, want)
	}
	if !maps.Equal(in, orig) {
		t.Fatalf("input mutated: %v, want %v", in, orig)
	}
	// The result is a copy: writing to it leaves the input alone.
	got["Content-Type"] = "changed"
	if in["Content-Type"] != "application/json" {
		t.Fatal("RedactHeaders returned the input map")
	}
	if domain.Redacted != "[redacted]" {
		t.Fatalf("Redacted = %q", domain.Redacted)
	}
}

func TestRedactHeadersEmpty(t *testing.T) {
	t.Parallel()
	if got := domain.RedactHeaders(nil); got != nil {
		t.Errorf("RedactHeaders(nil) = %v, want nil", got)
	}
	if got := domain.RedactHeaders(map[string]string{}); got != nil {
		t.Errorf("RedactHeaders(empty) = %v, want nil", got)
	}
}
