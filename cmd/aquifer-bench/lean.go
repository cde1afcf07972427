package main

// Minimal HTTP/1.1 over keep-alive TCP for the harness. The benchmark shares
// two cores with the daemon it measures, and net/http's client costs about
// twice the CPU of its server per request; like wrk, the harness therefore
// speaks just enough HTTP/1.1 itself: fixed-length bodies, keep-alive, no
// TLS. The ceiling scenario uses the same client, so ratios stay fair.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// leanConn is one keep-alive client connection.
type leanConn struct {
	addr  string // host:port
	host  string
	extra string // extra request header lines, each ending in \r\n
	c     net.Conn
	r     *bufio.Reader
	w     *bufio.Writer
}

func newLeanConn(baseURL string) *leanConn {
	addr := strings.TrimPrefix(strings.TrimPrefix(baseURL, "http://"), "https://")
	if i := strings.IndexByte(addr, '/'); i >= 0 {
		addr = addr[:i]
	}
	return &leanConn{addr: addr, host: addr}
}

func (lc *leanConn) close() {
	if lc.c != nil {
		lc.c.Close()
		lc.c = nil
	}
}

// post sends one POST and returns the status and body. It reconnects once if
// a kept-alive connection turns out to be closed.
func (lc *leanConn) post(path string, body []byte) (int, []byte, error) {
	for attempt := 0; ; attempt++ {
		fresh := lc.c == nil
		if fresh {
			c, err := net.DialTimeout("tcp", lc.addr, 10*time.Second)
			if err != nil {
				return 0, nil, err
			}
			lc.c, lc.r, lc.w = c, bufio.NewReaderSize(c, 16<<10), bufio.NewWriterSize(c, 16<<10)
		}
		_ = lc.c.SetDeadline(time.Now().Add(60 * time.Second))
		status, resp, err := lc.roundTrip(path, body)
		if err == nil {
			return status, resp, nil
		}
		lc.close()
		if fresh || attempt > 0 {
			return 0, nil, err
		}
	}
}

func (lc *leanConn) roundTrip(path string, body []byte) (int, []byte, error) {
	w := lc.w
	w.WriteString("POST ")
	w.WriteString(path)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(lc.host)
	w.WriteString("\r\n")
	w.WriteString(lc.extra)
	w.WriteString("Content-Type: application/json\r\nContent-Length: ")
	w.WriteString(strconv.Itoa(len(body)))
	w.WriteString("\r\n\r\n")
	w.Write(body)
	if err := w.Flush(); err != nil {
		return 0, nil, err
	}
	status, hdr, err := readHead(lc.r, true)
	if err != nil {
		return 0, nil, err
	}
	resp, err := readBody(lc.r, hdr)
	if err != nil {
		return 0, nil, err
	}
	if hdr.close {
		lc.close()
	}
	return status, resp, nil
}

type head struct {
	contentLength int64 // -1 when absent
	chunked       bool
	close         bool
}

// readHead reads a status line (response) or request line and the headers.
func readHead(r *bufio.Reader, response bool) (int, head, error) {
	h := head{contentLength: -1}
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, h, err
	}
	status := 0
	if response {
		// "HTTP/1.1 201 Created"
		if len(line) < 12 {
			return 0, h, fmt.Errorf("short status line %q", line)
		}
		status, err = strconv.Atoi(string(line[9:12]))
		if err != nil {
			return 0, h, fmt.Errorf("bad status line %q", line)
		}
	}
	for {
		line, err = r.ReadSlice('\n')
		if err != nil {
			return 0, h, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return status, h, nil
		}
		i := bytes.IndexByte(line, ':')
		if i < 0 {
			continue
		}
		name, value := line[:i], bytes.TrimSpace(line[i+1:])
		switch {
		case asciiEqualFold(name, "content-length"):
			h.contentLength, _ = strconv.ParseInt(string(value), 10, 64)
		case asciiEqualFold(name, "transfer-encoding"):
			h.chunked = asciiEqualFold(value, "chunked")
		case asciiEqualFold(name, "connection"):
			h.close = asciiEqualFold(value, "close")
		}
	}
}

func readBody(r *bufio.Reader, h head) ([]byte, error) {
	switch {
	case h.chunked:
		b, err := io.ReadAll(httputil.NewChunkedReader(r))
		if err != nil {
			return nil, err
		}
		// The chunked reader stops at the last chunk; the trailer section
		// (none, or header lines) ends with an empty line, which must be
		// read too or the next response on the connection starts with it.
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return nil, err
			}
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				return b, nil
			}
		}
	case h.contentLength > 0:
		b := make([]byte, h.contentLength)
		_, err := io.ReadFull(r, b)
		return b, err
	default:
		return nil, nil
	}
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// leanServer is a minimal HTTP/1.1 server: it reads each request with its
// body, hands the body to handle, and answers with a fixed response.
type leanServer struct {
	ln     net.Listener
	handle func(body []byte)
	resp   []byte
	hits   atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func newLeanServer(status int, contentType, body string, handle func(body []byte)) (*leanServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	resp := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Length: %d\r\n", status, statusText(status), len(body))
	if contentType != "" {
		resp += "Content-Type: " + contentType + "\r\n"
	}
	resp += "\r\n" + body
	s := &leanServer{ln: ln, handle: handle, resp: []byte(resp), conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func statusText(code int) string {
	switch code {
	case 200:
		return "OK"
	case 201:
		return "Created"
	case 204:
		return "No Content"
	}
	return "Status"
}

func (s *leanServer) host() string { return s.ln.Addr().String() }
func (s *leanServer) url() string  { return "http://" + s.host() }

func (s *leanServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *leanServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReaderSize(c, 16<<10)
	for {
		_, h, err := readHead(r, false)
		if err != nil {
			return
		}
		body, err := readBody(r, h)
		if err != nil {
			return
		}
		s.hits.Add(1)
		if s.handle != nil {
			s.handle(body)
		}
		if _, err := c.Write(s.resp); err != nil {
			return
		}
		if h.close {
			return
		}
	}
}

func (s *leanServer) close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}
