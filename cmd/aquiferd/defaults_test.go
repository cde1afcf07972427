package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/config"
	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// runInProcess runs the daemon as main does, in this process, with env as
// the whole environment and the logs as JSON lines in the returned buffer.
// It returns once the daemon has logged its start; the daemon is shut down
// (and must stop cleanly) when the test ends.
func runInProcess(t *testing.T, env map[string]string) *lockedBuffer {
	t.Helper()
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard, logs)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the daemon did not stop within 30s")
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), `"aquiferd started`) {
		select {
		case err := <-done:
			t.Fatalf("Run returned before starting: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not start:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return logs
}

// logEntries parses the JSON log lines.
func logEntries(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// startLine is the "aquiferd started" log entry.
func startLine(t *testing.T, logs string) map[string]any {
	t.Helper()
	for _, e := range logEntries(t, logs) {
		if msg, _ := e["msg"].(string); strings.HasPrefix(msg, "aquiferd started") {
			return e
		}
	}
	t.Fatalf("no start-up line in the logs:\n%s", logs)
	return nil
}

func openRelayWarned(t *testing.T, logs string) bool {
	t.Helper()
	for _, e := range logEntries(t, logs) {
		if msg, _ := e["msg"].(string); e["level"] == "warn" && strings.HasPrefix(msg, "OPEN RELAY") {
			return true
		}
	}
	return false
}

// TestStartupLineShowsTheBackendsSettings: the start-up line carries the
// settings of the selected store and none of the others' (no db_path or
// sqlite_sync on Postgres). With no AQUIFER_HOST at all it listens on
// loopback and says so.
func TestStartupLineShowsTheBackendsSettings(t *testing.T) {
	t.Parallel()
	for backend, want := range map[string]struct{ has, hasNot []string }{
		"sqlite":   {[]string{"db_path", "sqlite_sync"}, []string{"postgres_schema", "instance_id", "pebble_wal_sync_interval"}},
		"pebble":   {[]string{"db_path", "pebble_wal_sync_interval"}, []string{"sqlite_sync", "postgres_schema", "instance_id"}},
		"postgres": {[]string{"postgres_schema", "instance_id"}, []string{"db_path", "sqlite_sync", "pebble_wal_sync_interval"}},
	} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			port := freePort(t)
			env := map[string]string{"PORT": strconv.Itoa(port), "AQUIFER_STORE_BACKEND": backend}
			for _, kv := range storeEnv(t, backend) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			line := startLine(t, runInProcess(t, env).String())
			if line["store"] != backend {
				t.Errorf("store = %v, want %s", line["store"], backend)
			}
			for _, k := range want.has {
				if _, ok := line[k]; !ok {
					t.Errorf("the start-up line has no %s: %v", k, line)
				}
			}
			for _, k := range want.hasNot {
				if v, ok := line[k]; ok {
					t.Errorf("the start-up line shows %s=%v, which does not apply to %s", k, v, backend)
				}
			}
			if backend == "postgres" && (line["postgres_schema"] != env["AQUIFER_POSTGRES_SCHEMA"] || line["instance_id"] != env["AQUIFER_INSTANCE_ID"]) {
				t.Errorf("postgres fields %v %v, want %s %s", line["postgres_schema"], line["instance_id"],
					env["AQUIFER_POSTGRES_SCHEMA"], env["AQUIFER_INSTANCE_ID"])
			}
			if backend != "postgres" && line["db_path"] != filepath.Join(env["AQUIFER_DATA_DIR"], "aquifer.db") {
				t.Errorf("db_path = %v", line["db_path"])
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			if line["addr"] != addr || line["listen"] != "loopback" || !strings.Contains(line["msg"].(string), "listening on "+addr) {
				t.Errorf("with AQUIFER_HOST unset: addr %v, listen %v, msg %q; want %s on loopback", line["addr"], line["listen"], line["msg"], addr)
			}
		})
	}
}

// TestOpenModeBeyondLoopbackWarns: an open instance (no tenants) listening
// on all interfaces warns that it is an open relay; one on loopback, or
// one with tenants, does not.
func TestOpenModeBeyondLoopbackWarns(t *testing.T) {
	t.Parallel()
	tenantsFile := filepath.Join(t.TempDir(), "aquifer.yml")
	if err := os.WriteFile(tenantsFile, []byte("tenants:\n  - name: a\n    key_sha256: "+config.HashKey("k")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, host, config string
		listen             string
		warn               bool
	}{
		{"open on loopback", "", "", "loopback", false},
		{"open on all interfaces", "0.0.0.0", "", "all interfaces", true},
		{"tenants on all interfaces", "0.0.0.0", tenantsFile, "all interfaces", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"PORT": strconv.Itoa(freePort(t)), "AQUIFER_DATA_DIR": filepath.Join(t.TempDir(), "data")}
			if tc.host != "" {
				env["AQUIFER_HOST"] = tc.host
			}
			if tc.config != "" {
				env["CONFIG_PATH"] = tc.config
			}
			logs := runInProcess(t, env).String()
			if got := startLine(t, logs)["listen"]; got != tc.listen {
				t.Errorf("listen = %v, want %s", got, tc.listen)
			}
			if got := openRelayWarned(t, logs); got != tc.warn {
				t.Errorf("OPEN RELAY warning: %v, want %v\n%s", got, tc.warn, logs)
			}
			// The probe finds the instance from the same settings, on
			// loopback also when it listens on all interfaces.
			if out, _, err := runCLI(t, env, "probe"); err != nil || !strings.HasSuffix(out, "/health: ok\n") {
				t.Errorf("probe: %q %v", out, err)
			}
		})
	}
}

func TestListenScope(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "loopback", "[::1]:8080": "loopback", "0.0.0.0:8080": "all interfaces",
		"[::]:8080": "all interfaces", "192.0.2.7:8080": "network", "[2001:db8::1]:80": "network",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := listenScope(a); got != want {
			t.Errorf("listenScope(%s) = %q, want %q", addr, got, want)
		}
	}
	if got := listenScope(nil); got != "none" {
		t.Errorf("listenScope(nil) = %q", got)
	}
}

// TestProbeRunningInstance: probe answers 0 for a running daemon, found
// from the settings or given by -url, and says nothing on stderr.
func TestProbeRunningInstance(t *testing.T) {
	t.Parallel()
	env := map[string]string{"AQUIFER_HOST": "127.0.0.1", "PORT": strconv.Itoa(freePort(t)),
		"AQUIFER_DATA_DIR": filepath.Join(t.TempDir(), "data")}
	runInProcess(t, env)
	base := "http://127.0.0.1:" + env["PORT"]
	for _, args := range [][]string{{"probe"}, {"probe", "-url", base}, {"probe", "-url", base + "/health", "-timeout", "2s"}} {
		out, errOut, err := runCLI(t, env, args...)
		if err != nil || out != base+"/health: ok\n" || errOut != "" {
			t.Errorf("%v: stdout %q, stderr %q, %v", args, out, errOut, err)
		}
	}
}

// TestProbeFailures: every unhealthy answer, or none, is an error naming
// the reason on one line.
func TestProbeFailures(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := strconv.Itoa(closed.Addr().(*net.TCPAddr).Port)
	closed.Close() // nothing listens there now

	serve := func(code int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/health" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(code)
			io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	redirect := httptest.NewServer(http.RedirectHandler("/elsewhere", http.StatusFound))
	t.Cleanup(redirect.Close)

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"nothing listening (settings)", map[string]string{"AQUIFER_HOST": "127.0.0.1", "PORT": closedPort}, nil, "connection refused"},
		{"nothing listening (-url)", nil, []string{"-url", "http://127.0.0.1:" + closedPort}, "connection refused"},
		{"degraded with 200", nil, []string{"-url", serve(200, `{"status":"degraded"}`)}, `status "degraded" (HTTP 200)`},
		{"degraded with 503", nil, []string{"-url", serve(503, `{"status":"degraded","store":{"ok":false,"error":"disk full"}}`)},
			`status "degraded" (HTTP 503): store: disk full`},
		{"500 without a document", nil, []string{"-url", serve(500, `oops`)}, "HTTP 500 Internal Server Error"},
		{"200 that is not /health", nil, []string{"-url", serve(200, `<html>hello</html>`)}, "not an Aquifer /health document"},
		{"redirect not followed", nil, []string{"-url", redirect.URL}, "HTTP 302 Found"},
		{"no answer in time", nil, []string{"-url", slow.URL, "-timeout", "200ms"}, "no answer within 200ms"},
		{"bad url", nil, []string{"-url", "localhost:8080"}, "want an http:// or https:// URL"},
		{"stray argument", nil, []string{"now"}, "unexpected argument"},
		{"no HTTP listener", map[string]string{"AQUIFER_ADAPTER": "mcp-stdio"}, nil, "no HTTP listener to probe"},
		{"invalid configuration", map[string]string{"PORT": "x", "AQUIFER_HOST": ""}, nil,
			`probe: invalid configuration: PORT: "x" is not an integer; AQUIFER_HOST: must not be empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, _, err := runCLI(t, tc.env, append([]string{"probe"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") || out != "" {
				t.Errorf("probe: %v (stdout %q), want one line with %q", err, out, tc.want)
			}
		})
	}
}

// failingPing is a store whose health check fails: /health is degraded.
type failingPing struct{ aquifer.Store }

func (failingPing) Ping(context.Context) error { return errors.New("store is unwell") }

// TestProbeDegradedInstance: against Aquifer's own /health handler with a
// store that does not answer, probe fails with the handler's reason.
func TestProbeDegradedInstance(t *testing.T) {
	t.Parallel()
	web := aquifer.NewHTTPAdapter("127.0.0.1:0", aquifer.HTTPOptions{})
	aq, err := aquifer.New(aquifer.Options{Store: failingPing{aquifer.NewMemoryStore()}, CloseStore: true,
		Adapters: []aquifer.Adapter{web}})
	if err != nil {
		t.Fatal(err)
	}
	if err := aq.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = aq.Stop(ctx)
	})
	_, _, err = runCLI(t, nil, "probe", "-url", "http://"+web.Addr().String())
	if err == nil || !strings.Contains(err.Error(), `status "degraded" (HTTP 503): store: store is unwell`) {
		t.Fatalf("probe of a degraded instance: %v", err)
	}
}

// TestProbeExitStatus runs the binary as a health check does: exit status
// 0 for a healthy instance, non-zero with one line on stderr for none.
func TestProbeExitStatus(t *testing.T) {
	t.Parallel()
	bin := aquiferdBinary(t)
	p := startDaemon(t, storeEnv(t, "sqlite"))
	probe := exec.Command(bin, "probe", "-url", p.url)
	if out, err := probe.CombinedOutput(); err != nil {
		t.Fatalf("probe of a running daemon: %v\n%s", err, out)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	probe = exec.Command(bin, "probe", "-url", "http://"+addr)
	var stderr strings.Builder
	probe.Stderr = &stderr
	err = probe.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("probe of a closed port: %v, want a non-zero exit", err)
	}
	msg := stderr.String()
	if strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "aquiferd: probe http://"+addr+"/health: ") || !strings.Contains(msg, "connection refused") {
		t.Fatalf("probe's stderr: %q, want one line with the reason", msg)
	}
}

func TestHelpListsProbe(t *testing.T) {
	t.Parallel()
	_, help, err := runCLI(t, nil, "-help")
	if err != nil || !strings.Contains(help, "\n  probe ") {
		t.Fatalf("-help does not list the probe command: %v\n%s", err, help)
	}
	if _, _, err := runCLI(t, nil, "frobnicate"); err == nil || !strings.Contains(err.Error(), "probe") {
		t.Fatalf("the unknown-command error does not list probe: %v", err)
	}
}

// TestDaemonMemoryLimitFromTheFirstJob: a freshly started daemon with a
// 1 MiB memory limit sheds its very first job with the admission 429 (no
// collection has to run first); with a generous limit it admits it.
func TestDaemonMemoryLimitFromTheFirstJob(t *testing.T) {
	t.Parallel()
	body := `{"user_id":"u","idempotent_key":"first","url":"http://127.0.0.1:1/x"}`
	for limit, want := range map[string]int{"1": http.StatusTooManyRequests, "1048576": http.StatusCreated} {
		p := startDaemon(t, append(storeEnv(t, "sqlite"), "AQUIFER_MEMORY_LIMIT_MB="+limit))
		resp, err := http.Post(p.url+"/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("limit %s MiB: first job answered %d %v, want %d", limit, resp.StatusCode, doc, want)
		}
		if want == http.StatusTooManyRequests && (doc["limit_reason"] != "memory" || resp.Header.Get("Retry-After") == "") {
			t.Fatalf("limit %s MiB: 429 %v (Retry-After %q), want limit_reason memory", limit, doc, resp.Header.Get("Retry-After"))
		}
	}
}
