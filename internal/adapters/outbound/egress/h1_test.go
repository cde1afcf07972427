package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Conformance tests of h1Transport against net/http servers and raw TCP
// servers on 127.0.0.1, most of them side by side with net/http's
// Transport: where both answer, they must answer the same.

func loopbackDial(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// newH1 returns an h1Transport that dials directly; at the test's end it
// closes the idle connections and checks that none is left open.
func newH1(t *testing.T) *h1Transport {
	t.Helper()
	tr := &h1Transport{dial: loopbackDial, maxIdle: 16, idleTimeout: idleConnTimeout, staleAfter: staleCheckAfter}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		if n := tr.open.Load(); n != 0 {
			t.Errorf("%d connections left open", n)
		}
	})
	return tr
}

// newStd is net/http's Transport as NewClient configures it.
func newStd(t *testing.T) *http.Transport {
	tr := newTransport(Options{MaxIdleConnsPerHost: 16}, loopbackDial)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// countingServer is an httptest server that counts the connections it
// accepted.
func countingServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &n
}

// rawServer accepts connections on 127.0.0.1 and runs serve on each; it
// counts them.
type rawServer struct {
	ln       net.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newRawServer(t *testing.T, serve func(n int, c net.Conn, r *bufio.Reader)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(s.accepted.Add(1))
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				serve(n, c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) url(path string) string { return "http://" + s.ln.Addr().String() + path }

// readRequest reads one request (head and body) the way a server would.
func readRequest(r *bufio.Reader) (*http.Request, []byte, error) {
	req, err := http.ReadRequest(r)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(req.Body)
	return req, body, err
}

// answerEach serves every request on a connection with resp, as is.
func answerEach(resp string) func(int, net.Conn, *bufio.Reader) {
	return func(_ int, c net.Conn, r *bufio.Reader) {
		for {
			if _, _, err := readRequest(r); err != nil {
				return
			}
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
		}
	}
}

// answerOnce answers one request with resp and closes the connection.
func answerOnce(resp string) func(int, net.Conn, *bufio.Reader) {
	return func(_ int, c net.Conn, r *bufio.Reader) {
		if _, _, err := readRequest(r); err == nil {
			_, _ = io.WriteString(c, resp)
		}
	}
}

func newRequest(t *testing.T, ctx context.Context, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// result is what a caller can see of a response.
type result struct {
	Status        string
	StatusCode    int
	Proto         string
	Header        http.Header
	Body          string
	BodyErr       bool
	ContentLength int64
	TE            []string
	Close         bool
	Trailer       http.Header
}

func fetch(rt http.RoundTripper, req *http.Request) (*result, error) {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, rerr := io.ReadAll(resp.Body)
	return &result{
		Status: resp.Status, StatusCode: resp.StatusCode, Proto: resp.Proto, Header: resp.Header,
		Body: string(body), BodyErr: rerr != nil, ContentLength: resp.ContentLength,
		TE: resp.TransferEncoding, Close: resp.Close, Trailer: resp.Trailer,
	}, nil
}

// Every body framing, side by side with net/http's Transport. reuse says
// whether the connection may serve the next request.
func TestH1Framing(t *testing.T) {
	t.Parallel()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Multi"] = []string{"a", "b"}
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "hello")
		case "/chunked":
			for i := range 3 {
				fmt.Fprintf(w, "part %d;", i)
				w.(http.Flusher).Flush()
			}
		case "/trailer":
			w.Header().Set("Trailer", "X-Sum")
			_, _ = io.WriteString(w, "body")
			w.(http.Flusher).Flush()
			w.Header().Set("X-Sum", "42")
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		case "/empty":
			w.Header().Set("Content-Length", "0")
		case "/close":
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		case "/big":
			_, _ = w.Write(bytes.Repeat([]byte("x"), 100<<10))
		case "/hints":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, "accepted")
		}
	})
	srv, _ := countingServer(t, handler)
	raw := map[string]string{
		"/eof":         "HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nuntil the end",
		"/http10":      "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"/http10-ka":   "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
		"/fold":        "HTTP/1.1 200 OK\r\nX-Fold: a\r\n  b\r\nContent-Length: 0\r\n\r\n",
		"/dup-length":  "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
		"/te-and-cl":   "HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"/chunk-ext":   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;name=v\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"/head-length": "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
		"/no-reason":   "HTTP/1.1 299\r\nContent-Length: 0\r\n\r\n",
		"/1xx-raw":     "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nz",
	}
	type tc struct {
		method, path string
		reuse        bool
	}
	cases := []tc{
		{"GET", "/length", true}, {"GET", "/chunked", true}, {"GET", "/trailer", true},
		{"GET", "/204", true}, {"GET", "/304", true}, {"GET", "/empty", true},
		{"GET", "/close", false}, {"GET", "/big", true}, {"HEAD", "/length", true},
		{"HEAD", "/big", true}, {"GET", "/hints", true},
		{"GET", "/eof", false}, {"GET", "/http10", false}, {"GET", "/http10-ka", true},
		{"GET", "/fold", true}, {"GET", "/dup-length", true}, {"GET", "/te-and-cl", true},
		{"GET", "/chunk-ext", true}, {"HEAD", "/head-length", true}, {"GET", "/no-reason", true},
		{"GET", "/1xx-raw", true},
	}
	for _, c := range cases {
		t.Run(c.method+c.path, func(t *testing.T) {
			t.Parallel()
			url := srv.URL + c.path
			if resp, ok := raw[c.path]; ok {
				serve := answerEach(resp)
				if c.path == "/eof" || c.path == "/http10" {
					serve = answerOnce(resp) // the end of the body is the connection's
				}
				url = newRawServer(t, serve).url(c.path)
			}
			h1, std := newH1(t), newStd(t)
			want, err := fetch(std, newRequest(t, t.Context(), c.method, url, nil))
			if err != nil {
				t.Fatal(err)
			}
			got, err := fetch(h1, newRequest(t, t.Context(), c.method, url, nil))
			if err != nil {
				t.Fatal(err)
			}
			delete(want.Header, "Date")
			delete(got.Header, "Date")
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("h1 saw\n%+v\nnet/http saw\n%+v", got, want)
			}
			if idle := len(h1.idle[hostPort(newRequest(t, t.Context(), "GET", url, nil))]); idle != b2i(c.reuse) {
				t.Fatalf("%d idle connections after the response, want %d", idle, b2i(c.reuse))
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// N sequential requests, each body read and closed, use one connection.
func TestH1KeepAlive(t *testing.T) {
	t.Parallel()
	srv, accepted := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(body)
	}))
	h1 := newH1(t)
	for i := range 20 {
		msg := fmt.Sprintf(`{"n":%d}`, i)
		res, err := fetch(h1, newRequest(t, t.Context(), "POST", srv.URL+"/echo", strings.NewReader(msg)))
		if err != nil {
			t.Fatal(err)
		}
		if res.Body != msg {
			t.Fatalf("request %d: body %q, want %q", i, res.Body, msg)
		}
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("20 sequential requests used %d connections, want 1", n)
	}
	if n := h1.open.Load(); n != 1 {
		t.Fatalf("%d connections open, want the 1 idle one", n)
	}
}

// Concurrent requests (run with -race) each get their own answer; the
// pool never holds more than maxIdle per host.
func TestH1Concurrent(t *testing.T) {
	t.Parallel()
	srv, accepted := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Query().Get("id"))
	}))
	h1 := newH1(t)
	h1.maxIdle = 4
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				id := fmt.Sprintf("%d-%d", g, i)
				res, err := fetch(h1, newRequest(t, t.Context(), "GET", srv.URL+"/?id="+id, nil))
				if err != nil {
					errs <- err
					return
				}
				if res.Body != id {
					errs <- fmt.Errorf("asked for %s, got %q", id, res.Body)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := len(h1.idle[strings.TrimPrefix(srv.URL, "http://")]); n > 4 {
		t.Fatalf("%d idle connections, want at most maxIdle 4", n)
	}
	if n := accepted.Load(); n > 8+8 {
		t.Fatalf("%d connections for 8 concurrent callers", n)
	}
}

// A server that does not keep connections alive says so; nothing is pooled.
func TestH1ServerWithoutKeepAlive(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.SetKeepAlivesEnabled(false)
	srv.Start()
	t.Cleanup(srv.Close)
	h1 := newH1(t)
	for range 3 {
		res, err := fetch(h1, newRequest(t, t.Context(), "POST", srv.URL, strings.NewReader("x")))
		if err != nil || res.Body != "ok" {
			t.Fatalf("%+v, %v", res, err)
		}
		if n := h1.open.Load(); n != 0 {
			t.Fatalf("%d connections kept after Connection: close", n)
		}
	}
}

// A server that closes a kept-alive connection after one answer without
// saying so: with the check on every reuse, the close is seen before the
// connection is used again, so even a POST (which is never sent twice)
// goes out on a new connection. With the default threshold the check
// happens after a second idle (the case of servers' idle timeouts).
func TestH1ServerClosedIdleConnection(t *testing.T) {
	t.Parallel()
	for _, staleAfter := range []time.Duration{0, time.Second} {
		closed := make(chan struct{}, 10)
		srv := newRawServer(t, func(_ int, c net.Conn, r *bufio.Reader) {
			if _, _, err := readRequest(r); err != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			c.Close()
			closed <- struct{}{}
		})
		h1 := newH1(t)
		h1.staleAfter = staleAfter
		rounds := 3
		if staleAfter > 0 {
			rounds = 2
		}
		for i := range rounds {
			res, err := fetch(h1, newRequest(t, t.Context(), "POST", srv.url("/"), strings.NewReader("job")))
			if err != nil || res.Body != "ok" {
				t.Fatalf("staleAfter %v, request %d: %+v, %v", staleAfter, i, res, err)
			}
			<-closed
			waitFor(t, func() bool { // the FIN reaches the client's socket
				h1.mu.Lock()
				defer h1.mu.Unlock()
				c := h1.idle[strings.TrimPrefix(srv.url(""), "http://")]
				return len(c) == 1 && !c[0].alive()
			})
			if staleAfter > 0 {
				time.Sleep(staleAfter + 50*time.Millisecond)
			}
		}
		if n := srv.accepted.Load(); n != int64(rounds) {
			t.Fatalf("%d connections, want %d", n, rounds)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A server that reads the second request on a connection and closes it
// without answering (it timed the connection out as the request came):
// a replayable request is sent again on a new connection, others are not.
func TestH1RetryAfterServerClose(t *testing.T) {
	t.Parallel()
	var seen sync.Map // path → times received
	srv := newRawServer(t, func(_ int, c net.Conn, r *bufio.Reader) {
		for i := 0; ; i++ {
			req, _, err := readRequest(r)
			if err != nil {
				return
			}
			v, _ := seen.LoadOrStore(req.URL.Path, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			if i == 1 {
				return // closes, no answer
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	count := func(path string) int64 {
		v, ok := seen.Load(path)
		if !ok {
			return 0
		}
		return v.(*atomic.Int64).Load()
	}
	cases := []struct {
		name    string
		req     func() *http.Request
		retried bool
	}{
		{"GET", func() *http.Request { return newRequest(t, t.Context(), "GET", srv.url("/get"), nil) }, true},
		{"POST", func() *http.Request {
			return newRequest(t, t.Context(), "POST", srv.url("/post"), strings.NewReader("x"))
		}, false},
		{"POST with Idempotency-Key", func() *http.Request {
			r := newRequest(t, t.Context(), "POST", srv.url("/key"), strings.NewReader("x"))
			r.Header.Set("Idempotency-Key", "k1")
			return r
		}, true},
		{"POST with a body it cannot send again", func() *http.Request {
			r := newRequest(t, t.Context(), "POST", srv.url("/stream"), io.MultiReader(strings.NewReader("x")))
			r.Header.Set("Idempotency-Key", "k1")
			return r
		}, false},
	}
	for _, c := range cases {
		h1 := newH1(t)
		if res, err := fetch(h1, newRequest(t, t.Context(), "GET", srv.url("/first"), nil)); err != nil || res.Body != "ok" {
			t.Fatalf("%s: first request: %+v, %v", c.name, res, err)
		}
		req := c.req()
		res, err := fetch(h1, req)
		path := req.URL.Path
		switch {
		case c.retried && (err != nil || res.Body != "ok" || count(path) != 2):
			t.Fatalf("%s: %+v, %v; received %d times, want a retry that succeeds", c.name, res, err, count(path))
		case !c.retried && (err == nil || count(path) != 1):
			t.Fatalf("%s: %+v, %v; received %d times, want one attempt and an error", c.name, res, err, count(path))
		}
		if !c.retried && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%s: error %v, want an EOF", c.name, err)
		}
	}
}

// failingConn fails every write once fail is set, before writing anything.
type failingConn struct {
	net.Conn
	fail *atomic.Bool
}

func (c failingConn) Write(p []byte) (int, error) {
	if c.fail.Load() {
		return 0, errors.New("broken pipe (test)")
	}
	return c.Conn.Write(p)
}

// A request that failed to write a single byte on a reused connection is
// sent again on a new one, POST or not: the server saw nothing.
func TestH1RetryAfterWriteFailure(t *testing.T) {
	t.Parallel()
	srv, accepted := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(body)
	}))
	var dials atomic.Int64
	fails := make([]*atomic.Bool, 0, 4)
	var mu sync.Mutex
	h1 := newH1(t)
	h1.dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := loopbackDial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		dials.Add(1)
		f := new(atomic.Bool)
		mu.Lock()
		fails = append(fails, f)
		mu.Unlock()
		return failingConn{c, f}, nil
	}
	if res, err := fetch(h1, newRequest(t, t.Context(), "POST", srv.URL, strings.NewReader("one"))); err != nil || res.Body != "one" {
		t.Fatalf("%+v, %v", res, err)
	}
	fails[0].Store(true)
	if res, err := fetch(h1, newRequest(t, t.Context(), "POST", srv.URL, strings.NewReader("two"))); err != nil || res.Body != "two" {
		t.Fatalf("after a failed write: %+v, %v", res, err)
	}
	if dials.Load() != 2 || accepted.Load() != 2 {
		t.Fatalf("%d dials, %d accepted, want 2", dials.Load(), accepted.Load())
	}
	// On a new connection a write failure is the caller's to handle.
	fails[1].Store(true)
	h1.CloseIdleConnections()
	h1.dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := loopbackDial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		f := new(atomic.Bool)
		f.Store(true)
		return failingConn{c, f}, nil
	}
	if _, err := fetch(h1, newRequest(t, t.Context(), "GET", srv.URL, nil)); err == nil || !strings.Contains(err.Error(), "broken pipe (test)") {
		t.Fatalf("write failure on a new connection: %v", err)
	}
}

// stallServer reads each request, sends prefix, and waits until the test
// ends; it reports each connection's close.
func stallServer(t *testing.T, prefix string) (*rawServer, chan struct{}) {
	gone := make(chan struct{}, 10)
	stop := make(chan struct{})
	srv := newRawServer(t, func(_ int, c net.Conn, r *bufio.Reader) {
		if _, _, err := readRequest(r); err != nil {
			return
		}
		_, _ = io.WriteString(c, prefix)
		go func() {
			select {
			case <-stop:
				c.Close()
			}
		}()
		_, _ = io.Copy(io.Discard, r) // returns when the client closes
		gone <- struct{}{}
	})
	t.Cleanup(func() { close(stop) })
	return srv, gone
}

// The context's deadline and its cancellation end an exchange the server
// stalls, before or in the middle of the body; the error is the context's,
// as net/http reports it, and the connection is closed.
func TestH1ContextEndsStalledExchange(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"} {
		for _, cancelIt := range []bool{false, true} {
			srv, gone := stallServer(t, prefix)
			for _, rt := range []http.RoundTripper{newH1(t), newStd(t)} {
				ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
				want := context.DeadlineExceeded
				if cancelIt {
					cancel()
					ctx, cancel = context.WithCancel(t.Context())
					time.AfterFunc(50*time.Millisecond, cancel)
					want = context.Canceled
				}
				c := &http.Client{Transport: rt}
				resp, err := c.Do(newRequest(t, ctx, "GET", srv.url("/"), nil))
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				cancel()
				if !errors.Is(err, want) {
					t.Fatalf("%T, prefix %q: error %v, want %v", rt, prefix, err, want)
				}
				if prefix == "" && domain.WithoutURL(err).Error() != want.Error() {
					t.Fatalf("%T: error reads %q, want %q", rt, domain.WithoutURL(err), want)
				}
				select {
				case <-gone:
				case <-time.After(5 * time.Second):
					t.Fatalf("%T: the connection was not closed", rt)
				}
			}
		}
	}
}

// A response body the caller stops reading: a short rest is drained and
// the connection kept, a long one closes the connection.
func TestH1BodyNotReadToTheEnd(t *testing.T) {
	t.Parallel()
	srv, accepted := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		size := 10 << 10
		if r.URL.Path == "/big" {
			size = 4 << 20
		}
		if r.URL.Query().Has("chunked") {
			w.(http.Flusher).Flush()
		}
		_, _ = w.Write(bytes.Repeat([]byte("y"), size))
	}))
	for _, path := range []string{"/small", "/small?chunked", "/big", "/big?chunked"} {
		h1 := newH1(t)
		before := accepted.Load()
		for range 2 {
			resp, err := h1.RoundTrip(newRequest(t, t.Context(), "GET", srv.URL+path, nil))
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 10)
			if _, err := io.ReadFull(resp.Body, buf); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if _, err := resp.Body.Read(buf); err != errReadOnClosedBody {
				t.Fatalf("Read after Close: %v", err)
			}
		}
		want := int64(1)
		if strings.HasPrefix(path, "/big") {
			want = 2
		}
		if got := accepted.Load() - before; got != want {
			t.Fatalf("%s: 2 requests used %d connections, want %d", path, got, want)
		}
	}
}

// Close while another goroutine's Read waits for the server returns, ends
// the Read and closes the connection.
func TestH1CloseDuringRead(t *testing.T) {
	t.Parallel()
	srv, gone := stallServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
	h1 := newH1(t)
	resp, err := h1.RoundTrip(newRequest(t, t.Context(), "GET", srv.url("/"), nil))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := resp.Body.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	resp.Body.Close()
	if err := <-done; err == nil {
		t.Fatal("Read returned no error after Close")
	}
	<-gone
}

// Malformed responses are errors, never panics, and close the connection.
func TestH1MalformedResponses(t *testing.T) {
	t.Parallel()
	huge := "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 1100) + "\r\n"
	cases := map[string]string{
		"not http":            "SSH-2.0-OpenSSH_9.6\r\n",
		"bad status":          "HTTP/1.1 2x0 OK\r\n\r\n",
		"short status":        "HTTP/1.1 20\r\n\r\n",
		"bad version":         "HTTP/x 200 OK\r\n\r\n",
		"no colon":            "HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
		"bad header name":     "HTTP/1.1 200 OK\r\nBad\x01Name: v\r\n\r\n",
		"initial fold":        "HTTP/1.1 200 OK\r\n folded: v\r\n\r\n",
		"bad length":          "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"empty length":        "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
		"conflicting lengths": "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"gzip te":             "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"two te":              "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		"bad trailer key":     "HTTP/1.1 200 OK\r\nTrailer: Content-Length\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"headers too large":   huge,
		"switching":           "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
		"too many 1xx":        strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", 7) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"truncated head":      "HTTP/1.1 200 OK\r\nX-A: 1\r\n",
		"empty":               "",
		// body errors: the head is fine
		"bad chunk":         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
		"truncated chunk":   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc",
		"truncated length":  "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
		"truncated trailer": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n",
	}
	for name, resp := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newRawServer(t, func(_ int, c net.Conn, r *bufio.Reader) {
				if _, _, err := readRequest(r); err == nil {
					_, _ = io.WriteString(c, resp)
				}
			})
			h1 := newH1(t)
			res, err := fetch(h1, newRequest(t, t.Context(), "GET", srv.url("/"), nil))
			if err == nil && !res.BodyErr {
				t.Fatalf("accepted %q as %+v", resp, res)
			}
			if name == "headers too large" && !errors.Is(err, errHeadersTooLarge) {
				t.Fatalf("error %v, want %v", err, errHeadersTooLarge)
			}
			if n := h1.open.Load(); n != 0 {
				t.Fatalf("%d connections kept after a malformed response", n)
			}
		})
	}
}

// recordingServer answers 200 to each request and keeps its raw head and
// its decoded body.
type recorded struct {
	head string
	req  *http.Request
	body []byte
}

func recordingServer(t *testing.T) (*rawServer, chan recorded) {
	got := make(chan recorded, 1)
	srv := newRawServer(t, func(_ int, c net.Conn, r *bufio.Reader) {
		for {
			var lines []string
			for {
				line, err := readCRLFLine(r)
				if err != nil {
					return
				}
				lines = append(lines, line)
				if line == "" {
					break
				}
			}
			rawHead := strings.Join(lines, "\r\n") + "\r\n"
			req, err := http.ReadRequest(bufio.NewReader(io.MultiReader(strings.NewReader(rawHead), r)))
			if err != nil {
				return
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			got <- recorded{head: rawHead, req: req, body: body}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"); err != nil {
				return
			}
			return
		}
	})
	return srv, got
}

// readCRLFLine reads one line and returns it without its line ending.
func readCRLFLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r"), nil
}

// The same request through both transports arrives byte for byte the same
// in its head, with the same body.
func TestH1SendsWhatNetHTTPSends(t *testing.T) {
	t.Parallel()
	type mk func(url string) *http.Request
	req := func(method, path string, body io.Reader, edit func(*http.Request)) mk {
		return func(url string) *http.Request {
			if s, ok := body.(io.Seeker); ok { // each transport sends it once
				_, _ = s.Seek(0, io.SeekStart)
			}
			r := newRequest(t, t.Context(), method, url+path, body)
			if edit != nil {
				edit(r)
			}
			return r
		}
	}
	stream := func(s string) func(url string) *http.Request {
		return func(url string) *http.Request {
			r := newRequest(t, t.Context(), "POST", url+"/stream", io.MultiReader(strings.NewReader(s)))
			r.Header.Set("Content-Type", "application/json")
			return r
		}
	}
	cases := map[string]mk{
		"GET": req("GET", "/path/to?q=1&r=a%20b", nil, nil),
		"GET with headers": req("GET", "/", nil, func(r *http.Request) {
			r.Header["X-Multi"] = []string{"one", "two"}
			r.Header.Set("Authorization", "Bearer abc")
			r.Header.Set("X-Spaces", "  padded value\t")
			r.Header["lowercase-key"] = []string{"as set"}
			r.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		}),
		"POST JSON": req("POST", "/jobs", bytes.NewReader([]byte(`{"a":1}`)), func(r *http.Request) {
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Idempotency-Key", "k")
		}),
		"POST empty":   req("POST", "/", http.NoBody, nil),
		"POST nil":     req("POST", "/", nil, nil),
		"PUT string":   req("PUT", "/x", strings.NewReader("text"), nil),
		"DELETE":       req("DELETE", "/x", nil, nil),
		"OPTIONS":      req("OPTIONS", "/", nil, func(r *http.Request) { r.URL.Path = "*" }),
		"PATCH empty":  req("PATCH", "/", strings.NewReader(""), nil),
		"Host":         req("GET", "/", nil, func(r *http.Request) { r.Host = "api.example.test" }),
		"bad Host":     req("GET", "/", nil, func(r *http.Request) { r.Host = "evil\r\nX: y" }),
		"IPv6 zone":    req("GET", "/", nil, func(r *http.Request) { r.Host = "[fe80::1%25en0]:8080" }),
		"User-Agent":   req("GET", "/", nil, func(r *http.Request) { r.Header.Set("User-Agent", "job/1") }),
		"no UA":        req("GET", "/", nil, func(r *http.Request) { r.Header.Set("User-Agent", "") }),
		"Close":        req("GET", "/", nil, func(r *http.Request) { r.Close = true }),
		"Close header": req("GET", "/", nil, func(r *http.Request) { r.Close = true; r.Header.Set("Connection", "close") }),
		"stream":       stream(`{"streamed":true}`),
		"stream empty": stream(""),
		"length -1": req("POST", "/", strings.NewReader("abc"), func(r *http.Request) {
			r.ContentLength = -1
			r.GetBody = nil
		}),
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var heads []string
			var bodies [][]byte
			var reqs []*http.Request
			for _, rt := range []http.RoundTripper{newStd(t), newH1(t)} {
				srv, got := recordingServer(t)
				resp, err := rt.RoundTrip(mk(srv.url("")))
				if err != nil {
					t.Fatalf("%T: %v", rt, err)
				}
				resp.Body.Close()
				r := <-got
				heads, bodies, reqs = append(heads, strings.ReplaceAll(r.head, srv.ln.Addr().String(), "ADDR")), append(bodies, r.body), append(reqs, r.req)
			}
			chunked := reqs[0].TransferEncoding != nil
			if chunked != (reqs[1].TransferEncoding != nil) {
				t.Fatalf("framing differs:\nnet/http:\n%s\nh1:\n%s", heads[0], heads[1])
			}
			if !chunked && heads[0] != heads[1] {
				t.Fatalf("heads differ:\nnet/http:\n%s\nh1:\n%s", heads[0], heads[1])
			}
			if chunked && (!reflect.DeepEqual(reqs[0].Header, reqs[1].Header) || reqs[0].RequestURI != reqs[1].RequestURI) {
				t.Fatalf("heads differ:\nnet/http:\n%s\nh1:\n%s", heads[0], heads[1])
			}
			if !bytes.Equal(bodies[0], bodies[1]) {
				t.Fatalf("bodies differ: net/http %q, h1 %q", bodies[0], bodies[1])
			}
			if strings.Contains(heads[1], "Accept-Encoding") {
				t.Fatalf("h1 asked for compression:\n%s", heads[1])
			}
		})
	}
}

// Requests net/http's Transport refuses, h1Transport refuses too, before
// dialling; requests it does not handle itself go to net/http.
func TestH1RefusesWhatNetHTTPRefuses(t *testing.T) {
	t.Parallel()
	srv, accepted := countingServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	bad := map[string]func(*http.Request){
		"header injection": func(r *http.Request) { r.Header.Set("X-A", "v\r\nX-Injected: 1") },
		"bad header name":  func(r *http.Request) { r.Header["Bad Name"] = []string{"v"} },
		"NUL in value":     func(r *http.Request) { r.Header.Set("X-A", "a\x00b") },
		"bad method":       func(r *http.Request) { r.Method = "GE T" },
		"nil header":       func(r *http.Request) { r.Header = nil },
		"length, no body":  func(r *http.Request) { r.ContentLength = 5 },
	}
	// h1Transport refuses before dialling; net/http after.
	for _, rt := range []http.RoundTripper{newH1(t), newStd(t)} {
		for name, edit := range bad {
			r := newRequest(t, t.Context(), "GET", srv.URL, nil)
			edit(r)
			if resp, err := rt.RoundTrip(r); err == nil {
				resp.Body.Close()
				t.Errorf("%s: %T sent it", name, rt)
			}
		}
		if _, ok := rt.(*h1Transport); ok && accepted.Load() != 0 {
			t.Fatalf("%d connections for requests that should not have been sent", accepted.Load())
		}
	}
	h1 := newH1(t)
	for _, edit := range []func(*http.Request){
		func(r *http.Request) { r.Header.Set("Expect", "100-continue") },
		func(r *http.Request) { r.Header.Set("Upgrade", "websocket") },
		func(r *http.Request) { r.Trailer = http.Header{"X-T": nil} },
		func(r *http.Request) { r.Host = "bücher.test" },
		func(r *http.Request) { r.Body = io.NopCloser(strings.NewReader("x")); r.ContentLength = 0 },
		func(r *http.Request) { r.TransferEncoding = []string{"chunked"} },
	} {
		r := newRequest(t, t.Context(), "GET", srv.URL, nil)
		edit(r)
		if h1.handles(r) {
			t.Errorf("h1Transport takes %+v, which net/http sends differently", r)
		}
	}
	if !h1.handles(newRequest(t, t.Context(), "POST", srv.URL, strings.NewReader("x"))) ||
		h1.handles(newRequest(t, t.Context(), "GET", "https://127.0.0.1/", nil)) {
		t.Fatal("handles: http:// POST must be taken, https:// left")
	}
}

// NewClient sends http:// through h1Transport (unless told otherwise) and
// keeps one pool per policy; CloseIdleConnections closes them all.
func TestClientUsesH1ForPlainHTTP(t *testing.T) {
	t.Parallel()
	srv, _ := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	for _, netHTTP := range []bool{false, true} {
		c := NewClient(Options{NetHTTPForPlainHTTP: netHTTP})
		if _, err := fetch(c.Transport, newRequest(t, t.Context(), "GET", srv.URL, nil)); err != nil {
			t.Fatal(err)
		}
		pt := c.Transport.(*policyTransport)
		tr := pt.transport(pt.fallback)
		if (tr.h1 == nil) != netHTTP {
			t.Fatalf("NetHTTPForPlainHTTP %v: h1 %v", netHTTP, tr.h1)
		}
		if tr.h1 != nil {
			if tr.h1.open.Load() != 1 {
				t.Fatalf("h1Transport holds %d connections, want 1", tr.h1.open.Load())
			}
			c.CloseIdleConnections()
			if tr.h1.open.Load() != 0 {
				t.Fatal("CloseIdleConnections left a connection open")
			}
		}
	}
}

// Idle connections are closed after the idle timeout.
func TestH1IdleTimeout(t *testing.T) {
	t.Parallel()
	srv, _ := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	h1 := newH1(t)
	h1.idleTimeout = 50 * time.Millisecond
	if _, err := fetch(h1, newRequest(t, t.Context(), "GET", srv.URL, nil)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return h1.open.Load() == 0 })
	h1.mu.Lock()
	defer h1.mu.Unlock()
	if n := len(h1.idle[strings.TrimPrefix(srv.URL, "http://")]); n != 0 {
		t.Fatalf("%d expired connections still pooled", n)
	}
}

// fakeConn is a connection whose server side is a fixed byte string.
type fakeConn struct {
	net.Conn // nil: only the methods below are used
	r        *bytes.Reader
}

func (c *fakeConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *fakeConn) Close() error                     { return nil }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzH1Response feeds arbitrary server output to h1Transport. It must
// never panic, and whenever net/http's parser (http.ReadResponse) reads the
// same bytes as a final response, h1Transport must read the same status,
// headers and body.
func FuzzH1Response(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nto the end",
		"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 +20 OK\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 1\n\nx",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/2.0 200 OK\r\n\r\n",
		"junk",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, raw string, head bool) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		h1 := &h1Transport{
			dial: func(context.Context, string, string) (net.Conn, error) {
				return &fakeConn{r: bytes.NewReader([]byte(raw))}, nil
			},
			maxIdle: 1, idleTimeout: time.Minute,
		}
		defer h1.CloseIdleConnections()
		req, _ := http.NewRequest(method, "http://fuzz.test/", nil)
		got, gotErr := fetch(h1, req)

		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), req)
		if err != nil || resp.StatusCode < 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return // not a final response to net/http either (or 1xx, skipped only by h1)
		}
		body, bodyErr := io.ReadAll(resp.Body)
		if gotErr != nil {
			t.Fatalf("h1 refused what net/http read: %v\n%q", gotErr, raw)
		}
		want := &result{
			Status: resp.Status, StatusCode: resp.StatusCode, Proto: resp.Proto, Header: resp.Header,
			Body: string(body), BodyErr: bodyErr != nil, ContentLength: resp.ContentLength,
			TE: resp.TransferEncoding, Close: resp.Close, Trailer: resp.Trailer,
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("for %q\nh1:       %+v\nnet/http: %+v", raw, got, want)
		}
	})
}

type failingBody struct{}

func (failingBody) Read([]byte) (int, error) { return 0, errors.New("body read failed (test)") }
func (failingBody) Close() error             { return nil }

// A body that fails to read is the caller's error: it is not sent again,
// even on a reused connection, and the connection is closed.
func TestH1BodyErrorNotRetried(t *testing.T) {
	t.Parallel()
	srv, _ := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	h1 := newH1(t)
	if _, err := fetch(h1, newRequest(t, t.Context(), "GET", srv.URL, nil)); err != nil {
		t.Fatal(err)
	}
	req := newRequest(t, t.Context(), "PUT", srv.URL, nil)
	req.Body, req.ContentLength = failingBody{}, 10
	var rewound atomic.Int64
	req.GetBody = func() (io.ReadCloser, error) { rewound.Add(1); return failingBody{}, nil }
	if _, err := h1.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "body read failed (test)") {
		t.Fatalf("error %v, want the body's", err)
	}
	if rewound.Load() != 0 {
		t.Fatal("a request whose body failed was sent again")
	}
	if n := h1.open.Load(); n != 0 {
		t.Fatalf("%d connections kept after a failed request", n)
	}
}
