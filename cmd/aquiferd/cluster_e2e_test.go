package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestClusterOfThreeOnPostgres runs three aquiferd processes on one Postgres
// schema in front of one destination configured at 50 rps. 1,000 jobs are
// submitted round-robin to all three; mid-run the process dispatching the
// destination is killed with SIGKILL. The destination must never see more
// than the configured rate in aggregate (≤ 52.5 rps), the lane must move to
// another process within 5 s, and every accepted job must be dispatched and
// its webhook delivered.
func TestClusterOfThreeOnPostgres(t *testing.T) {
	t.Parallel()
	const n = 1000
	var mu sync.Mutex
	var arrivals []time.Time
	seen := map[string]int{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Job-Key")
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		seen[key]++
		mu.Unlock()
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer target.Close()
	hooks := newWebhookRecorder(t)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "aquifer.yml")
	yml := fmt.Sprintf("upstreams:\n  %q:\n    rps: 50\n    max_concurrent: 8\n  %q:\n    rps: 1000\n    max_concurrent: 32\n",
		strings.TrimPrefix(target.URL, "http://"), strings.TrimPrefix(hooks.URL, "http://"))
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	schema := postgresSchema(t)
	envFor := func(id string) []string {
		return []string{"CONFIG_PATH=" + cfg, "AQUIFER_DATA_DIR=" + filepath.Join(dir, id),
			"AQUIFER_STORE_BACKEND=postgres", "AQUIFER_POSTGRES_DSN=" + testDatabaseURL(), "AQUIFER_POSTGRES_SCHEMA=" + schema,
			"AQUIFER_INSTANCE_ID=" + id}
	}
	procs := []*proc{startDaemon(t, envFor("i1")), startDaemon(t, envFor("i2")), startDaemon(t, envFor("i3"))}

	body := func(i int) string {
		return fmt.Sprintf(`{"user_id":"c","idempotent_key":"k%d","url":%q,"method":"POST","headers":{"X-Job-Key":"k%d"},"webhook_url":%q}`,
			i, target.URL+"/work", i, hooks.URL+"/hook")
	}
	// Round-robin over the three: each process takes every third job.
	ids := make([]string, n)
	var wg sync.WaitGroup
	for p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int
			for i := p; i < n; i += len(procs) {
				mine = append(mine, i)
			}
			got := submitJobs(t, procs[p].url, len(mine), 4, func(k int) string { return body(mine[k]) })
			for k, id := range got {
				ids[mine[k]] = id
			}
		}()
	}
	wg.Wait()
	for i, id := range ids {
		if id == "" {
			t.Fatalf("job %d was not accepted", i)
		}
	}

	// Find the destination's lane holder once dispatch runs, and kill it.
	lane := target.URL // http://127.0.0.1:port is its upstream key
	deadline := time.Now().Add(20 * time.Second)
	var victim = -1
	for victim < 0 {
		mu.Lock()
		got := len(arrivals)
		mu.Unlock()
		if got >= 250 {
			for i, p := range procs {
				if holds(t, p.url, lane) {
					victim = i
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process holds the destination's lane after %d arrivals", got)
		}
		if victim < 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := procs[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = procs[victim].cmd.Wait()
	killed := time.Now()
	t.Logf("killed %s, the lane holder, after %d arrivals", []string{"i1", "i2", "i3"}[victim], len(arrivals))
	var moved time.Duration
	for moved == 0 {
		for i, p := range procs {
			if i != victim && holds(t, p.url, lane) {
				moved = time.Since(killed)
			}
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatal("the lane did not move to another process within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("lane moved %v after the kill", moved)
	if moved > 5*time.Second {
		t.Errorf("the lane took %v to move; want within 5 s", moved)
	}

	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	deadline = time.Now().Add(90 * time.Second)
	for {
		mu.Lock()
		missing := 0
		for _, k := range keys {
			if seen[k] == 0 {
				missing++
			}
		}
		mu.Unlock()
		lostHooks := hooks.missing(ids)
		if missing == 0 && len(lostHooks) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs never reached the destination, %d webhooks never arrived (e.g. %v)", missing, len(lostHooks), head(lostHooks))
		}
		time.Sleep(50 * time.Millisecond)
	}

	mu.Lock()
	ts := append([]time.Time(nil), arrivals...)
	dups := len(arrivals) - len(seen)
	mu.Unlock()
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	rate := float64(len(ts)-1) / ts[len(ts)-1].Sub(ts[0]).Seconds()
	// The highest rate over any 2-second window, to catch a burst the
	// average would hide (two holders at once, or a new holder catching up).
	peak := 0.0
	for i, j := 0, 0; i < len(ts); i++ {
		for j < len(ts) && ts[j].Sub(ts[i]) < 2*time.Second {
			j++
		}
		if ts[len(ts)-1].Sub(ts[i]) >= 2*time.Second {
			peak = max(peak, float64(j-i)/2)
		}
	}
	t.Logf("aggregate %.1f rps over %d arrivals (%d repeated after the kill), peak 2-s window %.1f rps", rate, len(ts), dups, peak)
	if rate > 52.5 {
		t.Errorf("aggregate rate %.1f rps across three processes; the destination is configured at 50 (≤ 52.5 allowed)", rate)
	}
	if peak > 60 {
		t.Errorf("a 2-second window saw %.1f rps; pacing must stay global through the takeover", peak)
	}
}

// holds reports whether the instance at base lists lane among its own.
func holds(t *testing.T, base, lane string) bool {
	t.Helper()
	resp, err := http.Get(base + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var h struct {
		Cluster *struct {
			Lanes []string `json:"lanes"`
		} `json:"cluster"`
	}
	if json.Unmarshal(b, &h) != nil || h.Cluster == nil {
		return false
	}
	for _, l := range h.Cluster.Lanes {
		if l == lane {
			return true
		}
	}
	return false
}

// TestClusterStreamsFromAnyInstance follows, over SSE on one process, a job
// that another process dispatches (events travel by LISTEN/NOTIFY), and
// registers a pool member through one process for a pool job submitted to
// the other.
func TestClusterStreamsFromAnyInstance(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		fmt.Fprint(w, "from the holder")
	}))
	defer target.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	schema := postgresSchema(t)
	dir := t.TempDir()
	envFor := func(id string) []string {
		return []string{"AQUIFER_DATA_DIR=" + filepath.Join(dir, id), "AQUIFER_STORE_BACKEND=postgres",
			"AQUIFER_POSTGRES_DSN=" + testDatabaseURL(), "AQUIFER_POSTGRES_SCHEMA=" + schema, "AQUIFER_INSTANCE_ID=" + id}
	}
	a := startDaemon(t, envFor("a"))
	b := startDaemon(t, envFor("b"))
	ids := submitJobs(t, a.url, 1, 1, func(int) string {
		return fmt.Sprintf(`{"user_id":"u","idempotent_key":"s1","url":%q}`, target.URL+"/slow")
	})
	resp, err := http.Get(b.url + "/jobs/" + ids[0] + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	close(release)
	body := make(chan string, 1)
	go func() {
		raw, _ := io.ReadAll(resp.Body) // the stream ends with the terminal event
		body <- string(raw)
	}()
	select {
	case s := <-body:
		if !strings.Contains(s, "event: completed") || !strings.Contains(s, "from the holder") {
			t.Fatalf("stream on the other instance: %q", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the other instance's stream never saw the job complete")
	}

	// Pool membership is shared: register through b, submit through a.
	member := newRecorder(t, func(*http.Request, []byte) string { return "m" })
	reg, err := http.Post(b.url+"/pools/shared/members", "application/json", strings.NewReader(
		fmt.Sprintf(`{"member_id":"m1","address":%q,"capacity_rps":20}`, member.URL+"/work")))
	if err != nil {
		t.Fatal(err)
	}
	reg.Body.Close()
	pj := submitJobs(t, a.url, 1, 1, func(int) string { return `{"user_id":"u","idempotent_key":"p1","pool_id":"shared"}` })
	deadline := time.Now().Add(30 * time.Second)
	for member.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pool job %s never reached the member registered through the other instance", pj[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, base := range []string{a.url, b.url} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			h := getJSON(t, base+"/health")
			pools, _ := h["pools"].(map[string]any)
			if _, ok := pools["shared"]; ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s does not list the shared pool: %v", base, pools)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
