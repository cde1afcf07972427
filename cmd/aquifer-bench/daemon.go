package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// daemon is an aquiferd process started for one scenario.
type daemon struct {
	url    string
	cmd    *exec.Cmd
	dir    string
	keep   bool
	logs   *logBuffer
	schema string // Postgres schema to drop when done
	dsn    string
}

type upstreamRate struct {
	host          string
	rps           float64
	maxConcurrent int
}

// startDaemon starts a fresh aquiferd with its own data directory and a
// config file giving the listed upstreams their rates.
func startDaemon(ctx context.Context, o options, rates []upstreamRate) (*daemon, error) {
	return startDaemonWith(ctx, o, rates, "", nil)
}

// startDaemonWith is startDaemon with a given Postgres schema ("" = a fresh
// one, dropped at stop; a given one is left for the caller to drop) and
// extra environment.
func startDaemonWith(ctx context.Context, o options, rates []upstreamRate, pgSchema string, extraEnv []string) (*daemon, error) {
	if o.addr != "" {
		return &daemon{url: strings.TrimRight(o.addr, "/")}, nil
	}
	dir, err := os.MkdirTemp("", "aquifer-bench-")
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "aquifer.yml")
	if err := os.WriteFile(cfgPath, []byte(upstreamsYAML(o, rates)), 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	bin, err := filepath.Abs(o.aquiferd) // the daemon runs in its own directory
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin)
	dieWithBench(cmd)
	cmd.Dir = dir
	var schema string
	storeEnv := []string{"AQUIFER_DATA_DIR=" + filepath.Join(dir, "data")}
	switch o.store {
	case "postgres":
		use := pgSchema
		if use == "" {
			schema = "aqbench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
			use = schema
		}
		storeEnv = append(storeEnv, "AQUIFER_POSTGRES_DSN="+o.pgDSN, "AQUIFER_POSTGRES_SCHEMA="+use)
	}
	storeEnv = append(storeEnv, extraEnv...)
	cmd.Env = append(append(os.Environ(), storeEnv...),
		"PORT="+strconv.Itoa(port),
		"AQUIFER_HOST=127.0.0.1",
		"CONFIG_PATH="+cfgPath,
		"AQUIFER_SQLITE_SYNC="+o.sync,
		"AQUIFER_STORE_BACKEND="+o.store,
		"AQUIFER_LOG_LEVEL="+envOr("AQUIFER_LOG_LEVEL", "warn"),
		"AQUIFER_DB_MAX_BYTES=0",
		"AQUIFER_METRICS=on", // allocations and GC cycles per job (metrics.go)
	)
	logs := &logBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.aquiferd, err)
	}
	d := &daemon{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, dir: dir, keep: o.keep, logs: logs,
		schema: schema, dsn: o.pgDSN}
	if err := d.waitHealthy(ctx, 15*time.Second); err != nil {
		d.stop()
		return nil, fmt.Errorf("%w\n%s", err, logs.String())
	}
	return d, nil
}

// upstreamsYAML is the daemon's config: the upstreams section giving each
// listed host its rate, plus the knobs o sets for it (issue 20's scenarios).
func upstreamsYAML(o options, rates []upstreamRate) string {
	var cfg strings.Builder
	cfg.WriteString("upstreams:\n")
	for _, r := range rates {
		fmt.Fprintf(&cfg, "  %q:\n    rps: %g\n    max_concurrent: %d\n", r.host, r.rps, r.maxConcurrent)
		for _, k := range o.knobs[r.host] {
			fmt.Fprintf(&cfg, "    %s\n", k)
		}
	}
	return cfg.String()
}

func (d *daemon) waitHealthy(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/health", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("aquiferd did not become healthy within %s", limit)
}

// peakRSS returns the daemon's peak resident set size in bytes (VmHWM), or
// -1 when it cannot be read.
func (d *daemon) peakRSS() int64 { return d.procStatus("VmHWM:") }

func (d *daemon) stop() {
	if d.cmd != nil && d.cmd.Process != nil {
		_ = d.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = d.cmd.Process.Kill()
			<-done
		}
	}
	if os.Getenv("AQUIFER_BENCH_DAEMON_LOGS") != "" && d.logs != nil {
		fmt.Fprintf(os.Stderr, "--- aquiferd logs ---\n%s", d.logs.String())
	}
	if d.dir != "" && !d.keep {
		os.RemoveAll(d.dir)
	}
	if d.schema != "" && !d.keep {
		dropSchema(d.dsn, d.schema)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// cpuTime returns the daemon's user+system CPU time so far, or 0.
func (d *daemon) cpuTime() time.Duration {
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which is in parentheses).
	s := string(raw)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
}

// dropSchema removes a Postgres schema the bench created.
func dropSchema(dsn, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		fmt.Fprintf(os.Stderr, "aquifer-bench: dropping schema %s: %v\n", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		fmt.Fprintf(os.Stderr, "aquifer-bench: dropping schema %s: %v\n", schema, err)
	}
}

// pause stops the daemon's process (SIGSTOP) until resume, so that its
// background work stays off the machine while another daemon is measured.
// It reports whether the process was stopped; it waits (up to a second)
// until the kernel says so.
func (d *daemon) pause() bool {
	if d.cmd == nil || d.cmd.Process == nil || d.cmd.Process.Signal(syscall.SIGSTOP) != nil {
		return false
	}
	for deadline := time.Now().Add(time.Second); d.state() != 'T' && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return true
}

// resume lets a paused daemon run again.
func (d *daemon) resume() { _ = d.cmd.Process.Signal(syscall.SIGCONT) }

// state is the daemon process's state letter in /proc (R, S, T, ...), 0
// when it cannot be read.
func (d *daemon) state() byte { return procState(d.cmd.Process.Pid) }

// procState is process pid's state letter in /proc, 0 when it cannot be
// read (the process is gone, or there is no /proc).
func procState(pid int) byte {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(raw)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2]
	}
	return 0
}

// logBuffer holds a daemon's output; os/exec writes it from its own
// goroutine while the bench may read it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lastLogs returns the daemon's last n lines of output joined by " | ", or
// "none" when it wrote nothing (or the bench did not start it).
func (d *daemon) lastLogs(n int) string {
	if d.logs == nil {
		return "none"
	}
	lines := strings.Split(strings.TrimSpace(d.logs.String()), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return "none"
	}
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}
