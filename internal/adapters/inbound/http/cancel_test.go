package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestDeleteJobCancels(t *testing.T) {
	up := newUpstream(t, true, fixed(200, "text/plain", "ok"))
	e := newEnv(t, envOptions{hosts: map[string]domain.Rate{up.hostPort: {RPS: 1000, MaxConcurrent: 1}}})

	running := e.submit(t, jobFor("u", "c1", up.url("/running")))
	up.waitArrival(t)
	queued := e.submit(t, jobFor("u", "c2", up.url("/queued")))

	resp, b := e.request(t, http.MethodDelete, "/jobs/"+queued, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE a queued job: %d %s", resp.StatusCode, b)
	}
	m := decodeObject(t, b)
	if m["status"] != "failed" || m["reason"] != "canceled" || m["job_id"] != queued {
		t.Fatalf("cancelled job %s, want status failed, reason canceled", b)
	}

	resp, b = e.request(t, http.MethodDelete, "/jobs/"+running, nil)
	if m := requireJSONError(t, resp, b, http.StatusConflict); !strings.Contains(m["error"].(string), "already dispatched") {
		t.Fatalf("DELETE a running job: %s", b)
	}
	resp, b = e.request(t, http.MethodDelete, "/jobs/"+queued, nil)
	if m := requireJSONError(t, resp, b, http.StatusConflict); !strings.Contains(m["error"].(string), "already finished") {
		t.Fatalf("DELETE a cancelled job again: %s", b)
	}
	resp, b = e.request(t, http.MethodDelete, "/jobs/0123456789abcdef0123456789abcdef", nil)
	requireJSONError(t, resp, b, http.StatusNotFound)
	resp, b = e.request(t, http.MethodDelete, "/jobs/not-an-id", nil)
	requireJSONError(t, resp, b, http.StatusNotFound)

	up.releaseOne(t)
	e.waitStatus(t, running, "completed")
	up.requireNoArrival(t, 100*time.Millisecond) // the cancelled job never goes out
	_, got, _ := e.getJob(t, queued)
	if got["status"] != "failed" || got["reason"] != "canceled" {
		t.Fatalf("GET the cancelled job: %v", got)
	}
}
