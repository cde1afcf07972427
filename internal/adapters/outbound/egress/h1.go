package egress

// Aquifer's own HTTP/1.1 client for plain http:// requests.
//
// net/http's Transport runs a read and a write goroutine per connection and
// hands every request and response between them and the caller over
// channels; on the dispatch path (two outbound requests per job, kept-alive
// connections to a few hosts) that machinery is about a quarter of the
// daemon's CPU. h1Transport does the same exchange on the caller's
// goroutine: it writes the request, reads the response head, and hands back
// a body that reads straight from the connection's buffer and returns the
// connection to the idle pool at its end. It has no goroutine per request or
// per connection; a connection's reader and writer are reused for its life.
//
// It is deliberately not a general client: no proxies, no TLS, no
// compression, no HTTP/2. Requests it does not handle exactly as net/http
// would (see handles) go to net/http's Transport of the same policy, which
// dials through the same guard.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

const (
	// maxResponseHeaderBytes caps a response head (and a chunked body's
	// trailer), like net/http's default MaxResponseHeaderBytes.
	maxResponseHeaderBytes = 1 << 20
	// closeDrainLimit is how much of an unread body Close reads and throws
	// away to keep the connection; a longer rest closes it instead.
	closeDrainLimit = 256 << 10
	// closeDrainWait bounds how long Close waits for the rest of a body.
	closeDrainWait = time.Second
	// max1xx bounds the informational responses skipped before the final
	// one (net/http allows 5).
	max1xx = 5
	// defaultUserAgent is what net/http sends when the request sets none.
	defaultUserAgent = "Go-http-client/1.1"
	bufSize          = 4 << 10
)

var (
	errReadOnClosedBody = errors.New("http: read on closed response body")
	errHeadersTooLarge  = fmt.Errorf("egress: server response headers exceeded %d bytes; aborted", maxResponseHeaderBytes)
	errSwitchProtocols  = errors.New("egress: unexpected 101 Switching Protocols (the request asked for no upgrade)")
	errTooMany1xx       = errors.New("egress: too many 1xx informational responses")
)

// h1Transport is an http.RoundTripper for http:// requests over pooled
// keep-alive HTTP/1.1 connections (see the file comment).
type h1Transport struct {
	// dial connects to "host:port" (the guard's DialContext).
	dial        func(ctx context.Context, network, address string) (net.Conn, error)
	maxIdle     int           // idle connections kept per host:port
	idleTimeout time.Duration // an idle connection is closed after this
	staleAfter  time.Duration // staleCheckAfter; tests set 0 to check every reuse

	mu   sync.Mutex
	idle map[string][]*h1Conn // by host:port; the most recently used last

	open atomic.Int64 // connections dialled and not closed (tests count them)
}

// handles reports whether h1Transport sends req exactly as net/http would.
// The rest (rare on the dispatch path) goes to net/http: requests asking
// for a protocol switch or a 100-continue, requests with trailers or a
// TransferEncoding of their own, CONNECT,
// non-ASCII hosts (net/http converts them to punycode), and a body of
// unknown length for a method that usually has none (net/http probes it
// with a timer before choosing its framing).
func (t *h1Transport) handles(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.Method == http.MethodConnect || len(req.Trailer) > 0 ||
		len(req.TransferEncoding) > 0 || !isASCII(req.URL.Host) || !isASCII(req.Host) {
		return false
	}
	if _, ok := req.Header["Expect"]; ok {
		return false
	}
	if _, ok := req.Header["Upgrade"]; ok {
		return false
	}
	if outgoingLength(req) < 0 {
		switch valueOrDefault(req.Method, http.MethodGet) {
		case "GET", "HEAD", "DELETE", "OPTIONS", "PROPFIND", "SEARCH":
			return false
		}
	}
	return true
}

// RoundTrip sends req on an idle connection to its host or a new one. A
// request that fails on a reused connection is sent once more on a new one
// when h1Conn.roundTrip says it may be.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := validateRequest(req); err != nil {
		closeBody(req)
		return nil, err
	}
	ctx := req.Context()
	if ctx.Err() != nil {
		closeBody(req)
		return nil, context.Cause(ctx)
	}
	key := hostPort(req)
	for attempt := 0; ; attempt++ {
		c, err := t.getConn(ctx, key)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, retry, err := c.roundTrip(req)
		if err == nil {
			return resp, nil
		}
		if attempt > 0 || !retry || ctx.Err() != nil {
			return nil, err
		}
		// A kept-alive connection the server had closed: send it again on
		// a new one, with a fresh body.
		if req.Body != nil && req.Body != http.NoBody {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			r2 := *req
			r2.Body = body
			req = &r2
		}
	}
}

// CloseIdleConnections closes every idle connection. Connections in use
// are left alone and pooled when their exchange ends, as with net/http.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	var all []*h1Conn
	for key, list := range t.idle {
		for _, c := range list {
			c.inIdle = false
			if c.idleTimer != nil {
				c.idleTimer.Stop()
			}
		}
		all = append(all, list...)
		delete(t.idle, key)
	}
	t.mu.Unlock()
	for _, c := range all {
		c.close()
	}
}

// getConn returns the most recently used idle connection to key that is
// still open, or dials a new one.
func (t *h1Transport) getConn(ctx context.Context, key string) (*h1Conn, error) {
	for {
		t.mu.Lock()
		list := t.idle[key]
		n := len(list)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		c := list[n-1]
		list[n-1] = nil
		t.idle[key] = list[:n-1]
		c.inIdle = false
		c.idleTimer.Stop()
		t.mu.Unlock()
		idle := time.Since(c.idleAt)
		if idle >= t.idleTimeout || (idle >= t.staleAfter && !c.alive()) {
			c.close()
			continue
		}
		return c, nil
	}
	nc, err := t.dial(ctx, "tcp", key)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	t.open.Add(1)
	c := &h1Conn{t: t, key: key, nc: nc, readLimit: math.MaxInt64}
	c.br = bufio.NewReaderSize(c, bufSize)
	c.bw = bufio.NewWriterSize(countingWriter{c}, bufSize)
	c.tp.R = c.br
	return c, nil
}

// putIdle pools c for the next request to its host, or closes it when the
// host has enough idle connections.
func (t *h1Transport) putIdle(c *h1Conn) {
	c.reused = true
	c.idleAt = time.Now()
	t.mu.Lock()
	list := t.idle[c.key]
	if len(list) >= t.maxIdle {
		t.mu.Unlock()
		c.close()
		return
	}
	if t.idle == nil {
		t.idle = map[string][]*h1Conn{}
	}
	t.idle[c.key] = append(list, c)
	c.inIdle = true
	if c.idleTimer == nil {
		c.idleTimer = time.AfterFunc(t.idleTimeout, c.expire)
	} else {
		c.idleTimer.Reset(t.idleTimeout)
	}
	t.mu.Unlock()
}

// h1Conn is one connection with its buffers. Only one request uses it at a
// time; the pool fields (inIdle, idleTimer) are guarded by t.mu.
type h1Conn struct {
	t   *h1Transport
	key string
	nc  net.Conn
	br  *bufio.Reader // reads from the h1Conn (so readLimit applies)
	bw  *bufio.Writer
	tp  textproto.Reader // over br, for header blocks

	readLimit int64 // bytes br may still read from nc: caps a response head
	nwrite    int64 // bytes written to nc, ever
	werr      error // the connection's write error in this exchange
	reused    bool  // it has served a request before this one

	idleAt    time.Time
	inIdle    bool
	idleTimer *time.Timer

	// alive's state (Linux): the raw connection and the peek callback,
	// made once, and the last peek's answer.
	raw      syscall.RawConn
	peekFn   func(fd uintptr) bool
	peekOpen bool

	hasDeadline bool             // nc has a deadline set
	deadline    time.Time        // the one it has, if set
	stopCtx     func() bool      // stops the context.AfterFunc of the current request
	abortFn     func()           // c.abort, made once
	lr          io.LimitedReader // writeRequest's, kept to save an allocation
	closed      atomic.Bool
}

func (c *h1Conn) Read(p []byte) (int, error) {
	if c.readLimit <= 0 {
		return 0, errHeadersTooLarge
	}
	if int64(len(p)) > c.readLimit {
		p = p[:c.readLimit]
	}
	n, err := c.nc.Read(p)
	c.readLimit -= int64(n)
	return n, err
}

// countingWriter is c's writer under bw; it counts what reached the
// connection, so a failure can tell whether the server may have seen any
// of the request.
type countingWriter struct{ c *h1Conn }

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.c.nc.Write(p)
	w.c.nwrite += int64(n)
	if err != nil {
		w.c.werr = err
	}
	return n, err
}

func (c *h1Conn) close() {
	if c.closed.CompareAndSwap(false, true) {
		c.nc.Close()
		c.t.open.Add(-1)
	}
}

// expire closes c when it has been idle for the idle timeout.
func (c *h1Conn) expire() {
	c.t.mu.Lock()
	if !c.inIdle {
		c.t.mu.Unlock()
		return
	}
	list := c.t.idle[c.key]
	if i := slices.Index(list, c); i >= 0 {
		c.t.idle[c.key] = slices.Delete(list, i, i+1)
	}
	c.inIdle = false
	c.t.mu.Unlock()
	c.close()
}

// abort runs when the request's context ends while c is in use: closing
// the connection unblocks whatever read or write is waiting.
func (c *h1Conn) abort() { c.nc.Close() }

// begin arms c for req's context: its deadline becomes the connection's,
// and its end closes the connection.
func (c *h1Conn) begin(ctx context.Context) {
	if deadline, ok := ctx.Deadline(); ok {
		_ = c.nc.SetDeadline(deadline)
		c.hasDeadline, c.deadline = true, deadline
	} else if c.hasDeadline {
		_ = c.nc.SetDeadline(time.Time{})
		c.hasDeadline, c.deadline = false, time.Time{}
	}
	c.stopCtx = nil
	if ctx.Done() != nil {
		if c.abortFn == nil {
			c.abortFn = c.abort
		}
		c.stopCtx = context.AfterFunc(ctx, c.abortFn)
	}
}

// end finishes an exchange: c goes back to the pool when reuse is true
// and the context did not end meanwhile, and is closed otherwise.
func (c *h1Conn) end(reuse bool) {
	if c.stopCtx != nil && !c.stopCtx() {
		reuse = false // abort ran, or is running: the connection is closed
	}
	c.stopCtx = nil
	if reuse && !c.closed.Load() {
		c.t.putIdle(c)
		return
	}
	c.close()
}

// fail ends the exchange after err and returns the error to report: the
// context's cause when the context ended (the connection's deadline is the
// context's, so a timeout is reported as context.DeadlineExceeded, as
// net/http does).
func (c *h1Conn) fail(ctx context.Context, err error) error {
	c.end(false)
	return ctxErr(ctx, err)
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
			<-ctx.Done() // it passed: the context's timer is firing now
		}
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// roundTrip sends req on c and reads the response head. retry reports
// that the request failed on a reused connection in a way that lets it be
// sent again on a new one. This matches net/http: if nothing of the
// request reached the connection, it is sent again when its body can be
// sent again (none, or GetBody); if all of it was written and the server
// closed the connection without a byte of response, it is sent again only
// when it is also replayable — GET, HEAD, OPTIONS or TRACE, or an
// Idempotency-Key / X-Idempotency-Key header — since the server may have
// acted on it.
func (c *h1Conn) roundTrip(req *http.Request) (resp *http.Response, retry bool, err error) {
	ctx := req.Context()
	c.begin(ctx)
	reused := c.reused
	written := c.nwrite
	c.werr = nil
	if err := c.writeRequest(req); err != nil {
		// Only the connection failing to take the first byte counts, not
		// a body that failed to read.
		nothing := c.werr != nil && c.nwrite == written
		return nil, reused && nothing && rewindable(req), c.fail(ctx, err)
	}
	// A kept-alive connection the server closed shows as an error before
	// the first byte of the answer.
	if _, err := c.br.Peek(1); err != nil {
		return nil, reused && replayable(req), c.fail(ctx, err)
	}
	resp, err = c.readResponse(req)
	if err != nil {
		return nil, false, c.fail(ctx, err)
	}
	return resp, false, nil
}

// writeRequest writes req's head and body and flushes them. It closes
// req.Body, as a RoundTripper must.
func (c *h1Conn) writeRequest(req *http.Request) (err error) {
	body := req.Body
	if body == http.NoBody {
		body = nil
	}
	if body != nil {
		defer func() {
			if cerr := body.Close(); err == nil {
				err = cerr
			}
		}()
	}
	method := valueOrDefault(req.Method, http.MethodGet)
	length := outgoingLength(req)
	chunked := body != nil && length < 0
	w := c.bw
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(req.URL.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(hostHeader(req))
	w.WriteString("\r\n")
	ua := defaultUserAgent
	if _, ok := req.Header["User-Agent"]; ok {
		ua = textproto.TrimString(req.Header.Get("User-Agent"))
	}
	if ua != "" {
		w.WriteString("User-Agent: ")
		w.WriteString(ua)
		w.WriteString("\r\n")
	}
	if req.Close && !hasToken(req.Header.Get("Connection"), "close") {
		w.WriteString("Connection: close\r\n")
	}
	switch {
	case chunked:
		w.WriteString("Transfer-Encoding: chunked\r\n")
	case length > 0 || (length == 0 && sendsZeroLength(method)):
		w.WriteString("Content-Length: ")
		w.Write(strconv.AppendInt(w.AvailableBuffer(), length, 10))
		w.WriteString("\r\n")
	}
	writeHeader(w, req.Header)
	w.WriteString("\r\n")
	if body == nil {
		return w.Flush()
	}
	if req.GetBody == nil {
		// A body that is not already in memory may take a while: let the
		// server see the head first (net/http does the same).
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if chunked {
		cw := httputil.NewChunkedWriter(w)
		if _, err := io.Copy(cw, body); err != nil {
			return err
		}
		if err := cw.Close(); err != nil {
			return err
		}
		w.WriteString("\r\n") // no trailer
		return w.Flush()
	}
	c.lr = io.LimitedReader{R: body, N: length}
	n, err := io.Copy(w, &c.lr)
	c.lr.R = nil
	if err != nil {
		return err
	}
	if n == length {
		var extra int64
		extra, err = io.Copy(io.Discard, body)
		n += extra
	}
	if n != length {
		return fmt.Errorf("http: ContentLength=%d with Body length %d", length, n)
	}
	if err != nil {
		return err
	}
	return w.Flush()
}

// readResponse reads the final response head (after any 1xx) and prepares
// its body.
func (c *h1Conn) readResponse(req *http.Request) (*http.Response, error) {
	h := &h1Response{}
	resp := &h.resp
	for n1xx := 0; ; n1xx++ {
		c.readLimit = maxResponseHeaderBytes
		err := c.readHead(resp)
		c.readLimit = math.MaxInt64
		if err != nil {
			return nil, err
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 {
			break
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return nil, errSwitchProtocols
		}
		if n1xx == max1xx {
			return nil, errTooMany1xx
		}
		*resp = http.Response{}
	}
	resp.Request = req
	// http.ReadResponse does this too: HTTP/1.0's Pragma: no-cache is
	// HTTP/1.1's Cache-Control: no-cache.
	if pragma := resp.Header["Pragma"]; len(pragma) > 0 && pragma[0] == "no-cache" {
		if _, ok := resp.Header["Cache-Control"]; !ok {
			resp.Header["Cache-Control"] = []string{"no-cache"}
		}
	}
	framing, err := frameResponse(resp, req.Method)
	if err != nil {
		return nil, err
	}
	reuse := !resp.Close && !wantsClose(req)
	if framing == framingNone {
		resp.Body = http.NoBody
		c.end(reuse)
		return resp, nil
	}
	b := &h.body
	b.c, b.ctx, b.resp, b.framing, b.reuse = c, req.Context(), resp, framing, reuse
	switch framing {
	case framingLength:
		b.lr = io.LimitedReader{R: c.br, N: resp.ContentLength}
		b.src = &b.lr
	case framingChunked:
		b.src = httputil.NewChunkedReader(c.br)
	default:
		b.src = c.br
	}
	resp.Body = b
	return resp, nil
}

// readHead reads a status line and a header block into resp.
func (c *h1Conn) readHead(resp *http.Response) error {
	line, err := c.readLine()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := parseStatusLine(line, resp); err != nil {
		return err
	}
	hdr, err := c.tp.ReadMIMEHeader()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	resp.Header = http.Header(hdr)
	return nil
}

// readLine returns the next line without its line ending; the slice is
// valid until the next read.
func (c *h1Conn) readLine() ([]byte, error) {
	line, err := c.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull { // a longer line: collect it
		long := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			line, err = c.br.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// parseStatusLine parses "HTTP/1.1 200 OK" like http.ReadResponse.
func parseStatusLine(line []byte, resp *http.Response) error {
	switch string(line) { // the usual ones, without allocating
	case "HTTP/1.1 200 OK":
		resp.Status, resp.StatusCode = "200 OK", 200
	case "HTTP/1.1 201 Created":
		resp.Status, resp.StatusCode = "201 Created", 201
	case "HTTP/1.1 202 Accepted":
		resp.Status, resp.StatusCode = "202 Accepted", 202
	case "HTTP/1.1 204 No Content":
		resp.Status, resp.StatusCode = "204 No Content", 204
	default:
		return parseAnyStatusLine(line, resp)
	}
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	return nil
}

func parseAnyStatusLine(line []byte, resp *http.Response) error {
	proto, status, ok := strings.Cut(string(line), " ")
	if !ok {
		return fmt.Errorf("malformed HTTP response %q", line)
	}
	status = strings.TrimLeft(status, " ")
	code, _, _ := strings.Cut(status, " ")
	if len(code) != 3 {
		return fmt.Errorf("malformed HTTP status code %q", code)
	}
	n, err := strconv.Atoi(code)
	if err != nil || n < 0 {
		return fmt.Errorf("malformed HTTP status code %q", code)
	}
	major, minor, ok := http.ParseHTTPVersion(proto)
	if !ok {
		return fmt.Errorf("malformed HTTP version %q", proto)
	}
	switch proto { // the usual ones without a string of their own
	case "HTTP/1.1":
		proto = "HTTP/1.1"
	case "HTTP/1.0":
		proto = "HTTP/1.0"
	}
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = proto, major, minor
	resp.Status, resp.StatusCode = status, n
	return nil
}

type framing uint8

const (
	framingNone    framing = iota // no body
	framingLength                 // Content-Length bytes
	framingChunked                // chunked, then a trailer
	framingEOF                    // up to the connection's end
)

// frameResponse works out how resp's body is delimited, sets its
// ContentLength, TransferEncoding, Close and Trailer, and tidies its
// Header, with net/http's rules (RFC 9112 section 6).
func frameResponse(resp *http.Response, method string) (framing, error) {
	h := resp.Header
	resp.Close = shouldClose(resp.ProtoMajor, resp.ProtoMinor, h)
	chunked := false
	if te, ok := h["Transfer-Encoding"]; ok {
		delete(h, "Transfer-Encoding")
		if resp.ProtoAtLeast(1, 1) {
			if len(te) != 1 {
				return 0, fmt.Errorf("too many transfer encodings: %q", te)
			}
			if !strings.EqualFold(te[0], "chunked") {
				return 0, fmt.Errorf("unsupported transfer encoding: %q", te[0])
			}
			chunked = true
		}
	}
	cls := h["Content-Length"]
	if len(cls) > 1 {
		first := textproto.TrimString(cls[0])
		for _, v := range cls[1:] {
			if textproto.TrimString(v) != first {
				return 0, fmt.Errorf("http: message cannot contain multiple Content-Length headers; got %q", cls)
			}
		}
		h["Content-Length"] = []string{first}
		cls = h["Content-Length"]
	}
	length := int64(-1)
	if len(cls) > 0 {
		cl := textproto.TrimString(cls[0])
		if cl == "" {
			return 0, errors.New(`invalid empty Content-Length ""`)
		}
		n, err := strconv.ParseUint(cl, 10, 63)
		if err != nil {
			return 0, fmt.Errorf("bad Content-Length %q", cl)
		}
		length = int64(n)
	}
	bodyless := method == http.MethodHead || resp.StatusCode == 204 || resp.StatusCode == 304
	switch {
	case bodyless:
		if method == http.MethodHead {
			resp.ContentLength = length // what a GET would have returned
		}
		if chunked {
			resp.TransferEncoding = []string{"chunked"}
		}
		if err := trailerKeys(resp, chunked); err != nil {
			return 0, err
		}
		return framingNone, nil
	case chunked:
		delete(h, "Content-Length")
		resp.ContentLength = -1
		resp.TransferEncoding = []string{"chunked"}
		if err := trailerKeys(resp, true); err != nil {
			return 0, err
		}
		return framingChunked, nil
	case length == 0:
		return framingNone, nil
	case length > 0:
		resp.ContentLength = length
		return framingLength, nil
	}
	delete(h, "Content-Length")
	resp.ContentLength = -1
	resp.Close = true
	return framingEOF, nil
}

// trailerKeys announces the Trailer header's keys in resp.Trailer, as
// net/http does; the values arrive after a chunked body.
func trailerKeys(resp *http.Response, chunked bool) error {
	vv, ok := resp.Header["Trailer"]
	if !ok || !chunked {
		return nil
	}
	delete(resp.Header, "Trailer")
	var tr http.Header
	for _, v := range vv {
		for key := range strings.SplitSeq(v, ",") {
			key = textproto.TrimString(key)
			if key == "" {
				continue
			}
			key = http.CanonicalHeaderKey(key)
			switch key {
			case "Transfer-Encoding", "Trailer", "Content-Length":
				return fmt.Errorf("bad trailer key %q", key)
			}
			if tr == nil {
				tr = http.Header{}
			}
			tr[key] = nil
		}
	}
	resp.Trailer = tr
	return nil
}

// h1Response is a response and its body in one allocation.
type h1Response struct {
	resp http.Response
	body h1Body
}

// h1Body reads a response body from its connection. At the body's end the
// connection is handed back (pooled or closed); Close before the end reads
// and discards up to closeDrainLimit to keep the connection, else closes it.
// Close may be called while a Read is blocked (it closes the connection).
type h1Body struct {
	c       *h1Conn
	ctx     context.Context
	resp    *http.Response
	framing framing
	reuse   bool // the connection may serve another request after the body
	src     io.Reader
	lr      io.LimitedReader

	mu      sync.Mutex
	reading bool
	closed  bool
	done    bool  // the connection was handed back
	err     error // a read failed: the connection is closed
}

func (b *h1Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return 0, errReadOnClosedBody
	case b.err != nil:
		b.mu.Unlock()
		return 0, b.err
	case b.done:
		b.mu.Unlock()
		return 0, io.EOF
	}
	b.reading = true
	b.mu.Unlock()

	n, err := b.src.Read(p)
	if err == nil && b.framing == framingLength && b.lr.N == 0 {
		err = io.EOF // hand the connection back now, not on the next Read
	}
	if err == io.EOF {
		err = b.atEnd()
	}

	// The connection is handed back only here, under mu with reading
	// cleared: a Close that came meanwhile may have closed it.
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = false
	switch {
	case b.closed:
		b.c.end(false)
		b.done = true
		if err == nil {
			err = errReadOnClosedBody
		}
	case err == io.EOF:
		b.c.end(b.reuse)
		b.done = true
	case err != nil:
		err = ctxErr(b.ctx, err)
		b.err = err
		b.c.end(false)
		b.done = true
	}
	return n, err
}

// atEnd runs when the framing reader ends: it reads a chunked body's
// trailer. It returns io.EOF, or the error that made the end premature.
func (b *h1Body) atEnd() error {
	switch b.framing {
	case framingLength:
		if b.lr.N > 0 {
			return io.ErrUnexpectedEOF
		}
	case framingChunked:
		return b.readTrailer()
	case framingEOF:
		b.reuse = false
	}
	return io.EOF
}

// readTrailer reads the header block after the last chunk (usually just
// CRLF) into resp.Trailer. Like net/http it insists on CRLFs there and on
// a trailer that fits in the read buffer.
func (b *h1Body) readTrailer() error {
	c := b.c
	buf, _ := c.br.Peek(2)
	if len(buf) == 2 && buf[0] == '\r' && buf[1] == '\n' {
		_, _ = c.br.Discard(2)
		return io.EOF
	}
	if len(buf) < 2 {
		return io.ErrUnexpectedEOF
	}
	if !seeUpcomingDoubleCRLF(c.br) {
		return errors.New("http: suspiciously long trailer after chunked body")
	}
	c.readLimit = maxResponseHeaderBytes
	hdr, err := c.tp.ReadMIMEHeader()
	c.readLimit = math.MaxInt64
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if b.resp.Trailer == nil {
		b.resp.Trailer = http.Header(hdr)
		return io.EOF
	}
	for k, vv := range hdr {
		b.resp.Trailer[k] = vv
	}
	return io.EOF
}

// seeUpcomingDoubleCRLF reports whether a CRLFCRLF comes within r's
// buffer (net/http's check before it reads a trailer).
func seeUpcomingDoubleCRLF(r *bufio.Reader) bool {
	for n := 4; ; n++ {
		buf, err := r.Peek(n)
		if bytes.HasSuffix(buf, []byte("\r\n\r\n")) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

func (b *h1Body) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	switch {
	case b.done || b.err != nil:
	case b.reading:
		b.c.abort() // the blocked Read returns and ends the exchange
	case b.framing == framingEOF || (b.framing == framingLength && b.lr.N > closeDrainLimit):
		b.c.end(false)
		b.done = true
	default:
		// Read what is left, if it is short and comes soon, to keep the
		// connection.
		if deadline := time.Now().Add(closeDrainWait); !b.c.hasDeadline || deadline.Before(b.c.deadline) {
			_ = b.c.nc.SetReadDeadline(deadline)
			b.c.hasDeadline = true
		}
		n, err := io.Copy(io.Discard, io.LimitReader(b.src, closeDrainLimit+1))
		reuse := false
		if err == nil && n <= closeDrainLimit && b.atEnd() == io.EOF {
			reuse = b.reuse
		}
		b.c.end(reuse)
		b.done = true
	}
	return nil
}

// --- request helpers, after net/http's transferWriter and Request.write ---

// validateRequest refuses what net/http's Transport refuses, so a bad job
// header can never smuggle a line into the request.
func validateRequest(req *http.Request) error {
	if req.URL == nil {
		return errors.New("http: nil Request.URL")
	}
	if req.Header == nil {
		return errors.New("http: nil Request.Header")
	}
	if m := req.Method; m != "" && !domain.IsToken(m) {
		return fmt.Errorf("net/http: invalid method %q", m)
	}
	if req.URL.Host == "" {
		return errors.New("http: no Host in request URL")
	}
	for k, vv := range req.Header {
		if !domain.IsToken(k) {
			return fmt.Errorf("net/http: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !validHeaderValue(v) {
				return fmt.Errorf("net/http: invalid header field value for %q", k)
			}
		}
	}
	if hasCTL(req.URL.RequestURI()) {
		return errors.New("net/http: can't write control character in Request.URL")
	}
	if req.ContentLength != 0 && req.Body == nil {
		return fmt.Errorf("http: Request.ContentLength=%d with nil Body", req.ContentLength)
	}
	return nil
}

// outgoingLength is the body's length: 0 for none, -1 when unknown.
func outgoingLength(req *http.Request) int64 {
	if req.Body == nil || req.Body == http.NoBody {
		return 0
	}
	if req.ContentLength != 0 {
		return req.ContentLength
	}
	return -1
}

// sendsZeroLength: net/http sends "Content-Length: 0" for an empty body
// of POST, PUT and PATCH (servers expect one), not of other methods.
func sendsZeroLength(method string) bool {
	return method == "POST" || method == "PUT" || method == "PATCH"
}

func wantsClose(req *http.Request) bool {
	return req.Close || headerHasToken(req.Header["Connection"], "close")
}

// rewindable: the body can be sent again.
func rewindable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// replayable is net/http's Request.isReplayable.
func replayable(req *http.Request) bool {
	if !rewindable(req) {
		return false
	}
	switch valueOrDefault(req.Method, "GET") {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// hostHeader is the Host header net/http sends: req.Host or the URL's,
// empty if it is not a valid Host header (net/http sends it so, rather
// than altered), without an IPv6 zone (RFC 6874).
func hostHeader(req *http.Request) string {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !validHost(host) {
		return ""
	}
	if !strings.HasPrefix(host, "[") {
		return host
	}
	i := strings.LastIndex(host, "]")
	if i < 0 {
		return host
	}
	j := strings.LastIndex(host[:i], "%")
	if j < 0 {
		return host
	}
	return host[:j] + host[i:]
}

// hostPort is the pool key and dial address: the URL's host and port
// (80 when absent).
func hostPort(req *http.Request) string {
	if req.URL.Port() != "" {
		return req.URL.Host // already host:port, bracketed if IPv6
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

// writeHeader writes h sorted by key, like http.Header.Write, leaving out
// the fields written from the request's own fields.
func writeHeader(w *bufio.Writer, h http.Header) {
	var buf [32]string
	keys := buf[:0]
	for k := range h {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(textproto.TrimString(v))
			w.WriteString("\r\n")
		}
	}
}

func shouldClose(major, minor int, h http.Header) bool {
	if major < 1 {
		return true
	}
	conv := h["Connection"]
	hasClose := headerHasToken(conv, "close")
	if major == 1 && minor == 0 {
		return hasClose || !headerHasToken(conv, "keep-alive")
	}
	if hasClose {
		delete(h, "Connection")
	}
	return hasClose
}

func headerHasToken(vv []string, token string) bool {
	for _, v := range vv {
		if hasToken(v, token) {
			return true
		}
	}
	return false
}

// hasToken reports whether the comma-separated list v holds token, in any
// case.
func hasToken(v, token string) bool {
	for part := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(textproto.TrimString(part), token) {
			return true
		}
	}
	return false
}

func valueOrDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// validHeaderValue: no control bytes but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == 0x7f {
			return true
		}
	}
	return false
}

// validHost is httpguts.ValidHostHeader: the bytes a Host header may hold.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		alnum := '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !alnum && strings.IndexByte("!$%&'()*+,-.:;=[]_~", c) < 0 {
			return false
		}
	}
	return true
}
