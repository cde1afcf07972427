package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// get fetches url and returns the response (body read and closed) and body.
func get(t *testing.T, u string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// requireJSON404 gets u, checks the router's JSON 404 and returns its body
// decoded.
func requireJSON404(t *testing.T, what, u string) map[string]any {
	t.Helper()
	resp, body := get(t, u)
	var m map[string]any
	if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
		json.Unmarshal([]byte(body), &m) != nil || m["error"] == nil {
		t.Fatalf("%s = %d %q %s; want a JSON 404", what, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	return m
}

// TestDashboardFollowsSetting: the dashboard is served at /ui/ by default,
// with its assets and headers, "/" points to it, and a cross-origin write
// is refused; AQUIFER_UI=off, or a listener without the REST API, leaves
// /ui/ to the router's JSON 404.
func TestDashboardFollowsSetting(t *testing.T) {
	t.Parallel()
	t.Run("on", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, storeEnv(t, "sqlite"))
		resp, page := get(t, d.url+"/ui/")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" ||
			!strings.Contains(page, `src="/ui/assets/app.js"`) || !strings.Contains(page, `content="`+Version+`"`) {
			t.Fatalf("GET /ui/ = %d %q, want the page with version %s: %.300s", resp.StatusCode, resp.Header.Get("Content-Type"), Version, page)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET /ui/: Content-Security-Policy %q", csp)
		}
		if resp, js := get(t, d.url+"/ui/assets/app.js"); resp.StatusCode != http.StatusOK || !strings.Contains(js, "import") {
			t.Errorf("GET /ui/assets/app.js = %d", resp.StatusCode)
		}
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		r, err := noRedirect.Get(d.url + "/ui")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != "/ui/" {
			t.Errorf("GET /ui = %d to %q, want 301 to /ui/", r.StatusCode, r.Header.Get("Location"))
		}
		requireJSON404(t, "GET /ui/assets/nope.js", d.url+"/ui/assets/nope.js")
		if m := requireJSON404(t, "GET /", d.url+"/"); m["dashboard"] != "/ui/" {
			t.Errorf("GET / = %v, want it to point to /ui/", m)
		}

		// A page elsewhere cannot pause a lane of this open-mode instance.
		req, _ := http.NewRequest(http.MethodPost, d.url+"/lanes/"+url.PathEscape("https://api.example.com:443")+"/pause", nil)
		req.Header.Set("Origin", "https://evil.example")
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "cross-origin request refused") {
			t.Fatalf("cross-origin pause = %d %s, want 403", resp.StatusCode, b)
		}
		if _, health := get(t, d.url+"/health"); !strings.Contains(health, `"paused_lanes":[]`) {
			t.Fatalf("after a refused cross-origin pause: %s", health)
		}
	})
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, append([]string{"AQUIFER_UI=off"}, storeEnv(t, "sqlite")...))
		requireJSON404(t, "GET /ui/ with AQUIFER_UI=off", d.url+"/ui/")
		requireJSON404(t, "GET /ui/assets/app.js with AQUIFER_UI=off", d.url+"/ui/assets/app.js")
		if m := requireJSON404(t, "GET / with AQUIFER_UI=off", d.url+"/"); m["dashboard"] != nil {
			t.Errorf("GET / with the dashboard off = %v, want no pointer to it", m)
		}
	})
	t.Run("without the REST API", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, append([]string{"AQUIFER_ADAPTER=mcp-http"}, storeEnv(t, "sqlite")...))
		requireJSON404(t, "GET /ui/ without the http adapter", d.url+"/ui/")
	})
}
