package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestEvery405ListsAllowedMethods sends every method to every route of the
// daemon (REST, the proxy, MCP, A2A, L8, /metrics): each 405 carries an
// Allow header (RFC 9110 §15.5.6) that lists methods the route does take
// and not the one refused, and Aquifer's own 405s keep the JSON error body.
func TestEvery405ListsAllowedMethods(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, []string{"AQUIFER_DATA_DIR=" + filepath.Join(t.TempDir(), "data"), "AQUIFER_ADAPTER=http,a2a,mcp-http"})
	paths := []string{"/jobs", "/jobs/abc", "/jobs/0123456789abcdef0123456789abcdef/stream", "/health", "/metrics",
		"/pools", "/pools/p", "/pools/p/members", "/pools/p/members/m", "/proxy", "/mcp", "/a2a",
		"/.well-known/agent-card.json", "/.well-known/l8", "/l8/challenge", "/l8-spec"}
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	seen := 0
	for _, p := range paths {
		for _, m := range methods {
			req, err := http.NewRequest(m, d.url+p, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", m, p, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				continue
			}
			seen++
			allow := resp.Header.Values("Allow")
			var listed []string
			for _, a := range allow {
				for f := range strings.SplitSeq(a, ",") {
					listed = append(listed, strings.TrimSpace(f))
				}
			}
			if len(listed) == 0 || listed[0] == "" {
				t.Errorf("%s %s: 405 without Allow", m, p)
				continue
			}
			if slices.Contains(listed, m) {
				t.Errorf("%s %s: 405 whose Allow (%v) lists the refused method", m, p, allow)
			}
			if p == "/mcp" || m == http.MethodHead {
				continue // the MCP SDK's own 405; HEAD has no body
			}
			var e map[string]any
			if err := json.Unmarshal(b, &e); err != nil || e["error"] != "method not allowed" {
				t.Errorf("%s %s: 405 body %q, want the JSON error", m, p, b)
			}
		}
	}
	if seen < len(paths) {
		t.Fatalf("only %d 405s for %d paths: the routes are not what this test thinks", seen, len(paths))
	}
}
