package domain_test

import (
	"testing"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestAPIKeyOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		headers map[string]string
		want    string
	}{
		{map[string]string{"Authorization": "Bearer a", "X-Api-Key": "b"}, "Bearer a"},
		{map[string]string{"authorization": "Bearer a"}, "Bearer a"}, // case-insensitive (the original was not)
		{map[string]string{"X-API-KEY": "b", "api-key": "c"}, "b"},
		{map[string]string{"Api-Key": "c", "Content-Type": "x"}, "c"},
		{map[string]string{"Content-Type": "x"}, ""},
		{nil, ""},
	}
	for _, c := range cases {
		if got := domain.APIKeyOf(c.headers); got != c.want {
			t.Errorf("APIKeyOf(%v) = %q, want %q", c.headers, got, c.want)
		}
	}
}

func TestTenantOf(t *testing.T) {
	t.Parallel()
	a := domain.TenantOf("u1", map[string]string{"Authorization": "Bearer k1"})
	if len(a) != 24 || a != domain.TenantOf("u1", map[string]string{"authorization": "Bearer k1"}) {
		t.Fatalf("TenantOf is not stable across header spelling: %q", a)
	}
	distinct := map[string]bool{a: true}
	for _, other := range []string{
		domain.TenantOf("u2", map[string]string{"Authorization": "Bearer k1"}),
		domain.TenantOf("u1", map[string]string{"Authorization": "Bearer k2"}),
		domain.TenantOf("u1", nil),
		domain.TenantOf("a:b", map[string]string{"Authorization": "c"}),
		domain.TenantOf("a", map[string]string{"Authorization": "b:c"}),
	} {
		if distinct[other] {
			t.Fatalf("tenant %q collides", other)
		}
		distinct[other] = true
	}
}
