package httpapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

func member(body string) *strings.Reader { return strings.NewReader(body) }

func TestRegisterMemberValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	cases := []struct {
		name, path, body, want string
	}{
		{"invalid json", "/pools/p/members", `{`, "invalid json"},
		{"wrong type", "/pools/p/members", `{"member_id":1}`, "member_id must be a string, not a number"},
		{"capacity out of range", "/pools/p/members", `{"member_id":"m","address":"http://a.test/","capacity_rps":1e999}`, "capacity_rps: the number 1e999 is out of range"},
		{"missing member", "/pools/p/members", `{"address":"http://a.test/","capacity_rps":1}`, "pool_id, member_id, and address are required"},
		{"missing address", "/pools/p/members", `{"member_id":"m","capacity_rps":1}`, "pool_id, member_id, and address are required"},
		{"zero capacity", "/pools/p/members", `{"member_id":"m","address":"http://a.test/","capacity_rps":0}`, "capacity_rps must be greater than 0"},
		{"negative capacity", "/pools/p/members", `{"member_id":"m","address":"http://a.test/","capacity_rps":-3}`, "capacity_rps must be greater than 0"},
		{"non-http address", "/pools/p/members", `{"member_id":"m","address":"ftp://a.test/","capacity_rps":1}`, "address must be an absolute http or https URL"},
		{"bad pool id", "/pools/bad%20id/members", `{"member_id":"m","address":"http://a.test/","capacity_rps":1}`, "pool_id may contain only"},
		{"bad member id", "/pools/p/members", `{"member_id":"a b","address":"http://a.test/","capacity_rps":1}`, "member_id may contain only"},
		{"interval too long", "/pools/p/members", `{"member_id":"m","address":"http://a.test/","capacity_rps":1,"heartbeat_interval_seconds":99999}`, "heartbeat_interval_seconds must be at most"},
	}
	for _, c := range cases {
		resp, b := e.request(t, http.MethodPost, c.path, member(c.body))
		m := requireJSONError(t, resp, b, http.StatusBadRequest)
		if !strings.Contains(m["error"].(string), c.want) {
			t.Errorf("%s: error %q, want it to contain %q", c.name, m["error"], c.want)
		}
		// A decoding error of a known field names it, as validation errors do.
		if field, _, ok := strings.Cut(c.want, " must be"); ok && m["field"] != field {
			t.Errorf("%s: field %v, want %q", c.name, m["field"], field)
		}
		if field, _, ok := strings.Cut(c.want, ": the number"); ok && m["field"] != field {
			t.Errorf("%s: field %v, want %q", c.name, m["field"], field)
		}
	}
	if len(e.svc.Pools(t.Context())) != 0 {
		t.Fatalf("a rejected registration created a pool: %v", e.svc.Pools(t.Context()))
	}
}

func TestPoolLifecycleOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	body := `{"member_id":"r-1","address":"http://10.0.0.5:8080/read","capacity_rps":20,"heartbeat_interval_seconds":15}`
	resp, b := e.request(t, http.MethodPost, "/pools/readers/members", member(body))
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"status":"registered"`) || !strings.Contains(string(b), `"created":true`) {
		t.Fatalf("register: %d %s", resp.StatusCode, b)
	}
	resp, b = e.request(t, http.MethodPost, "/pools/readers/members", member(body)) // heartbeat
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"created":false`) {
		t.Fatalf("heartbeat: %d %s", resp.StatusCode, b)
	}
	resp, b = e.request(t, http.MethodGet, "/pools/readers", nil)
	m := decodeObject(t, b)
	members := m["members"].([]any)
	if resp.StatusCode != 200 || m["pool_id"] != "readers" || len(members) != 1 || m["total_capacity_rps"] != float64(20) {
		t.Fatalf("GET /pools/readers: %d %s", resp.StatusCode, b)
	}
	mm := members[0].(map[string]any)
	requireKeys(t, "member", mm, "id", "address", "declared_rps", "reputation", "effective_rps", "max_concurrent",
		"in_flight", "paused", "heartbeat_age_ms", "picks", "successes", "failures")
	if _, b = e.request(t, http.MethodGet, "/pools", nil); !strings.Contains(string(b), `"readers"`) {
		t.Fatalf("GET /pools: %s", b)
	}
	_, b = e.request(t, http.MethodGet, "/health", nil)
	if pools := decodeObject(t, b)["pools"].(map[string]any); pools["readers"] == nil {
		t.Fatalf("/health pools: %s", b)
	}
	if resp, b = e.request(t, http.MethodDelete, "/pools/readers/members/r-1", nil); resp.StatusCode != 200 {
		t.Fatalf("leave: %d %s", resp.StatusCode, b)
	}
	resp, b = e.request(t, http.MethodDelete, "/pools/readers/members/r-1", nil)
	requireJSONError(t, resp, b, http.StatusNotFound)
	resp, b = e.request(t, http.MethodGet, "/pools/readers", nil)
	requireJSONError(t, resp, b, http.StatusNotFound)
}

func TestPoolTokenIsRequiredWhenSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{poolToken: "s3cret"})
	body := `{"member_id":"m","address":"http://a.test/","capacity_rps":1}`
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret"}} {
		resp, b := e.request(t, http.MethodPost, "/pools/p/members", member(body), hdr...)
		requireJSONError(t, resp, b, http.StatusUnauthorized)
		if resp.Header.Get("WWW-Authenticate") == "" {
			t.Fatal("401 without WWW-Authenticate")
		}
	}
	for _, path := range []string{"/pools", "/pools/p"} {
		resp, b := e.request(t, http.MethodGet, path, nil)
		requireJSONError(t, resp, b, http.StatusUnauthorized)
	}
	resp, b := e.request(t, http.MethodDelete, "/pools/p/members/m", nil)
	requireJSONError(t, resp, b, http.StatusUnauthorized)
	if len(e.svc.Pools(t.Context())) != 0 {
		t.Fatal("an unauthorized registration got through")
	}
	resp, b = e.request(t, http.MethodPost, "/pools/p/members", member(body), "Authorization", "Bearer s3cret")
	if resp.StatusCode != 200 {
		t.Fatalf("with the token: %d %s", resp.StatusCode, b)
	}
	// /health stays open, but shows member addresses only with the token.
	_, b = e.request(t, http.MethodGet, "/health", nil)
	if bytes.Contains(b, []byte("a.test")) || !bytes.Contains(b, []byte(`"id":"m"`)) {
		t.Fatalf("/health without the token: %s", b)
	}
	_, b = e.request(t, http.MethodGet, "/health", nil, "Authorization", "Bearer s3cret")
	if !bytes.Contains(b, []byte(`"address":"http://a.test/"`)) {
		t.Fatalf("/health with the token lacks the member address: %s", b)
	}
}
