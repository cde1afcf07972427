package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBackendAnswersAsItsWorkers(t *testing.T) {
	specs := []workerSpec{{index: 1, behavior: stable, capacity: 5}, {index: 2, behavior: recovering, capacity: 3}}
	be, err := newBackend(specs, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer be.close()
	be.begin(time.Now())
	post := func(path string) (*http.Response, []byte) {
		t.Helper()
		resp, err := http.Post(be.url+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, body := post("/worker/1")
	var got struct {
		Worker   int    `json:"worker"`
		Behavior string `json:"behavior"`
		Second   int    `json:"second"`
	}
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 || got.Worker != 1 || got.Behavior != "stable" || got.Second < 1 {
		t.Fatalf("worker 1: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Aqueduct-Rps") != "" {
		t.Fatalf("a stable worker within capacity advertised %q", resp.Header.Get("X-Aqueduct-Rps"))
	}
	// The recovering worker fails its first 5 seconds and says so.
	resp, _ = post("/worker/2")
	if resp.StatusCode != 500 || resp.Header.Get("X-Aqueduct-Rps") != "1.00" {
		t.Fatalf("worker 2: %d rps=%q", resp.StatusCode, resp.Header.Get("X-Aqueduct-Rps"))
	}
	for _, p := range []string{"/worker/0", "/worker/3", "/worker/x", "/other"} {
		if resp, _ := post(p); resp.StatusCode != 404 {
			t.Fatalf("%s: %d", p, resp.StatusCode)
		}
	}
	s := be.second(time.Now())
	if w1, w2 := be.workers[0].observe(s), be.workers[1].observe(s); w1.requests+w2.requests != 2 || w2.http500 != 1 || w2.failing != 1 {
		t.Fatalf("observed %+v / %+v", w1, w2)
	}
	if tot := be.totals(); tot != (totals{requests: 2, http200: 1, http500: 1, failing: 1}) {
		t.Fatalf("totals %+v", tot)
	}
}

func TestObserveDecaysAndKeepsTheCrashWindow(t *testing.T) {
	sw := &simWorker{spec: workerSpec{index: 1, behavior: stable, capacity: 1}}
	// Second 2: enough requests to crash (window through second 4).
	for range 6 {
		sw.serve(2)
	}
	if sw.state.crashUntil != 4 {
		t.Fatalf("state %+v", sw.state)
	}
	o2 := sw.observe(2)
	if o2.requests != 6 || !o2.inCrash || !o2.crashed {
		t.Fatalf("second 2: %+v", o2)
	}
	// Second 3 had no requests: still in the window, score decayed once.
	if o3 := sw.observe(3); o3.requests != 0 || !o3.inCrash || o3.crashed || !near(o3.overload, o2.overload*0.65) {
		t.Fatalf("second 3: %+v (second 2 %+v)", o3, o2)
	}
	if o5 := sw.observe(5); o5.inCrash {
		t.Fatalf("second 5: %+v", o5)
	}
	if o1 := sw.observe(1); o1 != (workerSecond{}) {
		t.Fatalf("second 1 (before any request): %+v", o1)
	}
}

// TestSmokeSteadyAquifer runs a short steady scenario through an embedded
// Aquifer and expects every job to complete. 30 jobs at the pool's 15 rps
// (3 × 5) need 2 s of dispatch; the run lasts 3 s so the last webhooks have
// time to arrive even under -race.
func TestSmokeSteadyAquifer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 3 seconds")
	}
	csvPath := filepath.Join(t.TempDir(), "run.csv")
	o := options{workers: 3, jobs: 30, duration: 3 * time.Second, rps: 50, mode: modeAquifer, pool: "smoke",
		scenario: "steady", heartbeat: time.Second, seed: 1, csv: csvPath}
	var out strings.Builder
	res, err := runOnce(context.Background(), o, modeAquifer, csvPath, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.completed != 30 || res.failed != 0 || res.remaining != 0 || res.drainedAt == 0 || len(res.problems) > 0 {
		t.Fatalf("result %+v\n%s", res, out.String())
	}
	if res.requests.requests != 30 || res.requests.http200 != 30 {
		t.Fatalf("workers saw %+v\n%s", res.requests, out.String())
	}
	text := out.String()
	for _, want := range []string{"mode=aquifer scenario=steady workers=3 jobs=30 configured_rps=50.0 pool=smoke",
		"workers: [w1=stable/5rps w2=stable/5rps w3=stable/5rps]", " sec completed failed pool  w1",
		"summary completed=30 failed=0 remaining=0", "wrote csv=" + csvPath} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	b, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 1+3*3 {
		t.Fatalf("csv has %d lines:\n%s", len(lines), b)
	}
}
