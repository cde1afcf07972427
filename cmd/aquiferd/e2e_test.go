package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the aquiferd built once for the end-to-end tests.
var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func aquiferdBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "aquiferd-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "aquiferd")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// recorder is a loopback server that records what reaches it: request keys
// for the target, job ids for the webhook receiver.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string]int
}

func newRecorder(t *testing.T, keyOf func(r *http.Request, body []byte) string) *recorder {
	t.Helper()
	rec := &recorder{seen: map[string]int{}}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.seen[keyOf(r, body)]++
		rec.mu.Unlock()
		fmt.Fprint(w, `{"ok":true}`)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *recorder) missing(keys []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, k := range keys {
		if r.seen[k] == 0 {
			out = append(out, k)
		}
	}
	return out
}

type proc struct {
	cmd  *exec.Cmd
	url  string
	logs *bytes.Buffer
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startDaemon starts the binary with env and waits for /health.
func startDaemon(t *testing.T, env []string) *proc {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(aquiferdBinary(t))
	cmd.Dir = t.TempDir() // nothing lands in the source tree, whatever the defaults
	cmd.Env = append(append(os.Environ(), "AQUIFER_HOST=127.0.0.1", fmt.Sprintf("PORT=%d", port), "AQUIFER_LOG_LEVEL=warn"), env...)
	logs := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d", port), logs: logs}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("aquiferd logs:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(p.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("aquiferd did not become healthy: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func submitJobs(t *testing.T, base string, n, workers int, body func(i int) string) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	next := make(chan int)
	client := &http.Client{Timeout: 30 * time.Second}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				resp, err := client.Post(base+"/jobs", "application/json", strings.NewReader(body(i)))
				if err != nil {
					continue // the daemon may be dying; an unanswered job was not accepted
				}
				var out struct {
					JobID string `json:"job_id"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK {
					ids[i] = out.JobID
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return ids
}

// TestKill9MidDrainLosesNothing submits 2,000 jobs against a paced upstream,
// kills aquiferd with SIGKILL while it drains them, restarts it on the same
// database and checks that every accepted job reached the target and every
// webhook arrived (duplicates are allowed: delivery is at-least-once). It runs
// once per store backend.
func TestKill9MidDrainLosesNothing(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "pebble", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			kill9(t, storeEnv(t, backend))
		})
	}
}

// storeEnv returns the environment selecting backend with fresh storage.
func storeEnv(t *testing.T, backend string) []string {
	t.Helper()
	data := "AQUIFER_DATA_DIR=" + filepath.Join(t.TempDir(), "data")
	switch backend {
	case "pebble":
		return []string{data, "AQUIFER_STORE_BACKEND=pebble"}
	case "postgres":
		schema := postgresSchema(t)
		// A stable instance id, as the docs recommend: the restarted process
		// takes back the work its previous life owned at once.
		return []string{data, "AQUIFER_STORE_BACKEND=postgres", "AQUIFER_POSTGRES_DSN=" + testDatabaseURL(),
			"AQUIFER_POSTGRES_SCHEMA=" + schema, "AQUIFER_INSTANCE_ID=e2e-" + schema}
	default:
		return []string{data}
	}
}

func kill9(t *testing.T, storeEnv []string) {
	const n = 2000
	target := newRecorder(t, func(r *http.Request, _ []byte) string { return r.Header.Get("X-Job-Key") })
	hooks := newWebhookRecorder(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "aquifer.yml")
	// 200 rps: the drain takes 10 s, longer than submitting the jobs takes
	// even under the race detector on a loaded machine (the kill must find
	// work left; at 400 rps a slow submission let the drain finish first).
	yml := fmt.Sprintf("upstreams:\n  %q:\n    rps: 200\n    max_concurrent: 8\n  %q:\n    rps: 2000\n    max_concurrent: 32\n",
		strings.TrimPrefix(target.URL, "http://"), strings.TrimPrefix(hooks.URL, "http://"))
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append([]string{"CONFIG_PATH=" + cfg}, storeEnv...)

	d := startDaemon(t, env)
	body := func(i int) string {
		return fmt.Sprintf(`{"user_id":"e2e","idempotent_key":"k%d","url":%q,"method":"POST","headers":{"X-Job-Key":"k%d"},"body":"{}","webhook_url":%q}`,
			i, target.URL+"/work", i, hooks.URL+"/hook")
	}
	ids := submitJobs(t, d.url, n, 16, body)
	accepted := 0
	for _, id := range ids {
		if id != "" {
			accepted++
		}
	}
	if accepted != n {
		t.Fatalf("only %d of %d jobs accepted before the kill", accepted, n)
	}
	// Kill it mid-drain: some jobs done, most still queued.
	deadline := time.Now().Add(30 * time.Second)
	for target.count() < n/4 {
		if time.Now().After(deadline) {
			t.Fatalf("drain did not start: %d hits", target.count())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	hitAtKill := target.count()
	if hitAtKill >= n {
		t.Fatalf("the daemon finished all %d jobs before the kill; the test proves nothing", n)
	}
	t.Logf("killed after %d of %d jobs reached the target", hitAtKill, n)

	startDaemon(t, env)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		lostTarget, lostHooks := target.missing(keys), hooks.missing(ids)
		if len(lostTarget) == 0 && len(lostHooks) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after restart: %d jobs never reached the target (e.g. %v), %d webhooks never arrived (e.g. %v)",
				len(lostTarget), head(lostTarget), len(lostHooks), head(lostHooks))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func head(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}

// TestGracefulShutdownFinishesOrRequeues sends SIGTERM while attempts are
// running: the daemon exits cleanly, and after a restart every job finishes.
func TestGracefulShutdownFinishesOrRequeues(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	done := map[string]bool{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		mu.Lock()
		done[r.Header.Get("X-Job-Key")] = true
		mu.Unlock()
	}))
	t.Cleanup(target.Close)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "aquifer.yml")
	_ = os.WriteFile(cfg, []byte(fmt.Sprintf("upstreams:\n  %q:\n    rps: 100\n    max_concurrent: 4\n", strings.TrimPrefix(target.URL, "http://"))), 0o600)
	env := []string{"AQUIFER_DATA_DIR=" + dir, "CONFIG_PATH=" + cfg, "AQUIFER_SHUTDOWN_TIMEOUT=300ms"}
	d := startDaemon(t, env)
	ids := submitJobs(t, d.url, 20, 4, func(i int) string {
		return fmt.Sprintf(`{"user_id":"g","idempotent_key":"g%d","url":%q,"headers":{"X-Job-Key":"g%d"}}`, i, target.URL, i)
	})
	time.Sleep(100 * time.Millisecond) // let four attempts start and block
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- d.cmd.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("aquiferd exited with %v after SIGTERM\n%s", err, d.logs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("aquiferd did not exit after SIGTERM")
	}
	close(release)
	d2 := startDaemon(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, id := range ids {
		for {
			resp, err := http.Get(d2.url + "/jobs/" + id)
			if err != nil {
				t.Fatal(err)
			}
			var j struct {
				Status string `json:"status"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&j)
			resp.Body.Close()
			if j.Status == "completed" {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("job %s still %q after restart", id, j.Status)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func TestBadConfigStopsWithMessage(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	lookup := func(k string) (string, bool) {
		if k == "AQUIFER_MAX_BODY_BYTES" {
			return "lots", true
		}
		return "", false
	}
	err := Run(context.Background(), nil, lookup, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "AQUIFER_MAX_BODY_BYTES") {
		t.Fatalf("Run with a bad setting = %v, want an error naming AQUIFER_MAX_BODY_BYTES", err)
	}
}

// TestPoolJobsSurviveKill9 queues pool jobs while the pool has no members,
// kills aquiferd, restarts it, registers a member (pool membership is in
// memory, so members rejoin with their next heartbeat) and checks every job
// reaches it — the original could not recover pool jobs on SQLite.
func TestPoolJobsSurviveKill9(t *testing.T) {
	t.Parallel()
	const n = 50
	target := newRecorder(t, func(r *http.Request, body []byte) string { return string(body) })
	env := storeEnv(t, "sqlite")
	d := startDaemon(t, env)
	ids := submitJobs(t, d.url, n, 4, func(i int) string {
		return fmt.Sprintf(`{"user_id":"p","idempotent_key":"pool%d","pool_id":"readers","method":"POST","body":"job-%d"}`, i, i)
	})
	for i, id := range ids {
		if id == "" {
			t.Fatalf("pool job %d not accepted", i)
		}
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()

	d2 := startDaemon(t, env)
	reg := fmt.Sprintf(`{"member_id":"m1","address":%q,"capacity_rps":200}`, target.URL+"/read")
	resp, err := http.Post(d2.url+"/pools/readers/members", "application/json", strings.NewReader(reg))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("register after restart: %v %v", err, resp)
	}
	resp.Body.Close()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("job-%d", i)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(target.missing(keys)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d pool jobs never reached the member after restart", len(target.missing(keys)))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newWebhookRecorder is a webhook receiver that records the job id of
// every delivery.
func newWebhookRecorder(t *testing.T) *recorder {
	t.Helper()
	return newRecorder(t, func(_ *http.Request, body []byte) string {
		var p struct {
			JobID string `json:"job_id"`
		}
		_ = json.Unmarshal(body, &p)
		return p.JobID
	})
}

// pace is one upstreams: entry of a test's CONFIG_PATH file.
type pace struct {
	url           string // a server's base URL; its host:port is the key
	rps           float64
	maxConcurrent int
}

// paceConfig writes a YAML file pacing each server as given and returns
// its path, for CONFIG_PATH.
func paceConfig(t *testing.T, paces ...pace) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("upstreams:\n")
	for _, p := range paces {
		fmt.Fprintf(&b, "  %q:\n    rps: %v\n    max_concurrent: %d\n", strings.TrimPrefix(p.url, "http://"), p.rps, p.maxConcurrent)
	}
	path := filepath.Join(t.TempDir(), "aquifer.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
