package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMetricsAddUp runs a small mixed job set through the daemon and checks
// that /metrics accounts for every submission, attempt, terminal status and
// webhook exactly: 10 jobs answered 200 (5 with a webhook), 3 answered 404
// (completed: only 5xx and transport errors are retried), 2 answered 503
// until their five attempts are spent (one with a webhook), and one
// duplicate submission. The retry backoff (1+2+4+8 s) makes it take ~15 s.
func TestMetricsAddUp(t *testing.T) {
	t.Parallel()
	const nOK, nMissing, nBroken, hooksOK, hooksBroken = 10, 3, 2, 5, 1
	const attemptsPerBroken = 5 // app.RetryPolicy's default
	var mu sync.Mutex
	hits := map[string]int{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		switch r.URL.Path {
		case "/ok":
			fmt.Fprint(w, `{"ok":true}`)
		case "/missing":
			http.NotFound(w, r)
		default:
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(target.Close)
	hooks := newWebhookRecorder(t)
	cfg := paceConfig(t, pace{target.URL, 200, 8}, pace{hooks.URL, 200, 8})
	d := startDaemon(t, append([]string{"CONFIG_PATH=" + cfg}, storeEnv(t, "sqlite")...))

	body := func(i int) string {
		path, hook := "/ok", i < hooksOK
		switch {
		case i >= nOK+nMissing:
			path, hook = "/broken", i < nOK+nMissing+hooksBroken
		case i >= nOK:
			path, hook = "/missing", false
		}
		webhook := ""
		if hook {
			webhook = fmt.Sprintf(`,"webhook_url":%q`, hooks.URL+"/hook")
		}
		return fmt.Sprintf(`{"user_id":"metrics","idempotent_key":"m%d","url":%q%s}`, i, target.URL+path, webhook)
	}
	total := nOK + nMissing + nBroken
	ids := submitJobs(t, d.url, total, 4, body)
	for i, id := range ids {
		if id == "" {
			t.Fatalf("job %d not accepted", i)
		}
	}
	resp, err := http.Post(d.url+"/jobs", "application/json", strings.NewReader(body(0)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resubmission answered %d, want 200 (duplicate)", resp.StatusCode)
	}
	waitTerminal(t, d.url, ids, 60*time.Second)

	up, hookUp := target.URL, hooks.URL // lane keys: scheme://host:port
	wantAttempts := nOK + nMissing + nBroken*attemptsPerBroken
	want := []check{
		{"aquifer_jobs_accepted_total", labels{"upstream": up}, total},
		{"aquifer_jobs_accepted_total", nil, total},
		{"aquifer_jobs_duplicate_total", labels{"upstream": up}, 1},
		{"aquifer_jobs_rejected_total", nil, 0},
		{"aquifer_jobs_finished_total", labels{"upstream": up, "status": "completed"}, nOK + nMissing},
		{"aquifer_jobs_finished_total", labels{"upstream": up, "status": "failed"}, nBroken},
		{"aquifer_jobs_finished_total", nil, total},
		{"aquifer_dispatch_attempts_total", labels{"upstream": up, "outcome": "completed", "code_class": "2xx"}, nOK},
		{"aquifer_dispatch_attempts_total", labels{"upstream": up, "outcome": "completed", "code_class": "4xx"}, nMissing},
		{"aquifer_dispatch_attempts_total", labels{"upstream": up, "outcome": "retry", "code_class": "5xx"}, nBroken * (attemptsPerBroken - 1)},
		{"aquifer_dispatch_attempts_total", labels{"upstream": up, "outcome": "failed", "code_class": "5xx"}, nBroken},
		{"aquifer_dispatch_attempts_total", nil, wantAttempts},
		{"aquifer_dispatch_duration_seconds_count", labels{"upstream": up}, wantAttempts},
		{"aquifer_dispatch_duration_seconds_bucket", labels{"upstream": up, "le": "+Inf"}, wantAttempts},
		{"aquifer_webhooks_total", labels{"upstream": hookUp, "result": "delivered"}, hooksOK + hooksBroken},
		{"aquifer_webhooks_total", labels{"upstream": hookUp, "result": "failed"}, 0},
		{"aquifer_jobs", labels{"state": "queued"}, 0},
		{"aquifer_jobs", labels{"state": "webhooks_pending"}, 0},
		{"aquifer_store_up", nil, 1},
		{"aquifer_admission_rejecting", nil, 0},
	}
	// The counters follow the store by a moment (a job is durable, and
	// visible, just before it is counted): poll until they settle.
	var exp exposition
	var bad []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		exp = scrapeMetrics(t, d.url)
		if bad = exp.mismatches(want); len(bad) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(bad) > 0 {
		t.Fatalf("/metrics does not add up:\n  %s", strings.Join(bad, "\n  "))
	}
	mu.Lock()
	targetHits := hits["/ok"] + hits["/missing"] + hits["/broken"]
	mu.Unlock()
	if targetHits != wantAttempts {
		t.Errorf("the target saw %d requests, the attempt counter says %d", targetHits, wantAttempts)
	}
	if n := len(exp.find("aquifer_lane_rate_rps", labels{"upstream": up})); n != 1 {
		t.Errorf("%d aquifer_lane_rate_rps series for the target, want 1", n)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if len(exp.find(name, nil)) == 0 {
			t.Errorf("runtime metric %s missing", name)
		}
	}
	t.Logf("accepted %d, duplicates 1, attempts %d, finished %d completed + %d failed, webhooks delivered %d",
		total, wantAttempts, nOK+nMissing, nBroken, hooksOK+hooksBroken)
}

// TestMetricsEndpointFollowsSetting: AQUIFER_METRICS=off leaves /metrics to
// the router's JSON 404; with only a non-REST adapter running, /metrics is
// still served next to /health.
func TestMetricsEndpointFollowsSetting(t *testing.T) {
	t.Parallel()
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, append([]string{"AQUIFER_METRICS=off"}, storeEnv(t, "sqlite")...))
		resp, err := http.Get(d.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error string `json:"error"`
		}
		if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
			json.Unmarshal(b, &e) != nil || e.Error == "" {
			t.Fatalf("GET /metrics with metrics off = %d %q %s; want a JSON 404", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	})
	t.Run("mcp-http only", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, append([]string{"AQUIFER_ADAPTER=mcp-http"}, storeEnv(t, "sqlite")...))
		exp := scrapeMetrics(t, d.url)
		if v := exp.sum("aquifer_store_up", nil); v != 1 {
			t.Errorf("aquifer_store_up = %v, want 1", v)
		}
	})
}

// waitTerminal waits until every job is completed or failed and has no
// webhook delivery pending.
func waitTerminal(t *testing.T, base string, ids []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, id := range ids {
		for {
			resp, err := http.Get(base + "/jobs/" + id)
			if err != nil {
				t.Fatal(err)
			}
			var j struct {
				Status  string `json:"status"`
				Webhook *struct {
					Status string `json:"status"`
				} `json:"webhook"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&j)
			resp.Body.Close()
			done := j.Status == "completed" || j.Status == "failed"
			if done && (j.Webhook == nil || j.Webhook.Status != "pending") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s still %q (webhook %+v)", id, j.Status, j.Webhook)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// labels selects samples: every given label must match; others are free.
type labels map[string]string

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// exposition is a parsed Prometheus text exposition.
type exposition []sample

type check struct {
	name   string
	labels labels
	want   int
}

func scrapeMetrics(t *testing.T, base string) exposition {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics = %d %q: %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	exp, err := parseExposition(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return exp
}

// parseExposition reads the text format: `name{k="v",…} value` lines and
// comments. Label values here never contain `",` or escapes.
func parseExposition(text string) (exposition, error) {
	var out exposition
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("bad line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("bad value in %q: %w", line, err)
		}
		s := sample{name: line[:i], labels: map[string]string{}, value: v}
		if name, rest, ok := strings.Cut(s.name, "{"); ok {
			s.name = name
			for pair := range strings.SplitSeq(strings.TrimSuffix(rest, "}"), `",`) {
				k, val, _ := strings.Cut(pair, `="`)
				s.labels[k] = strings.TrimSuffix(val, `"`)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

func (e exposition) find(name string, sel labels) []sample {
	var out []sample
	for _, s := range e {
		if s.name != name {
			continue
		}
		match := true
		for k, v := range sel {
			match = match && s.labels[k] == v
		}
		if match {
			out = append(out, s)
		}
	}
	return out
}

func (e exposition) sum(name string, sel labels) float64 {
	var v float64
	for _, s := range e.find(name, sel) {
		v += s.value
	}
	return v
}

func (e exposition) mismatches(checks []check) []string {
	var bad []string
	for _, c := range checks {
		if got := e.sum(c.name, c.labels); got != float64(c.want) {
			bad = append(bad, fmt.Sprintf("sum of %s%v = %v, want %d", c.name, map[string]string(c.labels), got, c.want))
		}
	}
	return bad
}
