package tenant_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/app/tenant"
	"github.com/aquiferhq/aquifer/internal/domain"
)

func hashOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func TestCheckAcceptsAGoodList(t *testing.T) {
	t.Parallel()
	ts := []tenant.Tenant{
		{Name: "alpha", KeySHA256: hashOf("a"), MaxQueued: 10, Rates: map[string]domain.Rate{"api.example.com": {RPS: 5, MaxConcurrent: 2}},
			Destinations: domain.DestinationRules{Allow: []string{"*.example.com"}}},
		{Name: "Bravo.2_x-y"}, // no key: a front door of an embedding program authenticates it
		{Name: "c", KeySHA256: strings.ToUpper(hashOf("c"))},
	}
	if ps := tenant.Check(ts); len(ps) != 0 {
		t.Fatalf("problems in a good list: %+v", ps)
	}
	if ps := tenant.Check(nil); len(ps) != 0 {
		t.Fatalf("problems in no list: %+v", ps)
	}
}

// TestCheckReportsEveryProblem: each problem names the tenant's index and
// field, with a reason that follows the field's name.
func TestCheckReportsEveryProblem(t *testing.T) {
	t.Parallel()
	ts := []tenant.Tenant{
		{Name: "a", KeySHA256: hashOf("k")},
		{},
		{Name: "a b"},
		{Name: "a\x1fb"},
		{Name: "a"},
		{Name: "d", KeySHA256: "nothex"},
		{Name: "e", KeySHA256: strings.ToUpper(hashOf("k"))},
		{Name: "f", MaxQueued: -1},
		{Name: "g", Rates: map[string]domain.Rate{"x.test": {RPS: 0.1, MaxConcurrent: 1}}},
		{Name: "h", Destinations: domain.DestinationRules{Deny: []string{"not a host!"}}},
		{Name: strings.Repeat("n", 65)},
	}
	var got []string
	for _, p := range tenant.Check(ts) {
		got = append(got, fmt.Sprintf("[%d] %s %s", p.Index, p.Field, p.Reason))
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		"[1] Name is required",
		"[2] Name must be 1–64 letters",
		"[3] Name must be 1–64 letters",
		`[4] Name must be unique: duplicate name "a" (tenant "a" is listed twice)`,
		"[5] KeySHA256 must be the SHA-256 of the tenant's API key, in 64 hex digits",
		`[6] KeySHA256 must be unique: the same key as tenant "a"`,
		"[7] MaxQueued must be 0 (no cap) or more",
		"[8] Rates are invalid: upstreams.x.test: rps must be a number >= 0.5",
		"[9] Destinations are invalid:",
		"[10] Name must be 1–64 letters",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q in:\n%s", want, all)
		}
	}
	if len(got) != 10 {
		t.Errorf("%d problems, want 10 (one per bad tenant):\n%s", len(got), all)
	}
}

// TestRoles: "admin" is the one role a tenant may have; an admin in the
// context is an operator (sees every tenant), a tenant is scoped to itself,
// and no tenant at all (open mode) is an operator.
func TestRoles(t *testing.T) {
	t.Parallel()
	if ps := tenant.Check([]tenant.Tenant{{Name: "ops", Role: tenant.RoleAdmin}, {Name: "t"}}); len(ps) != 0 {
		t.Fatalf("problems: %+v", ps)
	}
	ps := tenant.Check([]tenant.Tenant{{Name: "x", Role: "root"}})
	if len(ps) != 1 || ps[0].Field != "Role" || !strings.Contains(ps[0].Reason, `"admin"`) {
		t.Fatalf("problems for role root = %+v", ps)
	}
	ctx := t.Context()
	if !tenant.Operator(ctx) || tenant.Scoped(ctx) != "" {
		t.Fatal("open mode is not an operator")
	}
	if c := tenant.With(ctx, "t"); tenant.Operator(c) || tenant.Scoped(c) != "t" {
		t.Fatal("a tenant is an operator")
	}
	if c := tenant.WithAdmin(ctx, "ops"); !tenant.Operator(c) || tenant.Scoped(c) != "" || tenant.From(c) != "ops" {
		t.Fatal("an admin is not an operator submitting as itself")
	}
}
