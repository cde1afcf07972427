package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPostgresConnectionsKilledUnderLoad runs aquiferd on Postgres with a
// few hundred jobs for a loopback target and, while they run, terminates
// every connection of this daemon (found by its application_name) several
// times with pg_terminate_backend, as a Postgres restart does. Every job
// must complete and have its webhook delivered, none may be left queued,
// in_flight or with a delivery pending, and all of it well within the
// five minutes after which the stale sweep would have found a job whose
// result write was lost: a failed result write is retried at once, not left
// to the sweep. Some jobs take over a second, so their in-flight mark is in
// the store when their result is written.
func TestPostgresConnectionsKilledUnderLoad(t *testing.T) {
	t.Parallel()
	const n = 400
	var slow atomic.Int64
	var mu sync.Mutex
	hits := map[string]int{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Job-Key")
		mu.Lock()
		hits[key]++
		mu.Unlock()
		if strings.HasSuffix(key, "7") { // one in ten: long enough to be marked in_flight in the store
			slow.Add(1)
			time.Sleep(1200 * time.Millisecond)
		}
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer target.Close()
	hooks := newWebhookRecorder(t)
	cfg := paceConfig(t, pace{target.URL, 200, 32}, pace{hooks.URL, 2000, 32})
	schema := postgresSchema(t)
	app := "aqkill_" + schema
	dsn, err := url.Parse(testDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	q := dsn.Query()
	q.Set("application_name", app)
	dsn.RawQuery = q.Encode()
	d := startDaemon(t, []string{"CONFIG_PATH=" + cfg, "AQUIFER_DATA_DIR=" + filepath.Join(t.TempDir(), "data"),
		"AQUIFER_STORE_BACKEND=postgres", "AQUIFER_POSTGRES_DSN=" + dsn.String(), "AQUIFER_POSTGRES_SCHEMA=" + schema,
		"AQUIFER_INSTANCE_ID=kill-" + schema})

	admin, err := pgx.Connect(t.Context(), testDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	terminate := func() int {
		var killed int
		err := admin.QueryRow(t.Context(),
			"SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) k", app).Scan(&killed)
		if err != nil {
			t.Errorf("pg_terminate_backend: %v", err)
		}
		return killed
	}

	start := time.Now()
	// Kill the daemon's connections every 300 ms, eight times, from when the
	// first jobs reach the target.
	var killed atomic.Int64
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		for {
			mu.Lock()
			got := len(hits)
			mu.Unlock()
			if got >= 20 {
				break
			}
			if time.Since(start) > 30*time.Second {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		for range 8 {
			killed.Add(int64(terminate()))
			time.Sleep(300 * time.Millisecond)
		}
	}()

	// Submit, retrying a 503 (the store was down) with the same key: an
	// idempotent retry, never a second job.
	ids := make([]string, n)
	var wg sync.WaitGroup
	next := make(chan int)
	client := &http.Client{Timeout: 30 * time.Second}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				body := fmt.Sprintf(`{"user_id":"kill","idempotent_key":"k%d","url":%q,"method":"POST","headers":{"X-Job-Key":"k%d"},"webhook_url":%q}`,
					i, target.URL+"/work", i, hooks.URL+"/hook")
				for try := 0; ids[i] == "" && try < 100; try++ {
					resp, err := client.Post(d.url+"/jobs", "application/json", strings.NewReader(body))
					if err != nil {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					var out struct {
						JobID string `json:"job_id"`
					}
					_ = json.NewDecoder(resp.Body).Decode(&out)
					resp.Body.Close()
					if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK {
						ids[i] = out.JobID
					} else {
						time.Sleep(50 * time.Millisecond)
					}
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, id := range ids {
		if id == "" {
			t.Fatalf("job k%d was never accepted", i)
		}
	}
	<-killerDone
	if killed.Load() == 0 {
		t.Fatal("no connection of the daemon was terminated: the test proves nothing")
	}

	// Everything must be done well before the five-minute stale sweep.
	const bound = 30 * time.Second
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	var unfinished int
	for {
		lostHooks := hooks.missing(ids)
		mu.Lock()
		lostTarget := 0
		for _, k := range keys {
			if hits[k] == 0 {
				lostTarget++
			}
		}
		mu.Unlock()
		err := admin.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{schema, "jobs"}.Sanitize()+
			" WHERE status IN ('queued', 'in_flight') OR delivery_status = 'pending'").Scan(&unfinished)
		if err == nil && lostTarget == 0 && len(lostHooks) == 0 && unfinished == 0 {
			break
		}
		if time.Since(start) > bound {
			t.Fatalf("after %v: %d jobs never reached the target, %d webhooks missing (e.g. %v), %d jobs unfinished in the store (%v)",
				bound, lostTarget, len(lostHooks), head(lostHooks), unfinished, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	dups := 0
	for _, c := range hits {
		if c > 1 {
			dups++
		}
	}
	mu.Unlock()
	t.Logf("%d connections terminated; all %d jobs done in %v (%d slow, %d dispatched more than once — at-least-once)",
		killed.Load(), n, time.Since(start).Round(time.Millisecond), slow.Load(), dups)
}

// TestSQLiteDiskFullHealthAndRecovery runs aquiferd with its database on a
// 4 MiB tmpfs and fills it: submissions get 503, /health turns degraded
// (HTTP 503) with store.writable false and SQLite's reason, while jobs
// accepted before still read. Once the space is freed the same process
// takes jobs again and /health is ok. Mounting needs root (CI runs as
// root); elsewhere the test is skipped, saying why.
func TestSQLiteDiskFullHealthAndRecovery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill up (needs root): %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	target := newRecorder(t, func(r *http.Request, _ []byte) string { return r.Header.Get("X-Job-Key") })
	// A slow destination: most jobs stay queued while the disk fills.
	cfgPath := filepath.Join(t.TempDir(), "aquifer.yml")
	yml := fmt.Sprintf("upstreams:\n  %q:\n    rps: 0.5\n    max_concurrent: 1\n", strings.TrimPrefix(target.URL, "http://"))
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, []string{"CONFIG_PATH=" + cfgPath, "AQUIFER_DATA_DIR=" + filepath.Join(dir, "data")})
	client := &http.Client{Timeout: 30 * time.Second}
	submit := func(key string, bodyBytes int) (int, string) {
		body := fmt.Sprintf(`{"user_id":"full","idempotent_key":%q,"url":%q,"method":"POST","headers":{"X-Job-Key":%q},"body":%q}`,
			key, target.URL+"/work", key, strings.Repeat("x", bodyBytes))
		resp, err := client.Post(d.url+"/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("POST /jobs: %v", err)
		}
		defer resp.Body.Close()
		var out struct {
			JobID string `json:"job_id"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out.JobID
	}
	type storeHealth struct {
		Status string `json:"status"`
		Store  struct {
			OK       bool   `json:"ok"`
			Writable bool   `json:"writable"`
			Error    string `json:"error"`
		} `json:"store"`
	}
	health := func() (int, storeHealth) {
		resp, err := client.Get(d.url + "/health")
		if err != nil {
			t.Fatalf("/health: %v", err)
		}
		defer resp.Body.Close()
		var h storeHealth
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			t.Fatalf("/health body: %v", err)
		}
		return resp.StatusCode, h
	}

	var accepted []string
	for i := range 5 {
		code, id := submit(fmt.Sprintf("before%d", i), 100)
		if code != http.StatusCreated {
			t.Fatalf("submission before the disk filled: %d", code)
		}
		accepted = append(accepted, id)
	}
	if code, h := health(); code != http.StatusOK || h.Status != "ok" || !h.Store.Writable {
		t.Fatalf("/health before the disk filled: %d %+v", code, h)
	}

	// Fill the disk.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for n := len(chunk); n > 0; {
		if _, err := f.Write(chunk[:n]); err != nil {
			n /= 2
		}
	}
	f.Close()
	refused := false
	for i := 0; i < 100 && !refused; i++ {
		code, id := submit(fmt.Sprintf("full%d", i), 60<<10)
		switch code {
		case http.StatusCreated:
			accepted = append(accepted, id)
		case http.StatusServiceUnavailable:
			refused = true
		default:
			t.Fatalf("submission on a full disk: %d", code)
		}
	}
	if !refused {
		t.Fatal("no submission was refused on the full disk")
	}
	code, h := health()
	if code != http.StatusServiceUnavailable || h.Status != "degraded" || !h.Store.OK || h.Store.Writable ||
		!strings.Contains(h.Store.Error, "writes failing since") || !strings.Contains(h.Store.Error, "full") {
		t.Fatalf("/health on a full disk: %d %+v; want 503, degraded, store answering but not writable, and why", code, h)
	}
	resp, err := client.Get(d.url + "/jobs/" + accepted[0])
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET of an accepted job on a full disk: %v %v", resp, err)
	}
	resp.Body.Close()

	// Free the space: the same process takes jobs again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, _ := submit("after", 100); code != http.StatusCreated {
		t.Fatalf("submission after the space was freed: %d", code)
	}
	if code, h := health(); code != http.StatusOK || h.Status != "ok" || !h.Store.Writable || h.Store.Error != "" {
		t.Fatalf("/health after the space was freed: %d %+v", code, h)
	}
	for _, id := range accepted {
		resp, err := client.Get(d.url + "/jobs/" + id)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("accepted job %s after recovery: %v %v", id, resp, err)
		}
		resp.Body.Close()
	}
}
