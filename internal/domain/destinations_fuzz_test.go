package domain_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Seed corpus: testdata/fuzz/FuzzDestinationPolicy. Plain `go test` replays
// it; explore with
//
//	go test -run '^$' -fuzz FuzzDestinationPolicy -fuzztime 60s ./internal/domain/

// asciiUpper upper-cases ASCII letters only, so that folding it back is exact.
func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// verdict is a check's outcome as comparable text: "" or the rule.
func verdict(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var d *domain.DestinationDeniedError
	if !errors.As(err, &d) || d.Rule == "" || domain.CodeOf(err) != domain.CodeInvalid {
		t.Fatalf("refusal %v (%T) is not a coded *DestinationDeniedError with a rule", err, err)
	}
	if !strings.Contains(err.Error(), "is denied: "+d.Rule) || !strings.Contains(domain.PublicMessage(err), d.Rule) {
		t.Fatalf("refusal %q does not state its rule %q", err, d.Rule)
	}
	return d.Rule
}

func FuzzDestinationPolicy(f *testing.F) {
	f.Fuzz(func(t *testing.T, allow, deny string, denyPrivate bool, host string, raw []byte) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, "\n")
		}
		rules := domain.DestinationRules{Allow: split(allow), Deny: split(deny), DenyPrivate: denyPrivate}
		p, err := domain.NewDestinationPolicy(rules)
		if err != nil {
			if p != nil || domain.CodeOf(err) != domain.CodeInvalid || !strings.Contains(err.Error(), "entry \"") {
				t.Fatalf("compile error %q: policy %v, code %s; want no policy and an invalid error naming the entry", err, p, domain.CodeOf(err))
			}
			if rules.Validate() == nil {
				t.Fatalf("Validate accepts what NewDestinationPolicy refuses: %q", err)
			}
			return
		}
		if again, _ := domain.NewDestinationPolicy(rules); again.String() != p.String() {
			t.Fatalf("String() not deterministic: %q vs %q", again, p)
		}
		hv := verdict(t, p.CheckHost(host))
		if !strings.HasSuffix(host, ".") && !strings.HasPrefix(host, "[") {
			if v := verdict(t, p.CheckHost(asciiUpper(host)+".")); v != hv {
				t.Fatalf("CheckHost(%q) %q but its upper-case FQDN form %q", host, hv, v)
			}
		}

		a, ok := netip.AddrFromSlice(raw)
		if !ok {
			return
		}
		v := verdict(t, p.CheckIP(host, a))
		if a.Is4() {
			if m := verdict(t, p.CheckIP(host, netip.AddrFrom16(a.As16()))); m != v {
				t.Fatalf("CheckIP(%q, %s) %q but the mapped form %q", host, a, v, m)
			}
		}
		if lit := verdict(t, p.CheckHost(a.String())); lit != verdict(t, p.CheckIP(a.String(), a)) {
			t.Fatalf("CheckHost(%s) %q differs from CheckIP of the same literal", a, lit)
		}
		if verdict(t, p.CheckIP(host, netip.IPv4Unspecified())) == "" || verdict(t, p.CheckIP(host, netip.IPv6Unspecified())) == "" {
			t.Fatalf("an unspecified address passed %v", p)
		}
		if allow == "" && a.Is4() {
			b := a.As4()
			meta := netip.AddrFrom4([4]byte{169, 254, b[2], b[3]})
			if verdict(t, p.CheckIP(host, meta)) == "" {
				t.Fatalf("link-local %s passed with no allow entries: %v", meta, p)
			}
		}
	})
}
