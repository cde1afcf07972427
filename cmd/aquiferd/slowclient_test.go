package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/config"
)

// TestDaemonListenerIsHardened builds and starts the daemon as Run does and checks that
// its listener has every protection against slow and oversized clients
// (httpapi's tests show each setting works; TestHostileInputFlood sees the
// header timeout cut a real client off).
func TestDaemonListenerIsHardened(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"AQUIFER_DATA_DIR": filepath.Join(t.TempDir(), "data"), "AQUIFER_HOST": "127.0.0.1", "PORT": strconv.Itoa(freePort(t)),
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	d, err := build(context.Background(), cfg, zap.NewNop(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.aq.Start(t.Context()); err != nil { // the front doors build their server here
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.shutdown(); err != nil {
			t.Error(err)
		}
	})
	if d.web == nil || d.web.srv == nil {
		t.Fatal("no HTTP server")
	}
	srv := d.web.srv
	if srv.ReadHeaderTimeout <= 0 || srv.ReadHeaderTimeout > 30*time.Second {
		t.Errorf("ReadHeaderTimeout %v", srv.ReadHeaderTimeout)
	}
	if srv.ReadTimeout <= 0 || srv.ReadTimeout > 5*time.Minute {
		t.Errorf("ReadTimeout %v", srv.ReadTimeout)
	}
	if srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Errorf("WriteTimeout %v, IdleTimeout %v", srv.WriteTimeout, srv.IdleTimeout)
	}
	if srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes > 1<<20 {
		t.Errorf("MaxHeaderBytes %d", srv.MaxHeaderBytes)
	}
	t.Logf("listener: ReadHeaderTimeout %v, ReadTimeout %v, WriteTimeout %v, IdleTimeout %v, MaxHeaderBytes %d",
		srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
}

// TestDaemonHeaderLimit checks the running daemon's header limit from the
// outside: 32 KiB of headers are served, 80 KiB get 431.
func TestDaemonHeaderLimit(t *testing.T) {
	t.Parallel()
	p := startDaemon(t, storeEnv(t, "sqlite"))
	addr := strings.TrimPrefix(p.url, "http://")
	for _, c := range []struct {
		size int
		want int
	}{{32 << 10, http.StatusOK}, {80 << 10, http.StatusRequestHeaderFieldsTooLarge}} {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, "GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\nX-Pad: "+
			strings.Repeat("p", c.size)+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%d bytes of headers: %v", c.size, err)
		}
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%d bytes of headers: %d, want %d", c.size, resp.StatusCode, c.want)
		}
	}
}
