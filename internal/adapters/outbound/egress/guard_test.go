package egress_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/egress"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// fakeResolver answers from a table; a host with several answers gets the
// next one on each lookup (the last one repeats), like a rebinding DNS server.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	lookups map[string]int
}

func (r *fakeResolver) lookupsOf(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups[host]
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	n := r.lookups[host]
	r.lookups[host] = n + 1
	return seq[min(n, len(seq)-1)], nil
}

// spyDialer records every address dialled and connects for real, after
// rewriting addresses listed in via (so a "public" test address can stand
// for a loopback server).
type spyDialer struct {
	via    map[string]string
	mu     sync.Mutex
	dialed []string
}

func (d *spyDialer) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, address)
	d.mu.Unlock()
	if to, ok := d.via[address]; ok {
		address = to
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

func (d *spyDialer) addresses() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

// assertNeverDialed fails if any dialled address starts with one of hosts.
func (d *spyDialer) assertNeverDialed(t *testing.T, hosts ...string) {
	t.Helper()
	for _, a := range d.addresses() {
		for _, h := range hosts {
			if strings.HasPrefix(a, h) {
				t.Fatalf("dialled %s; every dial: %v", a, d.addresses())
			}
		}
	}
}

// transportMode picks the transport for http:// requests: every test here
// runs against both, Aquifer's own HTTP/1.1 client and net/http's.
type transportMode struct {
	name    string
	netHTTP bool // Options.NetHTTPForPlainHTTP
}

func forBoth(t *testing.T, test func(t *testing.T, m transportMode)) {
	for _, m := range []transportMode{{"h1", false}, {"net-http", true}} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			test(t, m)
		})
	}
}

type testBundle struct {
	mode     transportMode
	upstream *httptest.Server
	port     string // the upstream's port
	resolver *fakeResolver
	dialer   *spyDialer
}

// setup starts a loopback upstream that answers "ok" on / and redirects
// /redirect?to=URL there.
func setup(t *testing.T, m transportMode) *testBundle {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if to := r.URL.Query().Get("to"); r.URL.Path == "/redirect" && to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return &testBundle{
		mode:     m,
		upstream: srv,
		port:     port,
		resolver: &fakeResolver{answers: map[string][][]netip.Addr{}, lookups: map[string]int{}},
		dialer:   &spyDialer{via: map[string]string{}},
	}
}

func (b *testBundle) client(t *testing.T, p *domain.DestinationPolicy) *egress.Client {
	t.Helper()
	c := egress.NewClient(egress.Options{Policy: p, Resolver: b.resolver, Dial: b.dialer.Dial, NetHTTPForPlainHTTP: b.mode.netHTTP})
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// answer makes the fake resolver answer host with each list in turn.
func (b *testBundle) answer(host string, seq ...string) {
	b.resolver.mu.Lock()
	defer b.resolver.mu.Unlock()
	for _, list := range seq {
		var addrs []netip.Addr
		for _, a := range strings.Fields(list) {
			addrs = append(addrs, netip.MustParseAddr(a))
		}
		b.resolver.answers[host] = append(b.resolver.answers[host], addrs)
	}
}

func (b *testBundle) url(host, path string) string {
	return "http://" + net.JoinHostPort(host, b.port) + path
}

func get(ctx context.Context, t *testing.T, c *egress.Client, url string) (string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body), nil
}

func mustOK(ctx context.Context, t *testing.T, c *egress.Client, url string) {
	t.Helper()
	body, err := get(ctx, t, c, url)
	if err != nil || body != "ok" {
		t.Fatalf("GET %s = %q, %v; want ok", url, body, err)
	}
}

// mustDeny asserts that GET url fails with a *DestinationDeniedError whose
// rule is rule, and returns it.
func mustDeny(ctx context.Context, t *testing.T, c *egress.Client, url, rule string) *domain.DestinationDeniedError {
	t.Helper()
	body, err := get(ctx, t, c, url)
	var d *domain.DestinationDeniedError
	if !errors.As(err, &d) {
		t.Fatalf("GET %s = %q, %v; want a *DestinationDeniedError", url, body, err)
	}
	if d.Rule != rule {
		t.Fatalf("GET %s refused by %q, want %q (%v)", url, d.Rule, rule, err)
	}
	if domain.CodeOf(err) != domain.CodeInvalid {
		t.Fatalf("CodeOf(%v) = %s", err, domain.CodeOf(err))
	}
	return d
}

func policy(t *testing.T, r domain.DestinationRules, more ...domain.DestinationRules) *domain.DestinationPolicy {
	t.Helper()
	p, err := domain.NewDestinationPolicy(r, more...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	metadataRule = "link-local / cloud metadata address"
	privateRule  = "private or loopback address (deny_private)"
)

// The test: a redirect to the metadata address is refused, and no
// connection to it is ever attempted.
func TestRedirectToMetadataRefused(t *testing.T) {
	forBoth(t, func(t *testing.T, m transportMode) {
		b := setup(t, m)
		c := b.client(t, nil)
		d := mustDeny(t.Context(), t, c, b.url("127.0.0.1", "/redirect?to=http://169.254.169.254/latest/meta-data"), metadataRule)
		if d.IP != netip.MustParseAddr("169.254.169.254") {
			t.Fatalf("refused %+v", d)
		}
		b.dialer.assertNeverDialed(t, "169.254.")
		if got := b.dialer.addresses(); len(got) != 1 || got[0] != "127.0.0.1:"+b.port {
			t.Fatalf("dials %v, want only the upstream", got)
		}
	})
}

// A redirect to the metadata address spelt as a number (as inet_aton reads
// it) is refused as that address, before any lookup or dial.
func TestRedirectToNumericMetadataRefused(t *testing.T) {
	forBoth(t, func(t *testing.T, m transportMode) {
		for _, host := range []string{"2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.43518"} {
			b := setup(t, m)
			b.answer(host, "169.254.169.254") // would a lookup happen, it would be counted
			c := b.client(t, nil)
			d := mustDeny(t.Context(), t, c, b.url("127.0.0.1", "/redirect?to=http://"+host+"/latest/meta-data"), metadataRule)
			if d.IP != netip.MustParseAddr("169.254.169.254") {
				t.Fatalf("%s: refused %+v", host, d)
			}
			if n := b.resolver.lookupsOf(host); n != 0 {
				t.Fatalf("%s was looked up %d times", host, n)
			}
			if got := b.dialer.addresses(); len(got) != 1 || got[0] != "127.0.0.1:"+b.port {
				t.Fatalf("%s: dials %v, want only the upstream", host, got)
			}
		}
	})
}

// A redirect to a name the resolver answers with the metadata address gets
// past the redirect check (a name) and is refused at dial time.
func TestRedirectToNameResolvingToMetadataRefused(t *testing.T) {
	forBoth(t, func(t *testing.T, m transportMode) {
		b := setup(t, m)
		b.answer("imds.attacker.test", "169.254.169.254")
		c := b.client(t, nil)
		mustDeny(t.Context(), t, c, b.url("127.0.0.1", "/redirect?to=http://imds.attacker.test/latest/meta-data"), metadataRule)
		b.dialer.assertNeverDialed(t, "169.254.")
	})
}

// DNS rebinding: the first lookup answers an allowed address, the next one
// the metadata address. Each dial checks the address it connects to.
func TestRebindingRefusedAtEachDial(t *testing.T) {
	forBoth(t, func(t *testing.T, m transportMode) {
		b := setup(t, m)
		b.answer("rebind.test", "203.0.113.10", "169.254.169.254")
		b.dialer.via["203.0.113.10:"+b.port] = "127.0.0.1:" + b.port // the "public" address is the loopback upstream
		c := b.client(t, nil)
		mustOK(t.Context(), t, c, b.url("rebind.test", "/"))
		c.CloseIdleConnections() // force a new dial, and so a new lookup
		mustDeny(t.Context(), t, c, b.url("rebind.test", "/"), metadataRule)
		b.dialer.assertNeverDialed(t, "169.254.")
	})
}

// Of several resolved addresses only the allowed ones are dialled.
func TestDeniedAddressesSkipped(t *testing.T) {
	forBoth(t, func(t *testing.T, m transportMode) {
		b := setup(t, m)
		b.answer("mixed.test", "169.254.169.254 ::ffff:169.254.169.254 127.0.0.1")
		c := b.client(t, nil)
		mustOK(t.Context(), t, c, b.url("mixed.test", "/"))
		if got := b.dialer.addresses(); len(got) != 1 || got[0] != "127.0.0.1:"+b.port {
			t.Fatalf("dials %v, want only 127.0.0.1", got)
		}
	})
}

func TestMappedMetadataRefused(t *testing.T) {
	forBoth(t, func(t *testing.T, m transportMode) {
		b := setup(t, m)
		b.answer("mapped.test", "::ffff:169.254.169.254")
		c := b.client(t, nil)
		mustDeny(t.Context(), t, c, "http://[::ffff:169.254.169.254]/latest/meta-data", metadataRule)
		mustDeny(t.Context(), t, c, b.url("127.0.0.1", "/redirect?to=http://[::ffff:a9fe:a9fe]/"), metadataRule)
		mustDeny(t.Context(), t, c, "http://mapped.test/", metadataRule)
		mustDeny(t.Context(), t, c, "http://[fd00:ec2::254]/", metadataRule)
		mustDeny(t.Context(), t, c, "http://169.254.169.254./", metadataRule)
		lookups := b.resolver.lookupsOf("metadata.google.internal")
		mustDeny(t.Context(), t, c, "http://metadata.google.internal/computeMetadata/v1/", "cloud metadata host name")
		if b.resolver.lookupsOf("metadata.google.internal") != lookups {
			t.Fatal("a refused name was looked up")
		}
		b.dialer.assertNeverDialed(t, "169.254.", "[::ffff:169.254", "[fd00:ec2")
		if got := b.dialer.addresses(); len(got) != 1 {
			t.Fatalf("dials %v, want only the redirecting upstream", got)
		}
	})
}

// The default policy lets loopback through (every test upstream is on
// loopback); deny_private refuses it, by name and by address.
func TestDenyPrivate(t *testing.T) {
	forBoth(t, func(t *testing.T, m transportMode) {
		b := setup(t, m)
		b.answer("localhost", "127.0.0.1 ::1")
		mustOK(t.Context(), t, b.client(t, nil), b.url("localhost", "/"))

		strict := b.client(t, policy(t, domain.DestinationRules{DenyPrivate: true}))
		before := len(b.dialer.addresses())
		d := mustDeny(t.Context(), t, strict, b.url("localhost", "/"), privateRule)
		if d.Host != "localhost" || d.IP != netip.MustParseAddr("127.0.0.1") {
			t.Fatalf("refused %+v", d)
		}
		if !strings.Contains(d.Error(), "localhost (127.0.0.1)") || strings.Contains(domain.PublicMessage(d), "127.0.0.1") {
			t.Fatalf("Error() %q / public %q", d.Error(), domain.PublicMessage(d))
		}
		mustDeny(t.Context(), t, strict, b.url("127.0.0.1", "/"), privateRule)
		mustDeny(t.Context(), t, strict, b.url("::1", "/"), privateRule)
		if got := b.dialer.addresses(); len(got) != before {
			t.Fatalf("deny_private dialled %v", got[before:])
		}
	})
}

func TestAllowEntries(t *testing.T) {
	forBoth(t, func(t *testing.T, m transportMode) {
		b := setup(t, m)
		b.answer("api.vendor.test", "127.0.0.1")
		b.answer("other.test", "127.0.0.1")
		c := b.client(t, policy(t, domain.DestinationRules{Allow: []string{"*.vendor.test", "127.0.0.2"}, DenyPrivate: true}))
		// A name allowed by name still resolves to a private address.
		mustDeny(t.Context(), t, c, b.url("api.vendor.test", "/"), privateRule)

		c = b.client(t, policy(t, domain.DestinationRules{Allow: []string{"api.vendor.test", "127.0.0.1"}, DenyPrivate: true}))
		mustOK(t.Context(), t, c, b.url("api.vendor.test", "/"))
		mustOK(t.Context(), t, c, b.url("other.test", "/")) // its address is allowed
		mustOK(t.Context(), t, c, b.url("127.0.0.1", "/"))

		c = b.client(t, policy(t, domain.DestinationRules{Allow: []string{"api.vendor.test"}}))
		mustOK(t.Context(), t, c, b.url("api.vendor.test", "/"))
		mustDeny(t.Context(), t, c, b.url("other.test", "/"), "not in the allow list")
		mustDeny(t.Context(), t, c, b.url("127.0.0.1", "/"), "not in the allow list")
		// Redirects to a name outside a names-only allow list stop before any lookup.
		lookups := b.resolver.lookupsOf("other.test")
		mustDeny(t.Context(), t, c, b.url("api.vendor.test", "/redirect?to=http://other.test/"), "not in the allow list")
		if b.resolver.lookupsOf("other.test") != lookups {
			t.Fatal("a refused redirect was looked up")
		}

		c = b.client(t, policy(t, domain.DestinationRules{Deny: []string{"other.test"}}))
		mustDeny(t.Context(), t, c, b.url("other.test", "/"), `matches deny entry "other.test"`)
	})
}

// A policy in the request's context replaces Options.Policy, and requests
// under different policies never share a kept-alive connection.
func TestContextPolicyOverride(t *testing.T) {
	forBoth(t, func(t *testing.T, m transportMode) {
		b := setup(t, m)
		strict := policy(t, domain.DestinationRules{DenyPrivate: true})
		lenient := policy(t, domain.DestinationRules{})

		c := b.client(t, strict)
		mustDeny(t.Context(), t, c, b.url("127.0.0.1", "/"), privateRule)
		mustOK(egress.WithPolicy(t.Context(), lenient), t, c, b.url("127.0.0.1", "/"))

		c = b.client(t, nil)
		mustOK(t.Context(), t, c, b.url("127.0.0.1", "/")) // leaves an idle connection in the pool
		mustDeny(egress.WithPolicy(t.Context(), strict), t, c, b.url("127.0.0.1", "/"), privateRule)
		// Redirects are checked under the request's policy too.
		b.answer("evil.test", "127.0.0.1")
		noEvil := egress.WithPolicy(t.Context(), policy(t, domain.DestinationRules{Deny: []string{"evil.test"}}))
		mustDeny(noEvil, t, c, b.url("127.0.0.1", "/redirect?to=http://evil.test/"), `matches deny entry "evil.test"`)
		if b.resolver.lookupsOf("evil.test") != 0 {
			t.Fatal("a refused redirect was looked up")
		}
		if egress.PolicyFrom(egress.WithPolicy(t.Context(), strict)) != strict || egress.PolicyFrom(t.Context()) != nil {
			t.Fatal("PolicyFrom does not return what WithPolicy stored")
		}
	})
}

// Redirects are followed up to MaxRedirects; the last redirect response is
// then returned as it is.
func TestRedirectCap(t *testing.T) {
	forBoth(t, func(t *testing.T, m transportMode) {
		b := setup(t, m)
		loop := b.url("127.0.0.1", "/redirect?to=/redirect%3Fto%3D/redirect")
		c := egress.NewClient(egress.Options{NetHTTPForPlainHTTP: m.netHTTP, MaxRedirects: 2, Resolver: b.resolver, Dial: b.dialer.Dial})
		t.Cleanup(c.CloseIdleConnections)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, loop, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound {
			t.Fatalf("status %d, want the last 302", resp.StatusCode)
		}
	})
}

func TestLookupFailure(t *testing.T) {
	forBoth(t, func(t *testing.T, m transportMode) {
		b := setup(t, m)
		b.answer("empty.test", "")
		for _, url := range []string{"http://nowhere.test/", "http://empty.test/"} {
			_, err := get(t.Context(), t, b.client(t, nil), url)
			var dnsErr *net.DNSError
			if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
				t.Fatalf("GET %s: err %v, want a not-found DNS error", url, err)
			}
		}
		if len(b.dialer.addresses()) != 0 {
			t.Fatalf("dialled %v", b.dialer.addresses())
		}
	})
}
