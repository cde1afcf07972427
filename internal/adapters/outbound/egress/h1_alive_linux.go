package egress

import "syscall"

// alive reports whether the server has not closed c while it sat idle: a
// peek at the socket without blocking finds nothing to read. Data or EOF
// means the connection cannot carry a new request (a server sends nothing
// unasked but, at most, a 408 before closing).
func (c *h1Conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return false // cannot tell: dial a new one
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK // nothing to read: open
		return true // never wait
	})
	return err == nil && ok
}
