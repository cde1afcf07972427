package httpapi_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	httpapi "github.com/aquiferhq/aquifer/internal/adapters/inbound/http"
)

// The listener's protection against slow and oversized clients, with short
// settings so the tests run in about a second. cmd/aquiferd checks that the
// daemon runs with non-zero defaults.

// serveHardened serves the API through httpapi.NewServer with o on a
// loopback port and returns its address.
func serveHardened(t *testing.T, o httpapi.ServerOptions) (string, *hostileAPI) {
	t.Helper()
	api := newHostileAPI(t, false)
	srv := httpapi.NewServer(api.h, o, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String(), api
}

// dialRaw opens a raw connection; the test owns what goes over it.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// trickle writes data one byte per interval until it is all sent, the
// connection fails, or stop closes. It returns when it is done.
func trickle(c net.Conn, data string, interval time.Duration, stop <-chan struct{}) {
	for i := 0; i < len(data); i++ {
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
		if _, err := c.Write([]byte{data[i]}); err != nil {
			return
		}
	}
}

// readUntilClosed reads everything the server sends until it closes the
// connection (or the limit passes) and reports what came and when it ended.
func readUntilClosed(c net.Conn, limit time.Duration) (got string, closedAfter time.Duration, closed bool) {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return string(b), time.Since(start), false
	}
	return string(b), time.Since(start), true // EOF or reset: the server hung up
}

func TestSlowHeadersAreCutOff(t *testing.T) {
	t.Parallel()
	const headerTimeout = 300 * time.Millisecond
	addr, _ := serveHardened(t, httpapi.ServerOptions{ReadHeaderTimeout: headerTimeout, ReadTimeout: 10 * time.Second})
	start := time.Now() // the server's clock starts when it accepts
	c := dialRaw(t, addr)
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: aquifer\r\n"); err != nil {
		t.Fatal(err)
	}
	// 400 bytes at 20 ms each would take 8 s: the header never ends in time.
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		trickle(c, "X-Slow: "+strings.Repeat("a", 400)+"\r\n\r\n", 20*time.Millisecond, stop)
	}()
	got, _, closed := readUntilClosed(c, 5*time.Second)
	elapsed := time.Since(start)
	close(stop)
	<-trickled
	if !closed {
		t.Fatalf("connection still open after %v of trickled headers", elapsed)
	}
	if elapsed < headerTimeout*4/5 || elapsed > headerTimeout+3*time.Second {
		t.Fatalf("cut off after %v, want about %v", elapsed, headerTimeout)
	}
	if strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Fatalf("slow request was served: %q", got)
	}
	t.Logf("trickled headers: connection closed after %v (ReadHeaderTimeout %v), server sent %q", elapsed, headerTimeout, got)
}

func TestTrickledBodyIsCutOff(t *testing.T) {
	t.Parallel()
	const readTimeout = 500 * time.Millisecond
	addr, api := serveHardened(t, httpapi.ServerOptions{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: readTimeout})
	body := `{"user_id":"u","idempotent_key":"slow","url":"http://127.0.0.1:1/","body":"` + strings.Repeat("x", 300) + `"}`
	start := time.Now()
	c := dialRaw(t, addr)
	if _, err := io.WriteString(c, "POST /jobs HTTP/1.1\r\nHost: aquifer\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The body would take about 6 s at 20 ms a byte.
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		trickle(c, body, 20*time.Millisecond, stop)
	}()
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	elapsed := time.Since(start)
	close(stop)
	<-trickled
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"error"`) {
			t.Fatalf("trickled body answered %d %q, want 400 with a JSON error", resp.StatusCode, b)
		}
		t.Logf("trickled body: %d %s after %v (ReadTimeout %v)", resp.StatusCode, strings.TrimSpace(string(b)), elapsed, readTimeout)
	} else {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no answer and no hang-up %v after a trickled body", elapsed)
		}
		t.Logf("trickled body: connection closed after %v (ReadTimeout %v): %v", elapsed, readTimeout, err)
	}
	if elapsed < readTimeout*4/5 || elapsed > readTimeout+3*time.Second {
		t.Fatalf("cut off after %v, want about %v", elapsed, readTimeout)
	}
	if n := api.store.inserts.Load(); n != 0 {
		t.Fatalf("%d rows written for a request whose body never arrived", n)
	}
}

func TestOversizeHeadersGet431(t *testing.T) {
	t.Parallel()
	const maxHeader = 4 << 10
	addr, _ := serveHardened(t, httpapi.ServerOptions{MaxHeaderBytes: maxHeader})

	// net/http allows MaxHeaderBytes plus 4 KiB of slack for the request
	// line; well past that the request is refused.
	big := dialRaw(t, addr)
	if _, err := io.WriteString(big, "GET /health HTTP/1.1\r\nHost: aquifer\r\nX-Big: "+strings.Repeat("b", 2*maxHeader+512)+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = big.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(big), nil)
	if err != nil {
		t.Fatalf("oversize headers: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversize headers: %d, want 431", resp.StatusCode)
	}

	// Just under the limit is served.
	ok := dialRaw(t, addr)
	if _, err := io.WriteString(ok, "GET /health HTTP/1.1\r\nHost: aquifer\r\nX-Fits: "+strings.Repeat("f", maxHeader-200)+"\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = ok.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(ok), nil)
	if err != nil {
		t.Fatalf("headers under the limit: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("headers under the limit: %d, want 200", resp.StatusCode)
	}
}

func TestNewServerDefaults(t *testing.T) {
	t.Parallel()
	srv := httpapi.NewServer(http.NotFoundHandler(), httpapi.ServerOptions{}, nil)
	if srv.ReadHeaderTimeout != 10*time.Second || srv.ReadTimeout != 60*time.Second || srv.WriteTimeout != 60*time.Second ||
		srv.IdleTimeout != 120*time.Second || srv.MaxHeaderBytes != 64<<10 {
		t.Fatalf("defaults: header %v, read %v, write %v, idle %v, max header %d", srv.ReadHeaderTimeout, srv.ReadTimeout,
			srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
}
