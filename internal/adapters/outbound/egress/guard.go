package egress

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// guard is a transport's DialContext: it resolves the host, keeps the
// addresses the policy admits and connects to those only, by address.
type guard struct {
	policy   *domain.DestinationPolicy
	resolver Resolver
	dial     func(ctx context.Context, network, address string) (net.Conn, error)
	timeout  time.Duration
}

// minPerAddress is the least time one address gets when several share the
// dial timeout (net.Dialer uses the same floor).
const minPerAddress = 2 * time.Second

func (g *guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	// A name the rules refuse is not even looked up.
	if err := g.policy.CheckHost(host); err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	addrs, err := g.lookup(ctx, network, host)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	allowed := make([]netip.Addr, 0, len(addrs))
	var denied error
	for _, a := range addrs {
		if err := g.policy.CheckIP(host, a); err != nil {
			if denied == nil {
				denied = err
			}
			continue
		}
		allowed = append(allowed, a.Unmap())
	}
	if len(allowed) == 0 {
		return nil, &net.OpError{Op: "dial", Net: network, Err: denied}
	}
	return g.dialEach(ctx, network, port, allowed)
}

// lookup returns host's addresses, or host itself when it is an address.
func (g *guard) lookup(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	ipNet := "ip"
	switch network {
	case "tcp4":
		ipNet = "ip4"
	case "tcp6":
		ipNet = "ip6"
	}
	addrs, err := g.resolver.LookupNetIP(ctx, ipNet, host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

// dialEach tries the addresses in order, each with a fair share of the time
// left, and returns the first connection or the first error.
func (g *guard) dialEach(ctx context.Context, network, port string, addrs []netip.Addr) (net.Conn, error) {
	var first error
	for i, a := range addrs {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if deadline, ok := ctx.Deadline(); ok && i < len(addrs)-1 {
			share := max(time.Until(deadline)/time.Duration(len(addrs)-i), minPerAddress)
			actx, cancel = context.WithTimeout(ctx, share)
		}
		conn, err := g.dial(actx, network, net.JoinHostPort(a.String(), port))
		cancel()
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}
