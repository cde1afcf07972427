package domain_test

import (
	"maps"
	"net/url"
	"testing"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestIsSecretName(t *testing.T) {
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
		{"X-Auth-User", true},
		{"Authorisation-Hint", true},
		{"author", true}, // "auth" anywhere: redacting too much is safe
		// Query parameter names: the same rule.
		{"access_token", true},
		{"client_secret", true},
		{"api_key", true},
		{"apikey", true},
		{"X-Amz-Credential", true},
		{"X-Amz-Signature", true},
		{"X-Goog-Signature", true},
		{"passwd", true},
		{"oauth_nonce", true},
		// Whole parts only: sig, pwd, pass, jwt.
		{"sig", true},
		{"SIG", true},
		{"hmac_sig", true},
		{"hmacSig", true},
		{"sig2", true},
		{"pwd", true},
		{"pass", true},
		{"jwt", true},
		{"id_jwt", true},
		// Not secret.
		{"Content-Type", false},
		{"Accept", false},
		{"User-Agent", false},
		{"X-Request-Id", false},
		{"X-Api", false},
		{"Cookie2", false},
		{"signal", false},
		{"design", false},
		{"passenger", false},
		{"compass", false},
		{"jwtish", false},
		{"x", false},
		{"page", false},
		{"sort", false},
		{"If-None-Match", false},
		{"", false},
	}
	for _, tc := range tests {
		if got := domain.IsSecretName(tc.name); got != tc.want {
			t.Errorf("IsSecretName(%q) = %v, want %v", tc.name, got, tc.want)
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

func TestRedactURL(t *testing.T) {
	t.Parallel()
	const r = domain.Redacted
	tests := []struct{ in, want string }{
		// No query, fragment or user information: unchanged.
		{"", ""},
		{"http://h/p", "http://h/p"},
		{"https://api.example.com:8443/v1/things", "https://api.example.com:8443/v1/things"},
		{"http://h/p?", "http://h/p?"},
		// Secret values replaced, everything else kept byte for byte.
		{"http://h/p?access_token=s3cr3t&x=1", "http://h/p?access_token=" + r + "&x=1"},
		{"http://h/p?x=1&sig=abc%2Fdef&y=%20", "http://h/p?x=1&sig=" + r + "&y=%20"},
		{"http://h/p?b=2&a=1&token=t", "http://h/p?b=2&a=1&token=" + r}, // order kept
		{"http://h/p?token=", "http://h/p?token=" + r},
		{"http://h/p?token", "http://h/p?token"}, // no value to hide
		{"http://h/p?x=token", "http://h/p?x=token"},
		{"http://h/p?Signature=a&X-Amz-Credential=b&X-Amz-Date=c", "http://h/p?Signature=" + r + "&X-Amz-Credential=" + r + "&X-Amz-Date=c"},
		// Repeated parameters: every one.
		{"http://h/?sig=a&sig=b&x=1&sig=c", "http://h/?sig=" + r + "&sig=" + r + "&x=1&sig=" + r},
		// Encoded names are decoded before matching.
		{"http://h/?%74oken=a&acc%65ss_key=b", "http://h/?%74oken=" + r + "&acc%65ss_key=" + r},
		{"http://h/?api+key=a", "http://h/?api+key=" + r},
		{"http://h/?to%zzken=a", "http://h/?to%zzken=a"}, // undecodable, and not secret as written
		// ';' separates too, as some servers read it.
		{"http://h/?a=1;token=t", "http://h/?a=1;token=" + r},
		{"http://h/?a=1&&token=t&", "http://h/?a=1&&token=" + r + "&"},
		// Fragments: parameters there are redacted by the same rule, and a '?'
		// inside the fragment is not a query.
		{"http://h/p#access_token=t&state=s", "http://h/p#access_token=" + r + "&state=s"},
		{"http://h/p?x=1#frag", "http://h/p?x=1#frag"},
		{"http://h/p#/route?token=t", "http://h/p#/route?token=" + r},
		{"http://h/p?sig=a#sig=b", "http://h/p?sig=" + r + "#sig=" + r},
		// User information (refused at submission; hidden anyway).
		{"http://user:pw@h/p?x=1", "http://%5Bredacted%5D@h/p?x=1"},
		{"http://tok@h", "http://%5Bredacted%5D@h"},
		{"http://h/p@q", "http://h/p@q"}, // '@' in the path is not user information
	}
	for _, tc := range tests {
		got := domain.RedactURL(tc.in)
		if got != tc.want {
			t.Errorf("RedactURL(%q)\n = %q\nwant %q", tc.in, got, tc.want)
			continue
		}
		if tc.in == "" {
			continue
		}
		// Still a URL, with the same scheme, host, path and non-secret parameters.
		in, err1 := url.Parse(tc.in)
		out, err2 := url.Parse(got)
		if err1 != nil || err2 != nil {
			t.Errorf("RedactURL(%q) = %q: parse %v / %v", tc.in, got, err1, err2)
			continue
		}
		if in.Scheme != out.Scheme || in.Host != out.Host || in.Path != out.Path {
			t.Errorf("RedactURL(%q) = %q changed scheme, host or path", tc.in, got)
		}
		q := out.Query()
		for name, vals := range in.Query() {
			for i, v := range vals {
				if v == "" {
					continue // "?token" has no value to hide
				}
				want := v
				if domain.IsSecretName(name) {
					want = r
				}
				if i >= len(q[name]) || q[name][i] != want {
					t.Errorf("RedactURL(%q) = %q: parameter %s[%d] = %v, want %q", tc.in, got, name, i, q[name], want)
				}
			}
		}
	}
}
