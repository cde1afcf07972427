// Package egress builds the HTTP client Aquifer uses for every outbound
// request: to upstreams, pool members and webhook receivers.
//
// The client enforces a domain.DestinationPolicy where it cannot be
// bypassed: at dial time it resolves the host itself, checks every address
// and connects only to an address it checked (so DNS rebinding cannot swap
// in another one), and it refuses redirects to denied hosts before
// following them. A refusal is an error wrapping
// *domain.DestinationDeniedError.
package egress

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Options configure the client.
type Options struct {
	// MaxIdleConnsPerHost bounds kept-alive connections per destination.
	// Default 256.
	MaxIdleConnsPerHost int
	// DialTimeout bounds connection setup, the host lookup included.
	// Default 10s.
	DialTimeout time.Duration
	// MaxRedirects is how many redirects are followed. Default 10.
	MaxRedirects int
	// Policy decides where requests may go when their context carries no
	// policy of its own (see WithPolicy). Nil means domain's default: the
	// built-in denials (link-local and cloud metadata) only.
	Policy *domain.DestinationPolicy
	// Resolver looks up host names. Default net.DefaultResolver.
	Resolver Resolver
	// Dial connects to one checked "ip:port". Default a net.Dialer with 30s
	// keep-alives. Tests inject fakes.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// NetHTTPForPlainHTTP sends http:// requests with net/http's Transport
	// too, instead of Aquifer's own HTTP/1.1 client (h1Transport). Tests
	// use it to hold both to the same rules.
	NetHTTPForPlainHTTP bool
}

// idleConnTimeout closes a kept-alive connection nobody used for this long.
const idleConnTimeout = 90 * time.Second

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// NewClient returns an *http.Client for outbound dispatch. It has no overall
// timeout: every attempt carries its own deadline in its context. It does not
// use proxy settings from the environment, so where a request goes is decided
// by the job and Aquifer's configuration only, and it does not decompress
// responses behind the caller's back. http:// requests go through Aquifer's
// own HTTP/1.1 client (h1Transport, cheaper per request than net/http's);
// https:// ones, and the rare http:// requests it leaves to net/http, through
// net/http's Transport with HTTP/2. Both dial through the same guard.
func NewClient(o Options) *http.Client {
	if o.MaxIdleConnsPerHost <= 0 {
		o.MaxIdleConnsPerHost = 256
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.MaxRedirects <= 0 {
		o.MaxRedirects = 10
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.Dial == nil {
		o.Dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	rt := &policyTransport{fallback: o.Policy, newTransport: func(p *domain.DestinationPolicy) *transport {
		g := &guard{policy: p, resolver: o.Resolver, dial: o.Dial, timeout: o.DialTimeout}
		t := &transport{std: newTransport(o, g.DialContext)}
		if !o.NetHTTPForPlainHTTP {
			t.h1 = &h1Transport{dial: g.DialContext, maxIdle: o.MaxIdleConnsPerHost,
				idleTimeout: idleConnTimeout, staleAfter: staleCheckAfter}
		}
		return t
	}}
	maxRedirects := o.MaxRedirects
	return &http.Client{
		Transport: rt,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return http.ErrUseLastResponse
			}
			// Refuse early what is refused anyway: a literal denied address
			// or a denied name is never dialled. Names that resolve to a
			// denied address are caught at dial time.
			return rt.policyOf(req.Context()).CheckHost(req.URL.Hostname())
		},
	}
}

func newTransport(o Options, dial func(ctx context.Context, network, address string) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		Proxy:             nil,
		DialContext:       dial,
		ForceAttemptHTTP2: true,
		// Relay bodies exactly as the upstream sent them: no transparent
		// gzip (a caller who wants compression sets Accept-Encoding itself).
		DisableCompression:    true,
		MaxIdleConns:          4 * o.MaxIdleConnsPerHost,
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		IdleConnTimeout:       idleConnTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// transport is one policy's pair of transports.
type transport struct {
	h1  *h1Transport // nil with Options.NetHTTPForPlainHTTP
	std *http.Transport
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.h1 != nil && t.h1.handles(req) {
		return t.h1.RoundTrip(req)
	}
	return t.std.RoundTrip(req)
}

func (t *transport) CloseIdleConnections() {
	if t.h1 != nil {
		t.h1.CloseIdleConnections()
	}
	t.std.CloseIdleConnections()
}
