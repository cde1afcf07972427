package egress

import (
	"context"
	"net/http"
	"sync"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// WithPolicy returns a context whose requests go through the egress client
// under p instead of Options.Policy: it replaces the global policy, so build
// p with domain.NewDestinationPolicy(global, tenant) to keep the global
// rules. Build one policy per tenant and reuse it; equal policies share
// connection pools. (The context key lives in domain, so the app can set it
// without importing this adapter.)
func WithPolicy(ctx context.Context, p *domain.DestinationPolicy) context.Context {
	return domain.WithDestinationPolicy(ctx, p)
}

// PolicyFrom returns the policy WithPolicy put in ctx, or nil.
func PolicyFrom(ctx context.Context) *domain.DestinationPolicy {
	return domain.DestinationPolicyFrom(ctx)
}

// policyTransport sends each request through a transport of its own policy.
// A kept-alive connection was checked against the policy it was dialled
// under, so connection pools are never shared between policies: otherwise a
// request under a strict policy could reuse a connection a lenient one
// opened to an address the strict one forbids.
type policyTransport struct {
	fallback     *domain.DestinationPolicy
	newTransport func(*domain.DestinationPolicy) *transport

	mu       sync.Mutex
	byPolicy map[string]*transport // by DestinationPolicy.String()
}

func (t *policyTransport) policyOf(ctx context.Context) *domain.DestinationPolicy {
	if p := PolicyFrom(ctx); p != nil {
		return p
	}
	return t.fallback
}

func (t *policyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.transport(t.policyOf(req.Context())).RoundTrip(req)
}

func (t *policyTransport) transport(p *domain.DestinationPolicy) *transport {
	key := p.String()
	t.mu.Lock()
	defer t.mu.Unlock()
	tr, ok := t.byPolicy[key]
	if !ok {
		if t.byPolicy == nil {
			t.byPolicy = map[string]*transport{}
		}
		tr = t.newTransport(p)
		t.byPolicy[key] = tr
	}
	return tr
}

// CloseIdleConnections closes the idle connections of every policy's pool
// (http.Client.CloseIdleConnections calls it).
func (t *policyTransport) CloseIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tr := range t.byPolicy {
		tr.CloseIdleConnections()
	}
}
