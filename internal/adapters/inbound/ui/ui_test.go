package ui_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/ui"
)

func serve(t *testing.T, h http.Handler, method, target string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// requireSecurityHeaders checks the headers every dashboard response has.
func requireSecurityHeaders(t *testing.T, what string, w *httptest.ResponseRecorder) {
	t.Helper()
	want := map[string]string{
		"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
			"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
	}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
	}
}

// requireJSONError checks a JSON {"error": msg} answer with status.
func requireJSONError(t *testing.T, what string, w *httptest.ResponseRecorder, status int, msg string) {
	t.Helper()
	var body struct {
		Error string `json:"error"`
	}
	if w.Code != status || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") ||
		json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Error != msg {
		t.Fatalf("%s: %d %q %s; want %d with JSON error %q", what, w.Code, w.Header().Get("Content-Type"), w.Body, status, msg)
	}
}

// staticFiles lists the files under static/, slash-separated.
func staticFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir("static", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel("static", p)
			out = append(out, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("static/ holds %d files: the walk is broken", len(out))
	}
	return out
}

func TestServesThePage(t *testing.T) {
	t.Parallel()
	h := ui.Handler(ui.Options{Version: `1.2.3 <"&>`})
	w := serve(t, h, http.MethodGet, "/ui/")
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /ui/: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	requireSecurityHeaders(t, "GET /ui/", w)
	if w.Header().Get("ETag") == "" || w.Header().Get("Cache-Control") != "no-cache" {
		t.Errorf("GET /ui/: ETag %q, Cache-Control %q; want an ETag and no-cache", w.Header().Get("ETag"), w.Header().Get("Cache-Control"))
	}
	page := w.Body.String()
	for _, want := range []string{
		`<script type="module" src="/ui/assets/app.js"></script>`,
		`<link rel="stylesheet" href="/ui/assets/app.css">`,
		`<meta name="aquifer-version" content="1.2.3 &lt;&#34;&amp;&gt;">`, // escaped, so a version cannot inject markup
		`data-test="open-mode-banner"`,
		`data-test="nav-overview"`, `data-test="nav-destinations"`, `data-test="nav-jobs"`, `data-test="nav-pools"`,
		`data-test="nav-cluster"`, `data-test="logout"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(page, "{{") {
		t.Errorf("the page still has a template marker")
	}
	if got := serve(t, ui.Handler(ui.Options{}), http.MethodGet, "/ui/").Body.String(); !strings.Contains(got, `content="dev"`) {
		t.Errorf("without a version the page should say dev")
	}

	head := serve(t, h, http.MethodHead, "/ui/")
	if head.Code != http.StatusOK || head.Body.Len() != 0 || head.Header().Get("ETag") != w.Header().Get("ETag") {
		t.Errorf("HEAD /ui/: %d with %d body bytes, ETag %q; want 200, none, the GET's", head.Code, head.Body.Len(), head.Header().Get("ETag"))
	}
	again := serve(t, h, http.MethodGet, "/ui/", "If-None-Match", w.Header().Get("ETag"))
	if again.Code != http.StatusNotModified || again.Body.Len() != 0 {
		t.Errorf("GET /ui/ with its ETag: %d, want 304 without a body", again.Code)
	}
}

func TestRedirectsToTheSlash(t *testing.T) {
	t.Parallel()
	w := serve(t, ui.Handler(ui.Options{}), http.MethodGet, "/ui")
	if w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/ui/" {
		t.Fatalf("GET /ui: %d Location %q, want 301 to /ui/", w.Code, w.Header().Get("Location"))
	}
	requireSecurityHeaders(t, "GET /ui", w)
}

func TestServesEveryAsset(t *testing.T) {
	t.Parallel()
	h := ui.Handler(ui.Options{})
	types := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
	for _, f := range staticFiles(t) {
		if f == "index.html" {
			continue
		}
		want, err := os.ReadFile(filepath.Join("static", f))
		if err != nil {
			t.Fatal(err)
		}
		target := "/ui/" + f
		w := serve(t, h, http.MethodGet, target)
		if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), want) {
			t.Errorf("GET %s: %d, %d bytes; want 200 with the file's %d", target, w.Code, w.Body.Len(), len(want))
			continue
		}
		if ct := types[path.Ext(f)]; ct == "" || w.Header().Get("Content-Type") != ct {
			t.Errorf("GET %s: Content-Type %q, want %q", target, w.Header().Get("Content-Type"), ct)
		}
		requireSecurityHeaders(t, "GET "+target, w)
		tag := w.Header().Get("ETag")
		if !strings.HasPrefix(tag, `"`) || w.Header().Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: ETag %q, Cache-Control %q", target, tag, w.Header().Get("Cache-Control"))
		}
		if c := serve(t, h, http.MethodGet, target, "If-None-Match", tag); c.Code != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", target, c.Code)
		}

		z := serve(t, h, http.MethodGet, target, "Accept-Encoding", "br, gzip")
		if z.Header().Get("Content-Encoding") != "gzip" {
			if len(want) >= 4096 {
				t.Errorf("GET %s (%d bytes) with Accept-Encoding gzip: not compressed", target, len(want))
			}
			continue
		}
		if z.Header().Get("ETag") == tag || !strings.Contains(z.Header().Get("Vary"), "Accept-Encoding") {
			t.Errorf("GET %s gzipped: ETag %q (plain %q), Vary %q; want its own ETag and Vary: Accept-Encoding",
				target, z.Header().Get("ETag"), tag, z.Header().Get("Vary"))
		}
		zr, err := gzip.NewReader(z.Body)
		if err != nil {
			t.Fatalf("GET %s gzipped: %v", target, err)
		}
		got, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("GET %s gzipped: decompresses to %d bytes (%v), want the file", target, len(got), err)
		}
		if n := serve(t, h, http.MethodGet, target, "Accept-Encoding", "gzip;q=0"); n.Header().Get("Content-Encoding") != "" {
			t.Errorf("GET %s with gzip;q=0: compressed anyway", target)
		}
	}
}

func TestUnknownPathsAndMethods(t *testing.T) {
	t.Parallel()
	h := ui.Handler(ui.Options{})
	for _, target := range []string{
		"/ui/assets/nope.js", "/ui/assets/", "/ui/assets", "/ui/index.html", "/ui/assets/../index.html",
		"/ui/assets/pages/", "/ui/nope", "/ui//", "/uix", "/",
	} {
		w := serve(t, h, http.MethodGet, target)
		requireJSONError(t, "GET "+target, w, http.StatusNotFound, "not found")
		requireSecurityHeaders(t, "GET "+target, w)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		w := serve(t, h, m, "/ui/")
		requireJSONError(t, m+" /ui/", w, http.StatusMethodNotAllowed, "method not allowed")
		if w.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s /ui/: Allow %q, want GET, HEAD", m, w.Header().Get("Allow"))
		}
	}
}

func TestRootPointsToTheDashboard(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	ui.RootNotFound(w, httptest.NewRequest(http.MethodGet, "/", nil))
	requireJSONError(t, "GET /", w, http.StatusNotFound, "not found")
	if !strings.Contains(w.Body.String(), `"dashboard":"/ui/"`) {
		t.Errorf("GET /: %s, want it to name /ui/", w.Body)
	}
}

// The CSP forbids inline code and styles; these checks keep the files
// within it, and keep the pages from building markup out of strings
// (job bodies and headers come from upstreams).
func TestNoInlineScriptsOrStyles(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	scripts := regexp.MustCompile(`(?is)<script\b([^>]*)>(.*?)</script>`).FindAllSubmatch(page, -1)
	if len(scripts) == 0 {
		t.Fatal("index.html has no script: the check is broken")
	}
	for _, s := range scripts {
		if !bytes.Contains(s[1], []byte(`src="/ui/assets/`)) || len(bytes.TrimSpace(s[2])) != 0 {
			t.Errorf("index.html has an inline or foreign script: %s", s[0])
		}
	}
	for name, re := range map[string]*regexp.Regexp{
		"a <style> element":    regexp.MustCompile(`(?i)<style\b`),
		"a style attribute":    regexp.MustCompile(`(?i)\sstyle\s*=`),
		"an inline handler":    regexp.MustCompile(`(?i)\son[a-z]+\s*=`),
		"a javascript: URL":    regexp.MustCompile(`(?i)javascript:`),
		"a resource elsewhere": regexp.MustCompile(`(?i)(src|href)\s*=\s*"(https?:)?//`),
	} {
		if m := re.Find(page); m != nil {
			t.Errorf("index.html has %s: %q", name, m)
		}
	}
	forbidden := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*'style'|import\(\s*['"]https?:|fetch\(\s*['"]https?:`)
	for _, f := range staticFiles(t) {
		if path.Ext(f) != ".js" {
			continue
		}
		src, err := os.ReadFile(filepath.Join("static", f))
		if err != nil {
			t.Fatal(err)
		}
		if m := forbidden.Find(src); m != nil {
			t.Errorf("%s uses %q", f, m)
		}
	}
}

// TestModulesResolve follows every import of every module: a missing or
// misspelt file would only show in a browser otherwise.
func TestModulesResolve(t *testing.T) {
	t.Parallel()
	h := ui.Handler(ui.Options{})
	imp := regexp.MustCompile(`(?m)^import\s+(?:[^'"]+\s+from\s+)?'([^']+)';`)
	seen := map[string]bool{}
	queue := []string{"/ui/assets/app.js"}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		if seen[u] {
			continue
		}
		seen[u] = true
		w := serve(t, h, http.MethodGet, u)
		if w.Code != http.StatusOK {
			t.Errorf("GET %s: %d", u, w.Code)
			continue
		}
		for _, m := range imp.FindAllStringSubmatch(w.Body.String(), -1) {
			if !strings.HasPrefix(m[1], "./") && !strings.HasPrefix(m[1], "../") {
				t.Errorf("%s imports %q: only relative imports of our own files", u, m[1])
				continue
			}
			queue = append(queue, path.Join(path.Dir(u), m[1]))
		}
	}
	if len(seen) < 10 {
		t.Fatalf("followed %d modules from app.js: the scan is broken", len(seen))
	}
	for _, f := range staticFiles(t) {
		if path.Ext(f) == ".js" && !seen["/ui/"+f] {
			t.Errorf("%s is embedded but no page imports it", f)
		}
	}
}

// TestFootprint keeps the dashboard small: what a browser downloads on a
// first visit, compressed, and the sources as written.
func TestFootprint(t *testing.T) {
	t.Parallel()
	h := ui.Handler(ui.Options{})
	var raw, wire int
	for _, f := range staticFiles(t) {
		if ext := path.Ext(f); ext != ".js" && ext != ".css" {
			continue
		}
		raw += serve(t, h, http.MethodGet, "/ui/"+f).Body.Len()
		wire += serve(t, h, http.MethodGet, "/ui/"+f, "Accept-Encoding", "gzip").Body.Len()
	}
	t.Logf("JS and CSS: %d bytes, %d gzipped", raw, wire)
	if raw > 128<<10 || wire > 48<<10 {
		t.Errorf("JS and CSS weigh %d bytes (%d gzipped); keep them under 128 KiB (48 KiB gzipped)", raw, wire)
	}
}
