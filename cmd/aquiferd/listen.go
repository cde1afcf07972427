package main

import (
	"net"

	"go.uber.org/zap"
)

// listenScope says who can reach the HTTP listener at a: "loopback" (this
// host only), "all interfaces" (0.0.0.0 or ::) or "network" (one
// interface's address). a is nil when no HTTP listener runs.
func listenScope(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	switch {
	case a == nil:
		return "none"
	case !ok:
		return "network"
	case tcp.IP.IsLoopback():
		return "loopback"
	case tcp.IP.IsUnspecified():
		return "all interfaces"
	default:
		return "network"
	}
}

// warnOpenListener warns, loudly, when an instance in open mode (no
// tenants) listens beyond loopback: whoever can reach it can make it send
// HTTP requests from this machine.
func (d *daemon) warnOpenListener(scope, addr string) {
	if len(d.cfg.Tenants) > 0 || scope == "loopback" || scope == "none" {
		return
	}
	private := "AQUIFER_DENY_PRIVATE is off, so that includes the private network this machine is on and its own loopback services"
	if d.cfg.Destinations.DenyPrivate {
		private = "AQUIFER_DENY_PRIVATE is on, so private addresses are refused, but every public address is reachable"
	}
	d.log.Warn("OPEN RELAY: open mode (no tenants) on a non-loopback address: anyone who can reach "+addr+
		" can make Aquifer send HTTP requests anywhere it can reach; "+private+
		". Configure tenants (API keys) or set AQUIFER_HOST=127.0.0.1",
		zap.String("addr", addr), zap.String("listen", scope), zap.Bool("deny_private", d.cfg.Destinations.DenyPrivate))
}
