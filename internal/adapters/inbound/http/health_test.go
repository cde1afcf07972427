package httpapi_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func (e *env) health(t *testing.T) (*http.Response, map[string]any, []byte) {
	t.Helper()
	resp, b := e.request(t, http.MethodGet, "/health", nil)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("/health Content-Type %q, want application/json", ct)
	}
	return resp, decodeObject(t, b), b
}

func TestHealthOK(t *testing.T) {
	up := newUpstream(t, true, fixed(200, "text/plain", "ok"))
	e := newEnv(t, envOptions{maxBody: 4096, hosts: map[string]domain.Rate{up.hostPort: {RPS: 1000, MaxConcurrent: 1}}})

	resp, m, b := e.health(t)
	if resp.StatusCode != http.StatusOK || m["status"] != "ok" {
		t.Fatalf("idle /health: status %d body %s, want 200 and status ok", resp.StatusCode, b)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("/health Cache-Control %q, want no-store", cc)
	}
	store, _ := m["store"].(map[string]any)
	if store["ok"] != true {
		t.Fatalf("store.ok %v, want true: %s", store["ok"], b)
	}
	if _, ok := store["error"]; ok {
		t.Fatalf("healthy store reports an error: %s", b)
	}
	jobs, _ := m["jobs"].(map[string]any)
	if jobs["queued"] != float64(0) || jobs["in_flight"] != float64(0) {
		t.Fatalf("idle jobs counts %v, want 0 and 0", jobs)
	}
	if lanes, ok := m["lanes"].([]any); !ok || len(lanes) != 0 {
		t.Fatalf("idle lanes %v, want an empty array", m["lanes"])
	}
	adm, _ := m["admission"].(map[string]any)
	if adm["max_body_bytes"] != float64(4096) || adm["enabled"] != true {
		t.Fatalf("admission %v, want enabled with max_body_bytes 4096", adm)
	}

	// One job running, one waiting behind it on a one-at-a-time lane.
	running := e.submit(t, jobFor("u", "h1", up.url("/1")))
	up.waitArrival(t)
	waiting := e.submit(t, jobFor("u", "h2", up.url("/2")))
	up.requireNoArrival(t, 50*time.Millisecond)
	lane := "http://" + up.hostPort
	eventually(t, "health to show one queued and one in-flight job on the lane", func() bool {
		resp, m, _ := e.health(t)
		jobs, _ := m["jobs"].(map[string]any)
		if resp.StatusCode != http.StatusOK || jobs["queued"] != float64(1) || jobs["in_flight"] != float64(1) {
			return false
		}
		lanes, _ := m["lanes"].([]any)
		for _, l := range lanes {
			l, _ := l.(map[string]any)
			if l["lane"] == lane && l["max_concurrent"] == float64(1) && l["in_flight"] == float64(1) &&
				l["buffered"] == float64(1) && l["rps"] == float64(1000) {
				return true
			}
		}
		return false
	})

	up.releaseOne(t)
	up.releaseOne(t)
	e.waitStatus(t, running, "completed")
	e.waitStatus(t, waiting, "completed")
	up.requirePeak(t, 1)
	eventually(t, "health counts to drop to zero", func() bool {
		_, m, _ := e.health(t)
		jobs, _ := m["jobs"].(map[string]any)
		return jobs["queued"] == float64(0) && jobs["in_flight"] == float64(0)
	})

	// HEAD answers too.
	resp, hb := e.request(t, http.MethodHead, "/health", nil)
	if resp.StatusCode != http.StatusOK || len(hb) != 0 {
		t.Fatalf("HEAD /health: status %d with %d body bytes", resp.StatusCode, len(hb))
	}
}

func TestHealthNoBodyLimit(t *testing.T) {
	e := newEnv(t, envOptions{maxBody: 0})
	_, m, b := e.health(t)
	adm, _ := m["admission"].(map[string]any)
	if adm["max_body_bytes"] != float64(0) || adm["enabled"] != false {
		t.Fatalf("admission without a body limit: %s", b)
	}
}

func TestHealthDegradedWhenStoreFails(t *testing.T) {
	e := newEnv(t, envOptions{pingErr: errors.New("disk on fire")})
	resp, m, b := e.health(t)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503; body %s", resp.StatusCode, b)
	}
	if m["status"] != "degraded" {
		t.Fatalf("status %v, want degraded: %s", m["status"], b)
	}
	store, _ := m["store"].(map[string]any)
	if store["ok"] != false {
		t.Fatalf("store.ok %v, want false: %s", store["ok"], b)
	}
	if msg, _ := store["error"].(string); msg == "" {
		t.Fatalf("store.error missing: %s", b)
	}
	if _, ok := m["lanes"].([]any); !ok {
		t.Fatalf("degraded health lacks the lanes array: %s", b)
	}
	resp, hb := e.request(t, http.MethodHead, "/health", nil)
	if resp.StatusCode != http.StatusServiceUnavailable || len(hb) != 0 {
		t.Fatalf("HEAD /health: status %d with %d body bytes, want 503 and none", resp.StatusCode, len(hb))
	}
}
