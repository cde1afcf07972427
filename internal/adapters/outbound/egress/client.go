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
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
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

// NewClient returns the client for outbound dispatch. It has no overall
// timeout: every attempt carries its own deadline in its context. It does not
// use proxy settings from the environment, so where a request goes is decided
// by the job and Aquifer's configuration only, and it does not decompress
// responses behind the caller's back. http:// requests go through Aquifer's
// own HTTP/1.1 client (h1Transport, cheaper per request than net/http's);
// https:// ones, and the rare http:// requests it leaves to net/http, through
// net/http's Transport with HTTP/2. Both dial through the same guard.
func NewClient(o Options) *Client {
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
	return &Client{Client: &http.Client{
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
	}}
}

// Client is the outbound client: an *http.Client whose Do sends the first
// hop of a request straight to the transport.
//
// net/http's Client.Do begins every request by copying its headers and URL
// for the redirects it might follow: a map and a slice of values per
// request, about a dozen allocations for a dispatch and its webhook, and
// almost never used. Do sends the request first and hands it to net/http
// only when the answer is one net/http would follow (301, 302, 303, 307 or
// 308). net/http then runs its own redirect rules from that answer, which
// it is given rather than asking for again, so the destination sees the
// request once, and everything after the first hop (method and body
// changes, which headers cross to another host, CheckRedirect's policy
// check and its cap) is net/http's. Errors are the *url.Error net/http
// returns. Requests whose first hop net/http prepares itself (a URL with
// user info, no Header, a RequestURI) and clients with a Jar or a Timeout
// go through net/http whole.
type Client struct {
	*http.Client
}

// Do sends req and returns its response, following redirects as
// http.Client.Do does.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.User != nil || req.Header == nil || req.RequestURI != "" ||
		c.Jar != nil || c.Timeout != 0 || c.Transport == nil {
		return c.Client.Do(req)
	}
	resp, err := c.Transport.RoundTrip(req)
	if err != nil {
		if tlsErr, ok := err.(tls.RecordHeaderError); ok && string(tlsErr.RecordHeader[:]) == "HTTP/" {
			err = http.ErrSchemeMismatch // as net/http reports an http:// server on an https:// URL
		}
		return nil, &url.Error{Op: urlErrorOp(req.Method), URL: req.URL.String(), Err: err}
	}
	if resp == nil {
		return nil, &url.Error{Op: urlErrorOp(req.Method), URL: req.URL.String(),
			Err: fmt.Errorf("http: RoundTripper implementation (%T) returned a nil *Response with a nil error", c.Transport)}
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		follow := *c.Client
		follow.Transport = &answered{resp: resp, rt: c.Transport}
		return follow.Do(req)
	}
	return resp, nil
}

// answered is the transport of a request whose first hop was already
// sent: its first round trip returns that hop's response, the rest go to rt.
type answered struct {
	resp *http.Response
	rt   http.RoundTripper
}

func (a *answered) RoundTrip(req *http.Request) (*http.Response, error) {
	if resp := a.resp; resp != nil {
		a.resp = nil
		return resp, nil
	}
	return a.rt.RoundTrip(req)
}

// urlErrorOp is the Op of the *url.Error net/http's Client returns for a
// request with this method: "Get" for none, "Post" for POST.
func urlErrorOp(method string) string {
	if method == "" {
		return "Get"
	}
	for i := 0; i < len(method); i++ {
		if method[i] < ' ' || method[i] > '~' {
			return method // net/http lowers printable ASCII only
		}
	}
	return method[:1] + strings.ToLower(method[1:])
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
