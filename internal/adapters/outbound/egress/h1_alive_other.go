//go:build !linux

package egress

// alive cannot peek at a socket without blocking on this system, so a
// connection idle for more than staleCheckAfter is not reused: a new one
// is dialled.
func (c *h1Conn) alive() bool { return false }
