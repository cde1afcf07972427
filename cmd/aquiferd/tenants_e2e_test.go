package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aquiferhq/aquifer/internal/config"
)

// keyTransport adds a tenant's API key to every request.
type keyTransport struct{ key string }

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	return http.DefaultTransport.RoundTrip(r)
}

func withKey(key string) *http.Client {
	return &http.Client{Transport: keyTransport{key}, Timeout: 60 * time.Second}
}

// call does one JSON request as a tenant and decodes the answer.
func call(t *testing.T, key, method, url, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// TestTenantsAreIsolated runs two API-key tenants on one daemon and checks
// they cannot see, stream, cancel or collide with each other's jobs and
// pools over REST, the proxy, MCP and A2A, and that a quota sheds load.
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/hold") {
			<-release
		}
		fmt.Fprint(w, "ok")
	}))
	defer target.Close()
	defer close(release)
	keyA, keyB := "aq_alpha_secret", "aq_bravo_secret"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "aquifer.yml")
	yml := fmt.Sprintf(`defaults:
  rps: 500
  max_concurrent: 16
tenants:
  - name: alpha
    key_sha256: %s
  - name: bravo
    key_sha256: %s
    max_queued: 2
`, config.HashKey(keyA), config.HashKey(keyB))
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, []string{"CONFIG_PATH=" + cfg, "AQUIFER_DATA_DIR=" + filepath.Join(dir, "data"), "AQUIFER_ADAPTER=http,a2a,mcp-http"})

	// No key, or a wrong one: 401 everywhere a tenant's data is.
	for _, path := range []string{"/jobs", "/proxy", "/pools/p/members", "/mcp", "/a2a"} {
		for _, key := range []string{"", "not-a-key"} {
			if code, m := call(t, key, http.MethodPost, d.url+path, `{}`); code != http.StatusUnauthorized || m["error"] == nil {
				t.Fatalf("POST %s with key %q: %d %v, want 401 with a JSON error", path, key, code, m)
			}
		}
	}
	if code, _ := call(t, "", http.MethodGet, d.url+"/jobs/0123456789abcdef0123456789abcdef", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /jobs/{id} without a key: %d", code)
	}
	h := getJSON(t, d.url+"/health")
	if h["auth"] != "api_keys" {
		t.Fatalf("/health auth %v, want api_keys", h["auth"])
	}

	// The same user_id and idempotent_key make two jobs, one per tenant.
	job := fmt.Sprintf(`{"user_id":"u","idempotent_key":"same","url":%q}`, target.URL+"/quick")
	codeA, a := call(t, keyA, http.MethodPost, d.url+"/jobs", job)
	codeB, b := call(t, keyB, http.MethodPost, d.url+"/jobs", job)
	if codeA != http.StatusCreated || codeB != http.StatusCreated || a["job_id"] == b["job_id"] {
		t.Fatalf("one key in two tenants: %d %v / %d %v, want two new jobs", codeA, a, codeB, b)
	}
	idA, idB := a["job_id"].(string), b["job_id"].(string)
	for _, c := range []struct{ method, path string }{{http.MethodGet, "/jobs/"}, {http.MethodGet, "/jobs/%s/stream"}, {http.MethodDelete, "/jobs/"}} {
		url := d.url + c.path + idB
		if strings.Contains(c.path, "%s") {
			url = d.url + fmt.Sprintf(c.path, idB)
		}
		if code, _ := call(t, keyA, c.method, url, ""); code != http.StatusNotFound {
			t.Fatalf("alpha %s on bravo's job: %d, want 404", c.method, code)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, got := call(t, keyA, http.MethodGet, d.url+"/jobs/"+idA, "")
		if code == http.StatusOK && got["status"] == "completed" {
			if got["user_id"] != "u" {
				t.Fatalf("alpha sees user_id %v, want its own name u", got["user_id"])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alpha's job: %d %v", code, got)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Quota: bravo may have 2 unfinished jobs.
	hold := func(k string) string {
		return fmt.Sprintf(`{"user_id":"u","idempotent_key":%q,"url":%q}`, k, target.URL+"/hold")
	}
	for _, k := range []string{"h1", "h2"} {
		if code, m := call(t, keyB, http.MethodPost, d.url+"/jobs", hold(k)); code != http.StatusCreated {
			t.Fatalf("bravo job %s within quota: %d %v", k, code, m)
		}
	}
	var rejected map[string]any
	deadline = time.Now().Add(5 * time.Second) // the count is refreshed at most every second
	for {
		code, m := call(t, keyB, http.MethodPost, d.url+"/jobs", hold("h3"))
		if code == http.StatusTooManyRequests {
			rejected = m
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bravo's third unfinished job: %d %v, want 429 (quota 2)", code, m)
		}
		time.Sleep(100 * time.Millisecond)
		if code == http.StatusCreated {
			t.Fatalf("bravo's third unfinished job was accepted over its quota: %v", m)
		}
	}
	if rejected["limit_reason"] != "tenant_quota" {
		t.Fatalf("quota rejection %v", rejected)
	}
	if code, m := call(t, keyB, http.MethodPost, d.url+"/jobs", hold("h1")); code != http.StatusOK || m["duplicate"] != true {
		t.Fatalf("a duplicate over quota: %d %v, want 200 duplicate", code, m)
	}
	if code, _ := call(t, keyA, http.MethodPost, d.url+"/jobs", hold("a-h1")); code != http.StatusCreated {
		t.Fatalf("alpha is not limited by bravo's quota: %d", code)
	}

	// Pools are per tenant.
	if code, m := call(t, keyA, http.MethodPost, d.url+"/pools/p/members",
		fmt.Sprintf(`{"member_id":"m","address":%q,"capacity_rps":5}`, target.URL+"/member")); code != http.StatusOK {
		t.Fatalf("alpha registers: %d %v", code, m)
	}
	if _, m := call(t, keyB, http.MethodGet, d.url+"/pools", ""); len(m["pools"].(map[string]any)) != 0 {
		t.Fatalf("bravo sees pools %v", m["pools"])
	}
	if _, m := call(t, keyA, http.MethodGet, d.url+"/pools", ""); m["pools"].(map[string]any)["p"] == nil {
		t.Fatalf("alpha does not see its pool p: %v", m["pools"])
	}
	if code, _ := call(t, keyB, http.MethodDelete, d.url+"/pools/p/members/m", ""); code != http.StatusNotFound {
		t.Fatalf("bravo removing alpha's member: %d, want 404", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// MCP over HTTP: alpha reads its job, not bravo's.
	mcpA, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: d.url + "/mcp", HTTPClient: withKey(keyA)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mcpA.Close()
	if got := callTool(t, mcpA, "aquifer_get_job", map[string]any{"job_id": idA}); got["status"] != "completed" {
		t.Fatalf("alpha over MCP: %v", got)
	}
	res, err := mcpA.CallTool(ctx, &sdk.CallToolParams{Name: "aquifer_get_job", Arguments: map[string]any{"job_id": idB}})
	if err != nil || !res.IsError {
		t.Fatalf("alpha reading bravo's job over MCP: %+v %v, want a tool error", res, err)
	}
	enq := callTool(t, mcpA, "aquifer_enqueue_job", map[string]any{"user_id": "u", "idempotent_key": "mcp-1", "url": target.URL + "/quick"})
	if code, _ := call(t, keyB, http.MethodGet, d.url+"/jobs/"+enq["job_id"].(string), ""); code != http.StatusNotFound {
		t.Fatalf("bravo reading alpha's MCP job over REST: %d, want 404", code)
	}

	// A2A: a task made with alpha's key is alpha's.
	a2aA, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: d.url + "/a2a", Transport: a2a.TransportProtocolJSONRPC}},
		a2aclient.WithJSONRPCTransport(withKey(keyA)))
	if err != nil {
		t.Fatal(err)
	}
	defer a2aA.Destroy()
	sent, err := a2aA.SendMessage(ctx, &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser,
		a2a.DataPart{Data: map[string]any{"user_id": "u", "idempotent_key": "a2a-1", "url": target.URL + "/quick"}})})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := sent.(*a2a.Task)
	if !ok {
		t.Fatalf("A2A answer %T %+v", sent, sent)
	}
	jobOfTask := strings.ReplaceAll(string(task.ID), "-", "")
	if code, _ := call(t, keyA, http.MethodGet, d.url+"/jobs/"+jobOfTask, ""); code != http.StatusOK {
		t.Fatalf("alpha reading its A2A job over REST: %d", code)
	}
	if code, _ := call(t, keyB, http.MethodGet, d.url+"/jobs/"+jobOfTask, ""); code != http.StatusNotFound {
		t.Fatalf("bravo reading alpha's A2A job: %d, want 404", code)
	}
	a2aB, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: d.url + "/a2a", Transport: a2a.TransportProtocolJSONRPC}},
		a2aclient.WithJSONRPCTransport(withKey(keyB)))
	if err != nil {
		t.Fatal(err)
	}
	defer a2aB.Destroy()
	if _, err := a2aB.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID}); err == nil {
		t.Fatal("bravo read alpha's A2A task")
	}

	// The proxy scopes too, and applies the quota.
	px := fmt.Sprintf(`{"user_id":"u","idempotent_key":"px","url":%q}`, target.URL+"/quick")
	if code, _ := call(t, keyA, http.MethodPost, d.url+"/proxy", px); code != http.StatusOK {
		t.Fatalf("alpha through the proxy: %d", code)
	}
	if code, m := call(t, keyB, http.MethodPost, d.url+"/proxy", px); code != http.StatusTooManyRequests || m["limit_reason"] != "tenant_quota" {
		t.Fatalf("bravo (at its quota) through the proxy: %d %v, want 429 tenant_quota", code, m)
	}
}
