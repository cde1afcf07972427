package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestProxyFallbackSurvivesKill9 sends a request through POST /proxy to an
// overloaded destination, so it falls back to the queue, kills aquiferd with
// SIGKILL while the job waits, and checks that after a restart the job
// reaches the destination and its webhook arrives.
func TestProxyFallbackSurvivesKill9(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	var served atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			w.Header().Set("Retry-After", "30") // the queued job waits well past the kill
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		served.Add(1)
		fmt.Fprint(w, "finally")
	}))
	defer target.Close()
	var mu sync.Mutex
	hooks := map[string]string{}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			JobID  string `json:"job_id"`
			Status string `json:"status"`
		}
		_ = json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		hooks[p.JobID] = p.Status
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	env := storeEnv(t, "sqlite")
	d := startDaemon(t, env)
	body := fmt.Sprintf(`{"user_id":"u","idempotent_key":"edge-1","url":%q,"method":"POST","webhook_url":%q}`,
		target.URL+"/x", receiver.URL+"/hook")
	resp, err := http.Post(d.url+"/proxy", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	event, _ := br.ReadString('\n')
	data, _ := br.ReadString('\n')
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || event != "event: proxy_fallback\n" || !strings.Contains(data, `"reason":"upstream_overloaded"`) {
		t.Fatalf("want a fallback stream: %d %q %q", resp.StatusCode, event, data)
	}
	var fb struct {
		JobID string `json:"job_id"`
	}
	_ = json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(data), "data: ")), &fb)

	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	healthy.Store(true)
	d = startDaemon(t, env)

	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		status := hooks[fb.JobID]
		mu.Unlock()
		if status == "completed" && served.Load() >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after restart: destination served %d, webhook %q for job %s", served.Load(), status, fb.JobID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Direct again once drained: the answer is relayed as is.
	resp, err = http.Post(d.url+"/proxy", "application/json",
		strings.NewReader(fmt.Sprintf(`{"user_id":"u","idempotent_key":"edge-2","url":%q}`, target.URL+"/x")))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "finally" {
		t.Fatalf("direct answer after the backlog drained: %d %q", resp.StatusCode, b)
	}
}

// TestDrainModeFlushesThroughTheDaemon wires drain mode end to end: the
// ledger of a finished burst reaches the drain webhook and /health reports
// the instance unassigned.
func TestDrainModeFlushesThroughTheDaemon(t *testing.T) {
	t.Parallel()
	target := newRecorder(t, func(*http.Request, []byte) string { return "x" })
	var mu sync.Mutex
	var ledger []map[string]any
	drain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/drain" {
			http.NotFound(w, r)
			return
		}
		var p struct {
			Event  string           `json:"event"`
			Ledger []map[string]any `json:"ledger"`
		}
		_ = json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		ledger = append(ledger, p.Ledger...)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer drain.Close()
	env := append(storeEnv(t, "sqlite"), "AQUIFER_DRAIN_ENABLED=true", "AQUIFER_DRAIN_TIMER_SECONDS=1",
		"AQUIFER_DRAIN_WEBHOOK_URL="+drain.URL+"/drain")
	d := startDaemon(t, env)
	ids := submitJobs(t, d.url, 3, 1, func(i int) string {
		return fmt.Sprintf(`{"user_id":"u","idempotent_key":"dr%d","url":%q}`, i, target.URL+"/x")
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		h := getJSON(t, d.url+"/health")
		dr, _ := h["drain"].(map[string]any)
		if dr["state"] == "unassigned" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("drain never finished: %v", dr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ledger) != 3 {
		t.Fatalf("ledger %v, want the 3 jobs", ledger)
	}
	for _, id := range ids {
		resp, err := http.Get(d.url + "/jobs/" + id)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("job %s after the flush: %d, want 404", id, resp.StatusCode)
		}
	}
}
