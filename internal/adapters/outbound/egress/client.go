// Package egress builds the HTTP client Aquifer uses for every outbound
// request: to upstreams, pool members and webhook receivers.
package egress

import (
	"net"
	"net/http"
	"time"
)

// Options configure the client.
type Options struct {
	// MaxIdleConnsPerHost bounds kept-alive connections per destination.
	// Default 256.
	MaxIdleConnsPerHost int
	// DialTimeout bounds connection setup. Default 10s.
	DialTimeout time.Duration
	// MaxRedirects is how many redirects are followed. Default 10.
	MaxRedirects int
}

// NewClient returns an *http.Client for outbound dispatch. It has no overall
// timeout: every attempt carries its own deadline in its context. It does not
// use proxy settings from the environment, so where a request goes is decided
// by the job and Aquifer's configuration only, and it does not decompress
// responses behind the caller's back.
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
	dialer := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:             nil,
		DialContext:       dialer.DialContext,
		ForceAttemptHTTP2: true,
		// Relay bodies exactly as the upstream sent them: no transparent
		// gzip (a caller who wants compression sets Accept-Encoding itself).
		DisableCompression:    true,
		MaxIdleConns:          4 * o.MaxIdleConnsPerHost,
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	maxRedirects := o.MaxRedirects
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
}
