package domain_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func mustPolicy(t *testing.T, global domain.DestinationRules, more ...domain.DestinationRules) *domain.DestinationPolicy {
	t.Helper()
	p, err := domain.NewDestinationPolicy(global, more...)
	if err != nil {
		t.Fatalf("NewDestinationPolicy: %v", err)
	}
	return p
}

// denied returns the refusal's rule, or "" when err is nil; any other error
// type fails the test.
func denied(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var d *domain.DestinationDeniedError
	if !errors.As(err, &d) {
		t.Fatalf("error %v (%T) is not a *DestinationDeniedError", err, err)
	}
	if d.Rule == "" {
		t.Fatalf("refusal %v has no rule", err)
	}
	if domain.CodeOf(err) != domain.CodeInvalid {
		t.Fatalf("CodeOf(%v) = %s, want invalid", err, domain.CodeOf(err))
	}
	return d.Rule
}

const (
	metadataRule = "link-local / cloud metadata address"
	privateRule  = "private or loopback address (deny_private)"
	notAllowed   = "not in the allow list"
)

func TestDestinationPolicyCheckIP(t *testing.T) {
	t.Parallel()
	open := domain.DestinationRules{}
	private := domain.DestinationRules{DenyPrivate: true}
	tests := []struct {
		name  string
		rules domain.DestinationRules
		host  string
		ip    string
		want  string // the rule, "" = allowed
	}{
		{"public v4", open, "api.example.com", "93.184.215.14", ""},
		{"public v6", open, "api.example.com", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", ""},
		{"loopback allowed by default", open, "localhost", "127.0.0.1", ""},
		{"v6 loopback allowed by default", open, "localhost", "::1", ""},
		{"rfc1918 allowed by default", open, "db", "10.1.2.3", ""},
		{"aws metadata", open, "169.254.169.254", "169.254.169.254", metadataRule},
		{"metadata behind a name", open, "rebind.example", "169.254.169.254", metadataRule},
		{"link-local v4", open, "x", "169.254.1.1", metadataRule},
		{"mapped metadata", open, "::ffff:169.254.169.254", "::ffff:169.254.169.254", metadataRule},
		{"mapped metadata behind a name", open, "x.example", "::ffff:a9fe:a9fe", metadataRule},
		{"nat64 metadata", open, "x.example", "64:ff9b::a9fe:a9fe", metadataRule},
		{"nat64 public", open, "x.example", "64:ff9b::5db8:d70e", ""},
		{"aws v6 metadata", open, "x", "fd00:ec2::254", metadataRule},
		{"aws v6 neighbour is not metadata", open, "x", "fd00:ec2::253", ""},
		{"link-local v6", open, "x", "fe80::1", metadataRule},
		{"link-local v6 with zone", open, "fe80::1%eth0", "fe80::1%eth0", metadataRule},
		{"alibaba metadata", open, "x", "100.100.100.200", metadataRule},
		{"alibaba neighbour", open, "x", "100.100.100.201", ""},
		{"unspecified v4", open, "0.0.0.0", "0.0.0.0", "unspecified address"},
		{"this network", open, "x", "0.1.2.3", "unspecified address"},
		{"unspecified v6", open, "::", "::", "unspecified address"},
		{"mapped unspecified", open, "x", "::ffff:0.0.0.0", "unspecified address"},
		{"unspecified even when allowed", domain.DestinationRules{Allow: []string{"0.0.0.0/8", "::/128"}}, "x", "0.0.0.0", "unspecified address"},
		{"metadata name", open, "metadata.google.internal", "10.0.0.1", "cloud metadata host name"},
		{"metadata name any case and dot", open, "Metadata.Google.Internal.", "10.0.0.1", "cloud metadata host name"},
		{"bare metadata name", open, "METADATA", "10.0.0.1", "cloud metadata host name"},

		{"private: loopback", private, "localhost", "127.0.0.1", privateRule},
		{"private: loopback range", private, "x", "127.8.9.10", privateRule},
		{"private: v6 loopback", private, "localhost", "::1", privateRule},
		{"private: mapped loopback", private, "x", "::ffff:127.0.0.1", privateRule},
		{"private: 10/8", private, "x", "10.255.0.1", privateRule},
		{"private: 172.16/12", private, "x", "172.31.255.255", privateRule},
		{"private: 172.32 is public", private, "x", "172.32.0.1", ""},
		{"private: 192.168/16", private, "x", "192.168.1.1", privateRule},
		{"private: cgnat", private, "x", "100.64.0.1", privateRule},
		{"private: ula", private, "x", "fd12:3456::1", privateRule},
		{"private: site-local", private, "x", "fec0::1", privateRule},
		{"private: link-local multicast", private, "x", "224.0.0.251", privateRule},
		{"private: v6 link-local multicast", private, "x", "ff02::fb", privateRule},
		{"private: nat64 of private", private, "x", "64:ff9b::a00:1", privateRule},
		{"private: public passes", private, "x", "8.8.8.8", ""},

		{"edge: below 10/8", private, "x", "9.255.255.255", ""},
		{"edge: above 10/8", private, "x", "11.0.0.0", ""},
		{"edge: below 127/8", private, "x", "126.255.255.255", ""},
		{"edge: above 127/8", private, "x", "128.0.0.0", ""},
		{"edge: above 0/8", private, "x", "1.0.0.0", ""},
		{"edge: below 172.16/12", private, "x", "172.15.255.255", ""},
		{"edge: below 192.168/16", private, "x", "192.167.255.255", ""},
		{"edge: above 192.168/16", private, "x", "192.169.0.0", ""},
		{"edge: above cgnat", private, "x", "100.128.0.0", ""},
		{"edge: below link-local", private, "x", "169.253.255.255", ""},
		{"edge: above link-local", private, "x", "169.255.0.0", ""},
		{"edge: end of fe80::/10", private, "x", "febf:ffff::1", metadataRule},
		{"edge: below fe80::/10", private, "x", "fe7f:ffff::1", ""},
		{"edge: below fc00::/7", private, "x", "fbff:ffff::1", ""},
		{"edge: not loopback", private, "x", "::2", ""},
		{"edge: routable multicast", private, "x", "224.0.1.1", ""},
		{"edge: site-local multicast", private, "x", "ff05::1", ""},
		{"edge: ULA beside v6 metadata", private, "x", "fd00:ec2::255", privateRule},

		{"deny cidr", domain.DestinationRules{Deny: []string{"203.0.113.0/24"}}, "x", "203.0.113.9", `matches deny entry "203.0.113.0/24"`},
		{"deny ip", domain.DestinationRules{Deny: []string{"203.0.113.9"}}, "x", "203.0.113.9", `matches deny entry "203.0.113.9"`},
		{"deny ip catches mapped form", domain.DestinationRules{Deny: []string{"203.0.113.9"}}, "x", "::ffff:203.0.113.9", `matches deny entry "203.0.113.9"`},
		{"deny mapped cidr catches v4", domain.DestinationRules{Deny: []string{"::ffff:203.0.113.0/120"}}, "x", "203.0.113.9", `matches deny entry "203.0.113.0/24"`},
		{"deny name", domain.DestinationRules{Deny: []string{"Evil.Example."}}, "evil.example", "93.184.215.14", `matches deny entry "evil.example"`},
		{"deny wildcard", domain.DestinationRules{Deny: []string{"*.internal"}}, "db.corp.internal", "93.184.215.14", `matches deny entry "*.internal"`},
		{"deny wildcard skips apex", domain.DestinationRules{Deny: []string{"*.internal"}}, "internal", "93.184.215.14", ""},
		{"deny wins over allow", domain.DestinationRules{Allow: []string{"*.example.com"}, Deny: []string{"admin.example.com"}}, "admin.example.com", "93.184.215.14", `matches deny entry "admin.example.com"`},
		{"deny name does not match a literal", domain.DestinationRules{Deny: []string{"1.2.3.4.example"}}, "1.2.3.4", "1.2.3.4", ""},

		{"allow name", domain.DestinationRules{Allow: []string{"api.example.com"}}, "API.example.com.", "93.184.215.14", ""},
		{"allow name, other host", domain.DestinationRules{Allow: []string{"api.example.com"}}, "www.example.com", "93.184.215.14", notAllowed},
		{"allow wildcard", domain.DestinationRules{Allow: []string{"*.example.com"}}, "a.b.example.com", "93.184.215.14", ""},
		{"allow wildcard skips apex", domain.DestinationRules{Allow: []string{"*.example.com"}}, "example.com", "93.184.215.14", notAllowed},
		{"allow wildcard is not a substring", domain.DestinationRules{Allow: []string{"*.example.com"}}, "badexample.com", "93.184.215.14", notAllowed},
		{"allow cidr", domain.DestinationRules{Allow: []string{"203.0.113.0/24"}}, "x.example", "203.0.113.7", ""},
		{"allow cidr, other address", domain.DestinationRules{Allow: []string{"203.0.113.0/24"}}, "x.example", "198.51.100.7", notAllowed},
		{"allow v6 cidr", domain.DestinationRules{Allow: []string{"2001:db8::/32"}}, "x", "2001:db8::7", ""},
		{"allowed name to metadata", domain.DestinationRules{Allow: []string{"*.example.com"}}, "a.example.com", "169.254.169.254", metadataRule},
		{"allowed name to private", domain.DestinationRules{Allow: []string{"*.example.com"}, DenyPrivate: true}, "a.example.com", "10.0.0.1", privateRule},
		{"wide allow does not lift metadata", domain.DestinationRules{Allow: []string{"0.0.0.0/0"}}, "x", "169.254.169.254", metadataRule},
		{"wide allow does not lift private", domain.DestinationRules{Allow: []string{"0.0.0.0/0"}, DenyPrivate: true}, "x", "10.1.2.3", privateRule},
		{"explicit allow lifts metadata", domain.DestinationRules{Allow: []string{"169.254.169.254"}}, "x", "169.254.169.254", ""},
		{"explicit range lifts link-local", domain.DestinationRules{Allow: []string{"169.254.0.0/16"}}, "x", "169.254.1.2", ""},
		{"explicit allow lifts mapped metadata", domain.DestinationRules{Allow: []string{"169.254.169.254"}}, "x", "::ffff:169.254.169.254", ""},
		{"explicit allow lifts v6 metadata", domain.DestinationRules{Allow: []string{"fd00:ec2::254"}}, "x", "fd00:ec2::254", ""},
		{"explicit allow lifts private", domain.DestinationRules{Allow: []string{"0.0.0.0/0", "10.1.0.0/16"}, DenyPrivate: true}, "x", "10.1.2.3", ""},
		{"explicit allow lifts only its range", domain.DestinationRules{Allow: []string{"0.0.0.0/0", "10.1.0.0/16"}, DenyPrivate: true}, "x", "10.2.0.1", privateRule},
		{"explicit allow of loopback", domain.DestinationRules{Allow: []string{"127.0.0.1", "localhost"}, DenyPrivate: true}, "localhost", "127.0.0.1", ""},
		{"allow metadata by name", domain.DestinationRules{Allow: []string{"metadata.google.internal", "0.0.0.0/0"}}, "metadata.google.internal", "10.0.0.1", ""},
		{"wildcard does not lift metadata name", domain.DestinationRules{Allow: []string{"*.google.internal"}}, "metadata.google.internal", "10.0.0.1", "cloud metadata host name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := mustPolicy(t, tc.rules)
			if got := denied(t, p.CheckIP(tc.host, netip.MustParseAddr(tc.ip))); got != tc.want {
				t.Fatalf("CheckIP(%q, %s) rule %q, want %q", tc.host, tc.ip, got, tc.want)
			}
		})
	}
}

func TestDestinationPolicyCheckHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		rules domain.DestinationRules
		host  string
		want  string
	}{
		{"name passes", domain.DestinationRules{}, "api.example.com", ""},
		{"literal metadata", domain.DestinationRules{}, "169.254.169.254", metadataRule},
		{"bracketed v6 literal", domain.DestinationRules{}, "[fe80::1]", metadataRule},
		{"mapped literal", domain.DestinationRules{}, "::ffff:169.254.169.254", metadataRule},
		{"literal with a trailing dot", domain.DestinationRules{}, "169.254.169.254.", metadataRule},
		{"zoned literal", domain.DestinationRules{}, "fe80::1%en0", metadataRule},
		{"literal loopback passes by default", domain.DestinationRules{}, "127.0.0.1", ""},
		{"literal loopback with deny_private", domain.DestinationRules{DenyPrivate: true}, "127.0.0.1", privateRule},
		{"localhost is a name: decided at dial time", domain.DestinationRules{DenyPrivate: true}, "localhost", ""},
		{"metadata name", domain.DestinationRules{}, "metadata.google.internal.", "cloud metadata host name"},
		{"deny name", domain.DestinationRules{Deny: []string{"*.corp"}}, "Wiki.CORP", `matches deny entry "*.corp"`},
		{"allow names only: other name refused", domain.DestinationRules{Allow: []string{"api.example.com"}}, "other.example.com", notAllowed},
		{"allow names only: named", domain.DestinationRules{Allow: []string{"api.example.com"}}, "api.example.com", ""},
		{"allow with cidr: a name waits for dial time", domain.DestinationRules{Allow: []string{"api.example.com", "203.0.113.0/24"}}, "other.example.com", ""},
		{"allow with cidr: literal outside", domain.DestinationRules{Allow: []string{"203.0.113.0/24"}}, "198.51.100.1", notAllowed},
		{"allow with cidr: literal inside", domain.DestinationRules{Allow: []string{"203.0.113.0/24"}}, "203.0.113.1", ""},
		{"empty host", domain.DestinationRules{}, "", "no host"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := mustPolicy(t, tc.rules)
			if got := denied(t, p.CheckHost(tc.host)); got != tc.want {
				t.Fatalf("CheckHost(%q) rule %q, want %q", tc.host, got, tc.want)
			}
		})
	}
}

func TestDestinationPolicyNilIsDefault(t *testing.T) {
	t.Parallel()
	var p *domain.DestinationPolicy
	if got := denied(t, p.CheckIP("x", netip.MustParseAddr("169.254.169.254"))); got != metadataRule {
		t.Fatalf("nil policy: rule %q, want %q", got, metadataRule)
	}
	if err := p.CheckHost("127.0.0.1"); err != nil {
		t.Fatalf("nil policy refuses loopback: %v", err)
	}
	if p.String() != mustPolicy(t, domain.DestinationRules{}).String() {
		t.Fatalf("nil policy %q differs from the empty one %q", p.String(), mustPolicy(t, domain.DestinationRules{}).String())
	}
}

// A tenant's rules add to the global ones: every set must pass.
func TestDestinationPolicyCombined(t *testing.T) {
	t.Parallel()
	global := domain.DestinationRules{Deny: []string{"*.corp"}, DenyPrivate: true}
	tenant := domain.DestinationRules{Allow: []string{"*.vendor.com", "198.51.100.0/24"}}
	p := mustPolicy(t, global, tenant)
	check := func(host, ip, want string) {
		t.Helper()
		if got := denied(t, p.CheckIP(host, netip.MustParseAddr(ip))); got != want {
			t.Errorf("CheckIP(%q, %s) rule %q, want %q", host, ip, got, want)
		}
	}
	check("api.vendor.com", "93.184.215.14", "")
	check("api.other.com", "93.184.215.14", notAllowed)                // the tenant's allow list
	check("api.other.com", "198.51.100.4", "")                         // its CIDR entry
	check("api.vendor.com", "10.0.0.1", privateRule)                   // the global deny_private
	check("wiki.corp", "93.184.215.14", `matches deny entry "*.corp"`) // the global deny list
	check("api.vendor.com", "169.254.169.254", metadataRule)           // built-in
	check("api.vendor.com", "::ffff:169.254.169.254", metadataRule)    // built-in, mapped
	check("api.vendor.com", "64:ff9b::a9fe:a9fe", metadataRule)        // built-in, NAT64
	check("api.other.com", "64:ff9b::c633:6404", "")                   // NAT64 of 198.51.100.4: the v4 form is allowed
	check("api.vendor.com.", "93.184.215.14", "")                      // trailing dot
	check("x.vendor.com", "::ffff:10.0.0.1", privateRule)              // global deny_private, mapped
	check("metadata", "93.184.215.14", "cloud metadata host name")     // built-in name
	check("198.51.100.4", "198.51.100.4", "")                          // literal inside the allow CIDR
	check("198.51.100.4.vendor.com", "203.0.113.1", "")                // a name under the wildcard
	check("vendor.com", "203.0.113.1", notAllowed)                     // the apex is not "*.vendor.com"
	check("api.vendor.com", "0.0.0.0", "unspecified address")          // always
	check("api.vendor.com", "fe80::1", metadataRule)                   // built-in v6
	check("api.vendor.com", "fd00:ec2::254", metadataRule)             // built-in v6
	check("api.vendor.com", "100.100.100.200", metadataRule)           // built-in
	check("api.vendor.com", "127.0.0.1", privateRule)                  // global deny_private
}

// Built-in denials are lifted by an allow entry in any rule set; every set
// must still admit the destination.
func TestDestinationPolicyLiftAcrossSets(t *testing.T) {
	t.Parallel()
	meta := netip.MustParseAddr("169.254.169.254")
	p := mustPolicy(t, domain.DestinationRules{}, domain.DestinationRules{Allow: []string{"169.254.169.254"}})
	if err := p.CheckIP("x", meta); err != nil {
		t.Fatalf("tenant allow entry did not lift the built-in denial: %v", err)
	}
	p = mustPolicy(t, domain.DestinationRules{Allow: []string{"169.254.169.254"}}, domain.DestinationRules{Allow: []string{"*.vendor.com"}})
	if got := denied(t, p.CheckIP("x", meta)); got != notAllowed {
		t.Fatalf("tenant allow list bypassed: rule %q", got)
	}
	p = mustPolicy(t, domain.DestinationRules{Deny: []string{"169.254.0.0/16"}}, domain.DestinationRules{Allow: []string{"169.254.169.254"}})
	if got := denied(t, p.CheckIP("x", meta)); got != `matches deny entry "169.254.0.0/16"` {
		t.Fatalf("global deny entry bypassed: rule %q", got)
	}
	// deny_private is a rule of its set: only that set's allow entries lift it.
	p = mustPolicy(t, domain.DestinationRules{DenyPrivate: true}, domain.DestinationRules{Allow: []string{"10.0.0.1"}})
	if got := denied(t, p.CheckIP("x", netip.MustParseAddr("10.0.0.1"))); got != privateRule {
		t.Fatalf("tenant allow entry lifted the global deny_private: rule %q", got)
	}
}

func TestDestinationRulesInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		rules domain.DestinationRules
		want  []string
	}{
		{"empty", domain.DestinationRules{Allow: []string{" "}}, []string{`allow entry " ": empty entry`}},
		{"url", domain.DestinationRules{Deny: []string{"http://example.com"}}, []string{`deny entry "http://example.com": a URL`}},
		{"port", domain.DestinationRules{Allow: []string{"example.com:443"}}, []string{`allow entry "example.com:443": not a host name`}},
		{"path", domain.DestinationRules{Allow: []string{"example.com/x"}}, []string{`allow entry "example.com/x": not a valid CIDR`}},
		{"bad cidr", domain.DestinationRules{Deny: []string{"10.0.0.0/33"}}, []string{`deny entry "10.0.0.0/33": not a valid CIDR`}},
		{"zone", domain.DestinationRules{Allow: []string{"fe80::1%eth0"}}, []string{`allow entry "fe80::1%eth0": an address with a zone`}},
		{"inner wildcard", domain.DestinationRules{Allow: []string{"api.*.example.com"}}, []string{`allow entry "api.*.example.com": not a host name`}},
		{"bare star", domain.DestinationRules{Allow: []string{"*"}}, []string{`allow entry "*": not a host name`}},
		{"star only suffix", domain.DestinationRules{Allow: []string{"*."}}, []string{`allow entry "*.": not a host name`}},
		{"leading dot", domain.DestinationRules{Allow: []string{".example.com"}}, []string{`allow entry ".example.com": not a host name`}},
		{"double dot", domain.DestinationRules{Allow: []string{"a..b"}}, []string{`allow entry "a..b": not a host name`}},
		{"space inside", domain.DestinationRules{Allow: []string{"a b"}}, []string{`allow entry "a b": not a host name`}},
		{"unicode", domain.DestinationRules{Allow: []string{"bücher.example"}}, []string{`allow entry "bücher.example": non-ASCII`}},
		{"long label", domain.DestinationRules{Allow: []string{strings.Repeat("a", 64) + ".com"}}, []string{"not a host name"}},
		{"long name", domain.DestinationRules{Allow: []string{strings.Repeat("a.", 127) + "com"}}, []string{"longer than 253 bytes"}},
		{"every bad entry", domain.DestinationRules{Allow: []string{"ok.example", "bad entry"}, Deny: []string{"1.2.3.4/99"}},
			[]string{`allow entry "bad entry"`, `deny entry "1.2.3.4/99"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.rules.Validate()
			if err == nil {
				t.Fatalf("Validate(%+v) = nil", tc.rules)
			}
			if domain.CodeOf(err) != domain.CodeInvalid {
				t.Errorf("CodeOf = %s, want invalid", domain.CodeOf(err))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if p, err2 := domain.NewDestinationPolicy(domain.DestinationRules{}, tc.rules); err2 == nil || p != nil {
				t.Errorf("NewDestinationPolicy accepted a tenant's invalid rules")
			}
		})
	}
}

func TestDestinationRulesValidForms(t *testing.T) {
	t.Parallel()
	rules := domain.DestinationRules{
		Allow: []string{"API.Example.com.", "*.Example.org", "10.0.0.1", "[2001:db8::1]", "10.0.0.9/8", "::ffff:192.0.2.0/120", "under_score.example", "xn--bcher-kva.example", " padded.example "},
		Deny:  []string{"2001:db8::/32", "::ffff:1.2.3.4"},
	}
	p := mustPolicy(t, rules)
	want := `allow=[*.example.org 10.0.0.0/8 10.0.0.1/32 192.0.2.0/24 2001:db8::1/128 api.example.com padded.example under_score.example xn--bcher-kva.example] deny=[1.2.3.4/32 2001:db8::/32] deny_private=false`
	if p.String() != want {
		t.Fatalf("String() =\n %s\nwant\n %s", p, want)
	}
	// Equal rules in another order and case describe the same policy.
	same := mustPolicy(t, domain.DestinationRules{
		Allow: []string{"padded.example", "xn--bcher-kva.example", "under_score.example", "192.0.2.0/24", "10.0.0.0/8", "2001:db8::1", "10.0.0.1", "*.example.org", "api.example.com", "api.example.com"},
		Deny:  []string{"1.2.3.4", "2001:DB8::/32"},
	})
	if same.String() != p.String() {
		t.Fatalf("equal rules, different strings:\n %s\n %s", same, p)
	}
}

func TestDestinationDeniedErrorMessages(t *testing.T) {
	t.Parallel()
	p := mustPolicy(t, domain.DestinationRules{DenyPrivate: true})
	tests := []struct {
		name         string
		err          error
		text, public string
	}{
		{"literal", p.CheckHost("169.254.169.254"),
			"destination 169.254.169.254 is denied: link-local / cloud metadata address",
			"destination 169.254.169.254 is denied: link-local / cloud metadata address"},
		{"mapped literal", p.CheckHost("[::ffff:169.254.169.254]"),
			"destination ::ffff:169.254.169.254 (169.254.169.254) is denied: link-local / cloud metadata address",
			"destination ::ffff:169.254.169.254 (169.254.169.254) is denied: link-local / cloud metadata address"},
		{"resolved name: the address stays out of the public text", p.CheckIP("db.internal", netip.MustParseAddr("10.2.3.4")),
			"destination db.internal (10.2.3.4) is denied: private or loopback address (deny_private)",
			"destination db.internal is denied: private or loopback address (deny_private)"},
		{"name", p.CheckHost("Metadata.Google.Internal"),
			"destination metadata.google.internal is denied: cloud metadata host name",
			"destination metadata.google.internal is denied: cloud metadata host name"},
		{"url field", p.CheckURL("webhook_url", "http://169.254.169.254/latest/meta-data"),
			"webhook_url: destination 169.254.169.254 is denied: link-local / cloud metadata address",
			"webhook_url: destination 169.254.169.254 is denied: link-local / cloud metadata address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.err == nil {
				t.Fatal("not denied")
			}
			if tc.err.Error() != tc.text {
				t.Errorf("Error() = %q, want %q", tc.err.Error(), tc.text)
			}
			if got := domain.PublicMessage(tc.err); got != tc.public {
				t.Errorf("PublicMessage = %q, want %q", got, tc.public)
			}
		})
	}
}

func TestDestinationPolicyCheckURL(t *testing.T) {
	t.Parallel()
	p := mustPolicy(t, domain.DestinationRules{Deny: []string{"*.corp"}})
	if err := p.CheckURL("url", "https://api.example.com:8443/x?y=1"); err != nil {
		t.Fatalf("public URL refused: %v", err)
	}
	err := p.CheckURL("address", "http://[::ffff:a9fe:a9fe]:8080/")
	var d *domain.DestinationDeniedError
	if !errors.As(err, &d) || d.Field != "address" || d.IP != netip.MustParseAddr("169.254.169.254") {
		t.Fatalf("CheckURL = %v (%+v)", err, d)
	}
	if err := p.CheckURL("url", "http://WIKI.corp./"); denied(t, err) != `matches deny entry "*.corp"` {
		t.Fatalf("CheckURL(wiki.corp) = %v", err)
	}
	if err := p.CheckURL("url", "http://%zz/"); domain.CodeOf(err) != domain.CodeInvalid {
		t.Fatalf("CheckURL(unparsable) = %v", err)
	}
}

// TestNumericIPv4Hosts: hosts written as inet_aton numbers are checked as
// the address they spell, refused with the message of the dotted form; one
// the rules admit is refused anyway (Aquifer would look it up as a name),
// and one that spells no address is invalid. Nothing is looked up.
func TestNumericIPv4Hosts(t *testing.T) {
	t.Parallel()
	p := mustPolicy(t, domain.DestinationRules{DenyPrivate: true})
	const meta = "url: destination 169.254.169.254 is denied: link-local / cloud metadata address"
	const zero = "url: destination 0.0.0.0 is denied: unspecified address"
	const loop = "url: destination 127.0.0.1 is denied: private or loopback address (deny_private)"
	tests := []struct{ url, want string }{
		// The dotted form, for reference: the same message as every other spelling.
		{"http://169.254.169.254/", meta},
		{"http://2852039166/", meta},             // one 32-bit decimal
		{"http://0xa9fea9fe/", meta},             // one hex number
		{"http://0XA9FEA9FE/latest", meta},       // any case
		{"http://0251.0376.0251.0376/", meta},    // octal parts
		{"http://0xa9.0xfe.0xa9.0xfe/", meta},    // hex parts
		{"http://169.254.43518/", meta},          // a.b.c: the last part fills 16 bits
		{"http://169.16689662/", meta},           // a.b: the last part fills 24 bits
		{"http://169.254.169.254./", meta},       // trailing dot
		{"http://0251.254.0xa9.254:8080/", meta}, // mixed bases, with a port
		{"https://2852039166:443/x?y=1", meta},   // any scheme, path, query
		{"http://0:8080/", zero},                 // "0" is 0.0.0.0
		{"http://0x/", zero},                     // "0x" alone is 0
		{"http://0.0/", zero},                    //
		{"http://2130706433/", loop},             // 127.0.0.1, with deny_private
		{"http://0x7f.1/", loop},                 //
		{"http://017700000001/", loop},           // octal 127.0.0.1
		{"http://1.2.3.4.5/", "url: host 1.2.3.4.5 is not a valid IPv4 address"},
		{"http://256.1.1.1/", "url: host 256.1.1.1 is not a valid IPv4 address"},
		{"http://1.2.3.256/", "url: host 1.2.3.256 is not a valid IPv4 address"},
		{"http://1.2.65536/", "url: host 1.2.65536 is not a valid IPv4 address"},
		{"http://4294967296/", "url: host 4294967296 is not a valid IPv4 address"},
		{"http://08/", "url: host 08 is not a valid IPv4 address"},         // 8 is no octal digit
		{"http://0x1g.1/", "url: host 0x1g.1 is not a valid IPv4 address"}, // ends in a number
		{"http://1.0x1g/", ""},                                             // "0x1g" is a name label: a name
		{"http://1..2/", "url: host 1..2 is not a valid IPv4 address"},     //
		{"http://example.123/", "url: host example.123 is not a valid IPv4 address"},
		// Admitted by the rules, but not in the form Aquifer can dial.
		{"http://134744072/", "url: host 134744072 is the IPv4 address 8.8.8.8 in a non-standard form; write it as 8.8.8.8"},
		{"http://0x08080808/", "url: host 0x08080808 is the IPv4 address 8.8.8.8 in a non-standard form; write it as 8.8.8.8"},
		{"http://010.8.8.8/", "url: host 010.8.8.8 is the IPv4 address 8.8.8.8 in a non-standard form; write it as 8.8.8.8"},
		// Names and literals as before.
		{"http://8.8.8.8/", ""},
		{"http://api.example.com/", ""},
		{"http://123.example.com/", ""},
		{"http://deadbeef/", ""}, // hex digits without 0x: a name
		{"http://[::1]/", "url: destination ::1 is denied: private or loopback address (deny_private)"},
	}
	for _, tc := range tests {
		err := p.CheckURL("url", tc.url)
		got := ""
		if err != nil {
			got = domain.PublicMessage(err)
			if domain.CodeOf(err) != domain.CodeInvalid {
				t.Errorf("CheckURL(%s): code %s, want invalid", tc.url, domain.CodeOf(err))
			}
			var de *domain.Error
			var dd *domain.DestinationDeniedError
			if !(errors.As(err, &de) && de.Field == "url" || errors.As(err, &dd) && dd.Field == "url") {
				t.Errorf("CheckURL(%s) = %v: the refusal does not name the field", tc.url, err)
			}
		}
		if got != tc.want {
			t.Errorf("CheckURL(%s)\n = %q\nwant %q", tc.url, got, tc.want)
		}
	}
	// At dial time (and for redirects), CheckHost refuses them too.
	for host, rule := range map[string]string{"2852039166": metadataRule, "0x7f.1": privateRule,
		"134744072": "IPv4 address in a non-standard form", "1.2.3.4.5": "not a valid IPv4 address"} {
		if got := denied(t, p.CheckHost(host)); got != rule {
			t.Errorf("CheckHost(%s) rule %q, want %q", host, got, rule)
		}
	}
}
