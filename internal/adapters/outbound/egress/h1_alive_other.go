//go:build !linux

package egress

import "time"

// staleCheckAfter: without a way to peek at a socket, a connection idle
// longer than this is not reused (servers close idle connections after
// seconds: Node's 5 s, nginx's 75 s).
const staleCheckAfter = time.Second

// alive cannot peek at a socket without blocking on this system, so a
// connection idle for more than staleCheckAfter is not reused: a new one
// is dialled.
func (c *h1Conn) alive() bool { return false }
