package egress

import "syscall"

// staleCheckAfter: a connection idle longer than this is checked for a
// close from the server before it is reused (h1Conn.alive). Zero: every
// reuse is checked. The check is one non-blocking recvfrom (about 1 µs);
// net/http gets the same protection from a read goroutine per connection.
// Checking only connections idle for a while would miss a server that
// closes right after answering without "Connection: close", and the next
// request on it — a POST that cannot be replayed — would fail for
// Aquifer's reason, not the destination's.
const staleCheckAfter = 0

// alive reports whether the server has not closed c while it sat idle: a
// peek at the socket without blocking finds nothing to read. Data or EOF
// means the connection cannot carry a new request (a server sends nothing
// unasked but, at most, a 408 before closing). It costs one recvfrom.
func (c *h1Conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if c.peekFn == nil {
		sc, ok := c.nc.(syscall.Conn)
		if !ok {
			return false // cannot tell: dial a new one
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return false
		}
		c.raw, c.peekFn = rc, c.peek // made once per connection
	}
	c.peekOpen = false
	return c.raw.Read(c.peekFn) == nil && c.peekOpen
}

// peek is alive's look at the socket; it never waits.
func (c *h1Conn) peek(fd uintptr) bool {
	var buf [1]byte
	_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	c.peekOpen = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK // nothing to read: open
	return true
}
