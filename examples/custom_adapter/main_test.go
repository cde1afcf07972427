package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

func destination(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/boom" {
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "got %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// client is one line-protocol connection.
type client struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if conn, err = net.DialTimeout("tcp", addr, time.Second); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	return &client{t: t, conn: conn, r: bufio.NewReader(conn)}
}

// do sends one command and returns the answer line.
func (c *client) do(cmd string) string {
	c.t.Helper()
	if _, err := fmt.Fprintln(c.conn, cmd); err != nil {
		c.t.Fatal(err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("%s: %v", cmd, err)
	}
	return strings.TrimSuffix(line, "\n")
}

func TestLineProtocol(t *testing.T) {
	t.Parallel()
	dest := destination(t)
	line := NewLineAdapter("127.0.0.1:0")
	aq, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true,
		Rates: aquifer.RateTable{Defaults: aquifer.Rate{RPS: 50, MaxConcurrent: 2}}, Adapters: []aquifer.Adapter{line}})
	if err != nil {
		t.Fatal(err)
	}
	if err := aq.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := dial(t, line.Addr().String())

	job := fmt.Sprintf(`{"user_id":"u","idempotent_key":"k1","url":%q,"method":"POST","body":"hi"}`, dest.URL+"/orders")
	ok := c.do("ENQUEUE " + job)
	id, found := strings.CutPrefix(ok, "OK ")
	if !found || len(id) != 32 {
		t.Fatalf("ENQUEUE: %q", ok)
	}
	if again := c.do("enqueue " + job); again != "OK "+id+" duplicate" {
		t.Errorf("second ENQUEUE: %q, want the same job as a duplicate", again)
	}
	if got := c.do("WAIT " + id); got != fmt.Sprintf("DONE %s completed 200 %q", id, "got POST /orders") {
		t.Errorf("WAIT: %q", got)
	}
	if got := c.do("GET " + id); got != "JOB "+id+" completed" {
		t.Errorf("GET: %q", got)
	}

	// A 4xx is the destination's answer, not a failure: completed, not retried.
	ok = c.do(fmt.Sprintf(`ENQUEUE {"user_id":"u","idempotent_key":"k2","url":%q}`, dest.URL+"/boom"))
	id2 := strings.TrimPrefix(ok, "OK ")
	if got := c.do("WAIT " + id2); !strings.HasPrefix(got, "DONE "+id2+" completed 400 ") {
		t.Errorf("WAIT on a 400: %q", got)
	}

	for cmd, want := range map[string]string{
		"ENQUEUE {":                                     "ERR invalid ENQUEUE wants one JSON object",
		`ENQUEUE {"user_id":"u","extra":1}`:             `ERR invalid ENQUEUE wants one JSON object: json: unknown field "extra"`,
		`ENQUEUE {"user_id":"u","idempotent_key":"k3"}`: "ERR invalid either url or pool_id is required",
		`ENQUEUE {"user_id":"u","idempotent_key":"k3","url":"ftp://x.test/"}`: "ERR invalid ",
		"GET " + strings.Repeat("0", 32):                                      "ERR not_found ",
		"FLY away":                                                            `ERR invalid unknown command "FLY"`,
	} {
		if got := c.do(cmd); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %q, want %q…", cmd, got, want)
		}
	}

	// Stop ends a WAIT in progress and closes the connection. The job's
	// destination refuses connections, so it waits to be retried.
	ok = c.do(`ENQUEUE {"user_id":"u","idempotent_key":"slow","url":"http://127.0.0.1:1/closed"}`)
	if _, err := fmt.Fprintln(c.conn, "WAIT "+strings.TrimPrefix(ok, "OK ")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the WAIT begin
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := aq.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The answer may or may not make it out before the connection closes.
	if got, err := c.r.ReadString('\n'); err == nil && got != "ERR unavailable shutting down\n" {
		t.Errorf("WAIT at Stop: %q", got)
	}
	if _, err := c.r.ReadString('\n'); err == nil {
		t.Error("the connection is still open after Stop")
	}
}

// TestBuiltProgram builds the example as a user would, runs it, talks to it
// and stops it with SIGTERM.
func TestBuiltProgram(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a binary: skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "custom_adapter")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dest := destination(t)
	db := filepath.Join(t.TempDir(), "data", "jobs.db")
	cmd := exec.Command(bin, "-listen", addr, "-db", db, "-rps", "20")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("custom_adapter logs:\n%s", logs.String())
		}
	})

	c := dial(t, addr)
	ok := c.do(fmt.Sprintf(`ENQUEUE {"user_id":"u","idempotent_key":"b1","url":%q}`, dest.URL+"/built"))
	id, found := strings.CutPrefix(ok, "OK ")
	if !found {
		t.Fatalf("ENQUEUE: %q", ok)
	}
	if got := c.do("WAIT " + id); got != fmt.Sprintf("DONE %s completed 200 %q", id, "got GET /built") {
		t.Errorf("WAIT: %q", got)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if _, err := os.Stat(db); err != nil {
		t.Errorf("the SQLite database was not created: %v", err)
	}
}
