package main

import (
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/l8"
)

// TestFloorServerDoesTheWholeJob holds the floor server to the work its
// numbers stand for: every accepted job reaches the target, its result and
// delivery are in the database, its webhook carries a v1a signature that
// verifies with the server's key, a repeated key is answered with the first
// job and not sent again, and a request without a destination is refused.
// Everything is on loopback.
func TestFloorServerDoesTheWholeJob(t *testing.T) {
	dir := t.TempDir()
	s, err := newFloorServer(dir, "full")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.handler())
	defer srv.Close()

	var dispatched atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dispatched.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer target.Close()
	var (
		mu       sync.Mutex
		verified = map[string]int{}
		bad      []string
	)
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, verr := l8.VerifyStandard(s.id.PublicKey(), r.Header, body, time.Now(), 5*time.Minute)
		mu.Lock()
		defer mu.Unlock()
		if verr != nil || !strings.Contains(string(body), `"response_status":200`) {
			bad = append(bad, string(body)+": "+errString(verr))
		} else {
			verified[jobIDOf(body)]++
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hooks.Close()

	const jobs = 40
	body := bodyMaker(options{bodyBytes: 16}, "floor", target.URL+"/t", hooks.URL+"/hook")
	conn := newLeanConn(srv.URL)
	defer conn.close()
	ids := map[string]bool{}
	for i := range jobs {
		status, resp, err := conn.post("/jobs", body(i))
		if err != nil || status != http.StatusCreated {
			t.Fatalf("job %d: %d %s %v", i, status, resp, err)
		}
		ids[jobIDOf(resp)] = true
	}
	if len(ids) != jobs {
		t.Fatalf("%d distinct job ids for %d jobs", len(ids), jobs)
	}
	status, resp, err := conn.post("/jobs", body(7))
	if err != nil || status != http.StatusOK || !strings.Contains(string(resp), `"duplicate":true`) || !ids[jobIDOf(resp)] {
		t.Fatalf("repeated key: %d %s %v; want 200, duplicate, an existing id", status, resp, err)
	}
	status, resp, err = conn.post("/jobs", []byte(`{"user_id":"u","idempotent_key":"k"}`))
	if err != nil || status != http.StatusBadRequest || !strings.Contains(string(resp), `"error"`) {
		t.Fatalf("no url: %d %s %v; want 400 with an error", status, resp, err)
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(verified)
		mu.Unlock()
		if n == jobs || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("webhooks that did not verify: %q", bad)
	}
	if n := dispatched.Load(); n != jobs {
		t.Errorf("the target saw %d requests; want %d (a repeated key is not sent again)", n, jobs)
	}
	for id := range ids {
		if verified[id] != 1 {
			t.Errorf("job %s: %d verified webhooks; want 1", id, verified[id])
		}
	}

	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "floor.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, done int
	if err := db.QueryRow(`SELECT count(*), count(*) FILTER (WHERE status = 'succeeded' AND response_status = 200
		AND CAST(response_body AS TEXT) = '{"ok":true}' AND delivered_at > 0) FROM jobs`).Scan(&rows, &done); err != nil {
		t.Fatal(err)
	}
	if rows != jobs || done != jobs {
		t.Errorf("%d rows, %d with their result and delivery; want %d and %d", rows, done, jobs, jobs)
	}
}

// TestFloorServerThatHoldsNeverSends: the ingest floor accepts and stores
// jobs and sends nothing.
func TestFloorServerThatHoldsNeverSends(t *testing.T) {
	dir := t.TempDir()
	s, err := newFloorServer(dir, "normal")
	if err != nil {
		t.Fatal(err)
	}
	s.hold = true
	srv := httptest.NewServer(s.handler())
	defer srv.Close()
	var hits atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer dest.Close()
	body := bodyMaker(options{}, "hold", dest.URL+"/t", dest.URL+"/hook")
	conn := newLeanConn(srv.URL)
	defer conn.close()
	for i := range 20 {
		if status, resp, err := conn.post("/jobs", body(i)); err != nil || status != http.StatusCreated {
			t.Fatalf("job %d: %d %s %v", i, status, resp, err)
		}
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "floor.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var queued int
	if err := db.QueryRow(`SELECT count(*) FROM jobs WHERE status = 'queued'`).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if queued != 20 || hits.Load() != 0 {
		t.Errorf("%d jobs queued, %d requests sent; want 20 and none", queued, hits.Load())
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// TestCompareFloor checks the floor's comparisons and that a target the
// floor itself misses is named.
func TestCompareFloor(t *testing.T) {
	rows := []result{
		{scenario: "ceiling", kind: "ceiling", accepted: 1000, ingest: 40000, cost: cost{cpu: 25 * time.Microsecond}},
		{scenario: "ingest", kind: "ingest", accepted: 1000, ingest: 10000, cost: cost{cpu: 100 * time.Microsecond}},
		{scenario: "e2e", kind: "e2e", accepted: 1000, e2e: 5000, cost: cost{cpu: 300 * time.Microsecond}},
		{scenario: "floor", kind: "floor", accepted: 1000, e2e: 7000, cost: cost{cpu: 175 * time.Microsecond}},
		{scenario: "floor ingest", kind: "floor-ingest", accepted: 1000, ingest: 16000, cost: cost{cpu: 80 * time.Microsecond}},
	}
	fr := compareFloor(rows)
	want := map[string]float64{
		"floor|CPU per e2e job ÷ ceiling CPU per request":             7,
		"floor|e2e jobs/s ÷ ceiling requests/s":                       0.175,
		"e2e|CPU per e2e job ÷ the floor's":                           300.0 / 175,
		"e2e|e2e jobs/s ÷ the floor's":                                5000.0 / 7000,
		"floor ingest|CPU per ingested job ÷ ceiling CPU per request": 3.2,
		"floor ingest|ingest jobs/s ÷ ceiling requests/s":             0.4,
		"ingest|CPU per ingested job ÷ the floor's":                   1.25,
		"ingest|ingest jobs/s ÷ the floor's":                          0.625,
	}
	if len(fr.lines) != len(want) {
		t.Fatalf("%d lines: %+v; want %d", len(fr.lines), fr.lines, len(want))
	}
	for _, l := range fr.lines {
		w, ok := want[l.row+"|"+l.what]
		if !ok || l.value < w-1e-9 || l.value > w+1e-9 {
			t.Errorf("%s %q = %v; want %v (known: %v)", l.row, l.what, l.value, w, ok)
		}
	}
	wantVerdicts := []string{"CPU per e2e job is 7.00×", "e2e rate is 0.17×", "ingest rate is 0.40×"}
	if len(fr.verdicts) != len(wantVerdicts) {
		t.Fatalf("verdicts %q; want %d", fr.verdicts, len(wantVerdicts))
	}
	for i, v := range wantVerdicts {
		if !strings.Contains(fr.verdicts[i], v) {
			t.Errorf("verdict %q; want it to say %q", fr.verdicts[i], v)
		}
	}

	rows[3].cost.cpu, rows[3].e2e = 140*time.Microsecond, 9000 // floors within the targets
	rows[4].ingest = 20000
	if fr := compareFloor(rows); len(fr.verdicts) != 0 {
		t.Errorf("verdicts %q for floors within the targets", fr.verdicts)
	}
	if fr := compareFloor(rows[:3]); len(fr.lines) != 0 {
		t.Errorf("lines %+v without a floor row", fr.lines)
	}
	var out strings.Builder
	printFloor(&out, compareFloor(rows[:3]))
	if out.Len() != 0 {
		t.Errorf("printed %q without a floor row", out.String())
	}
	printFloor(&out, compareFloor(rows))
	if !strings.Contains(out.String(), "ingest jobs/s ÷ the floor's") {
		t.Errorf("printed floor lacks the ingest comparison:\n%s", out.String())
	}
}
