package httpapi_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// lanePath is /lanes/{destination} with the destination escaped whole, as
// url.QueryEscape does (':' and '/' both escaped).
func lanePath(dest string) string { return "/lanes/" + url.QueryEscape(dest) }

// requireLane checks a lane view's shape: the fields always present, and
// only known optional ones besides.
func requireLane(t *testing.T, what string, l map[string]any) {
	t.Helper()
	always := []string{"destination", "ceiling", "pace", "backlog", "in_flight", "buffered", "account_queues", "queues",
		"paused", "circuit", "live", "mode"}
	optional := map[string]bool{"held_until": true, "oldest_queued_at": true, "oldest_queued_age_seconds": true,
		"last_error": true, "last_error_at": true, "held_by": true, "mode_reason": true}
	for _, k := range always {
		if _, ok := l[k]; !ok {
			t.Fatalf("%s: lane view lacks %q: %v", what, k, l)
		}
	}
	for k := range l {
		if !optional[k] && !strings.Contains(","+strings.Join(always, ",")+",", ","+k+",") {
			t.Fatalf("%s: lane view has unexpected field %q: %v", what, k, l)
		}
	}
	switch l["mode"] {
	case "static", "signalled", "budget", "adaptive":
	default:
		t.Fatalf("%s: lane mode %v is none of static, signalled, budget, adaptive", what, l["mode"])
	}
	requireKeys(t, what+" ceiling", l["ceiling"].(map[string]any), "rps", "max_concurrent")
	if _, ok := l["circuit"].(map[string]any)["state"]; !ok {
		t.Fatalf("%s: circuit without a state: %v", what, l["circuit"])
	}
}

// laneCall requests a lane endpoint and requires 200 with a lane view.
func (e *env) laneCall(t *testing.T, method, path, body string) map[string]any {
	t.Helper()
	resp, m, b := e.call(t, method, path, "", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	requireLane(t, method+" "+path, m)
	return m
}

func TestLanePauseHoldsDispatchAndResumeReleasesIt(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, false, fixed(200, "text/plain", "ok"))
	dest := "http://" + up.hostPort

	before := time.Now().UnixMilli()
	l := e.laneCall(t, http.MethodPost, lanePath(dest)+"/pause", `{"reason":"incident 42"}`)
	paused, _ := l["paused"].(map[string]any)
	if l["destination"] != dest || paused == nil || paused["reason"] != "incident 42" || paused["since"].(float64) < float64(before) {
		t.Fatalf("pause answered %v, want %s paused for incident 42", l, dest)
	}

	keep1 := e.submit(t, jobFor("u", "keep-1", up.url("/keep/1")))
	keep2 := e.submit(t, jobFor("u", "keep-2", up.url("/keep/2")))
	drop := e.submit(t, jobFor("u", "drop-1", up.url("/drop/1")))
	up.requireNoArrival(t, 300*time.Millisecond)
	_, m, raw := e.getJob(t, keep1)
	if m["status"] != "queued" {
		t.Fatalf("job to a paused lane: %s, want queued", raw)
	}
	if h, ok := m["history"].([]any); !ok || len(h) != 0 {
		t.Fatalf("queued job's history %v, want []", m["history"])
	}

	// The lane shows its pause and its work, in the list and alone; the
	// destination may also be named with only its slashes escaped.
	_, list, b := e.call(t, http.MethodGet, "/lanes", "", "")
	var found map[string]any
	for _, x := range list["lanes"].([]any) {
		if x.(map[string]any)["destination"] == dest {
			found = x.(map[string]any)
		}
	}
	if found == nil || found["paused"] == nil || found["backlog"] != float64(3) {
		t.Fatalf("GET /lanes: %s; want %s paused with a backlog of 3", b, dest)
	}
	requireLane(t, "GET /lanes entry", found)
	for _, path := range []string{lanePath(dest), "/lanes/" + url.PathEscape(dest)} {
		l = e.laneCall(t, http.MethodGet, path, "")
		if l["destination"] != dest || l["paused"] == nil || l["backlog"] != float64(3) {
			t.Fatalf("GET %s: %v", path, l)
		}
		if age, _ := l["oldest_queued_age_seconds"].(float64); age <= 0 {
			t.Fatalf("GET %s: oldest_queued_age_seconds %v, want the age of the waiting jobs", path, l["oldest_queued_age_seconds"])
		}
	}
	_, health, b := e.health(t)
	pl, _ := health["paused_lanes"].([]any)
	if len(pl) != 1 || pl[0].(map[string]any)["lane"] != dest {
		t.Fatalf("/health paused_lanes: %s", b)
	}

	// Cancel the one job the incident made pointless, in bulk.
	if n := e.dryRun(t, "/jobs/cancel", "", `{"q":"/drop"}`); n != 1 {
		t.Fatalf("cancel dry run counted %d, want 1", n)
	}
	status, m, b, _ := e.bulk(t, "/jobs/cancel", "", `{"filter":{"status":["failed"]},"dry_run":true}`)
	if status != http.StatusBadRequest || m["field"] != "filter.status" {
		t.Fatalf("cancel of failed jobs: %d %s, want 400 naming filter.status", status, b)
	}
	op := e.startOperation(t, "/jobs/cancel", "", `{"q":"/drop"}`)
	if op["kind"] != "cancel" {
		t.Fatalf("operation %v, want a cancel", op)
	}
	done := e.waitOperation(t, op["id"].(string), "")
	if done["state"] != "completed" || done["changed"] != float64(1) {
		t.Fatalf("cancel operation %v", done)
	}
	m, _ = e.waitStatus(t, drop, "failed")
	if m["reason"] != "canceled" {
		t.Fatalf("cancelled job's reason %v", m["reason"])
	}

	l = e.laneCall(t, http.MethodPost, lanePath(dest)+"/resume", "")
	if l["paused"] != nil {
		t.Fatalf("resume answered %v, want paused null", l)
	}
	e.waitStatus(t, keep1, "completed")
	e.waitStatus(t, keep2, "completed")
	for _, r := range up.requests() {
		if r.Path == "/drop/1" {
			t.Fatalf("the cancelled job was sent")
		}
	}
	// Resuming a lane that is not paused changes nothing.
	e.laneCall(t, http.MethodPost, lanePath(dest)+"/resume", "")
}

func TestLaneNamesAndBadInput(t *testing.T) {
	e := newEnv(t, envOptions{})
	l := e.laneCall(t, http.MethodPost, "/lanes/pool:p1/pause", "")
	if l["destination"] != "pool:p1" || l["paused"] == nil {
		t.Fatalf("pool lane pause: %v", l)
	}
	if l = e.laneCall(t, http.MethodGet, "/lanes/pool:p1", ""); l["paused"] == nil {
		t.Fatalf("pool lane: %v", l)
	}
	e.laneCall(t, http.MethodPost, "/lanes/pool:p1/resume", "")
	// Default ports are filled in: one destination, however it is written.
	l = e.laneCall(t, http.MethodGet, lanePath("https://API.example.com"), "")
	if l["destination"] != "https://api.example.com:443" || l["live"] != false {
		t.Fatalf("idle lane: %v", l)
	}

	for _, c := range []struct{ method, path, body, field string }{
		{http.MethodGet, "/lanes/api.example.com", "", "destination"},
		{http.MethodGet, "/lanes/pool:", "", "destination"},
		{http.MethodPost, "/lanes/pool:p1/pause", `{"reasn":"typo"}`, "reasn"},
		{http.MethodPost, "/lanes/pool:p1/pause", `{"reason":7}`, "reason"},
		{http.MethodPost, "/lanes/pool:p1/pause", `{"reason":"` + strings.Repeat("r", 501) + `"}`, "reason"},
	} {
		resp, m, b := e.call(t, c.method, c.path, "", c.body)
		if resp.StatusCode != http.StatusBadRequest || m["field"] != c.field {
			t.Errorf("%s %s %s: %d %s, want 400 naming %s", c.method, c.path, c.body, resp.StatusCode, b, c.field)
		}
	}
	// An unescaped URL splits into several segments: no such route.
	resp, b := e.request(t, http.MethodGet, "/lanes/https://api.example.com", nil)
	requireJSONError(t, resp, b, http.StatusNotFound)
}
