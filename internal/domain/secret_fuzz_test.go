package domain_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// FuzzRedactURL: redaction never panics, is idempotent, leaves URLs without
// query, fragment or user information alone, keeps a URL that parses
// parseable with the same scheme, host and path, and leaves no secret
// parameter's value behind.
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{"http://h/p?access_token=s&x=1", "http://u:p@h/?sig=a;b=2#token=t", "http://h/p#/r?key=k",
		"http://h/?%74oken=a&api+key=b&&", "https://h:8443/a%2Fb?x=%zz&pwd=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := domain.RedactURL(raw)
		if again := domain.RedactURL(got); again != got {
			t.Fatalf("not idempotent: %q → %q → %q", raw, got, again)
		}
		if !strings.ContainsAny(raw, "?#@") && got != raw {
			t.Fatalf("changed a URL with nothing to redact: %q → %q", raw, got)
		}
		in, err := url.Parse(raw)
		if err != nil {
			return
		}
		out, err := url.Parse(got)
		if err != nil {
			t.Fatalf("%q parses, its redaction %q does not: %v", raw, got, err)
		}
		if in.User == nil && (in.Scheme != out.Scheme || in.Host != out.Host || in.Path != out.Path) {
			t.Fatalf("%q → %q changed scheme, host or path", raw, got)
		}
		q, err := url.ParseQuery(out.RawQuery)
		if err != nil {
			return
		}
		for name, vals := range q {
			if !domain.IsSecretName(name) {
				continue
			}
			for _, v := range vals {
				if v != "" && v != domain.Redacted {
					t.Fatalf("%q → %q: secret parameter %s still has %q", raw, got, name, v)
				}
			}
		}
	})
}
