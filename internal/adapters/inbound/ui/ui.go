// Package ui serves Aquifer's web dashboard at /ui/: hand-written HTML,
// ES modules and CSS embedded in the binary, with no build step and nothing
// fetched from elsewhere.
//
// The dashboard is only a client of the REST API. The pages it serves hold
// no data and need no key: the browser fetches the API itself, with the key
// the operator typed into the login form (kept in sessionStorage, never in
// a cookie), so the handler here has nothing to authenticate. Every
// state-changing call the pages make is a fetch with a JSON body, which the
// REST adapter checks against cross-origin use (see httpapi's CSRF checks).
package ui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
)

//go:embed static
var static embed.FS

// Prefix is the path the dashboard is served under; Handler answers it and
// everything below it, and "/ui" without the slash redirects there.
const Prefix = "/ui/"

// ContentSecurityPolicy is sent with every response of the dashboard: the
// pages load scripts, styles and data from this origin only, run no inline
// code, and may not be framed (clickjacking of the pause and retry buttons).
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// versionMarker is replaced in index.html by the running version, escaped.
const versionMarker = "{{AQUIFER_VERSION}}"

// Options configure the handler.
type Options struct {
	// Version is the aquiferd version the pages show in their footer.
	// Empty shows "dev".
	Version string
}

// asset is one embedded file, ready to serve: its bytes, a gzip copy when
// that is smaller, and a strong ETag of each.
type asset struct {
	body, gz     []byte
	etag, gzETag string
	contentType  string
}

// Handler returns the dashboard's handler: GET and HEAD of /ui/ (the page)
// and /ui/assets/… (scripts, styles, icons), a redirect from /ui, and a
// JSON 404 or 405 for anything else, like the rest of the API.
//
// The files are prepared (read, versioned, compressed) on the first request,
// not before: a daemon whose dashboard nobody opens spends nothing on it.
func Handler(opts Options) http.Handler {
	return &handler{opts: opts}
}

type handler struct {
	opts   Options
	once   sync.Once
	assets map[string]*asset // by path under /ui/: "" is the page, "assets/app.js" a script; set by once
}

// prepared returns the assets, preparing them on first use.
func (h *handler) prepared() map[string]*asset {
	h.once.Do(func() {
		assets, err := load(h.opts)
		if err != nil {
			// The files are compiled in: failing to read them is a build defect.
			panic("ui: embedded files unreadable: " + err.Error())
		}
		h.assets = assets
	})
	return h.assets
}

// load reads every embedded file once, so serving is a map lookup.
func load(opts Options) (map[string]*asset, error) {
	root, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	out := map[string]*asset{}
	err = fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(root, p)
		if err != nil {
			return err
		}
		key := p
		if p == "index.html" {
			key = ""
			b = bytes.ReplaceAll(b, []byte(versionMarker), []byte(html.EscapeString(version)))
		} else if !strings.HasPrefix(p, "assets/") {
			return nil // only the page and its assets are served
		}
		out[key] = newAsset(b, contentType(p))
		return nil
	})
	return out, err
}

// newAsset prepares b for serving. Assets are not content-addressed (an
// ES module imports its neighbours by name), so browsers revalidate them on
// every load with the ETag: a 304 costs little, and an upgraded binary is
// never served beside a stale module.
func newAsset(b []byte, ctype string) *asset {
	a := &asset{body: b, etag: etag(b, ""), contentType: ctype}
	if len(b) < 1024 {
		return a
	}
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	gzipWriters.Put(zw)
	if buf.Len() < len(b) {
		a.gz, a.gzETag = buf.Bytes(), etag(b, "-gz")
	}
	return a
}

// gzipWriters keeps one compressor for every asset (a gzip.Writer holds
// about a megabyte of state).
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestCompression)
	return zw
}}

func etag(b []byte, suffix string) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:12]) + suffix + `"`
}

func contentType(p string) string {
	switch path.Ext(p) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	if t := mime.TypeByExtension(path.Ext(p)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// securityHeaders go on every response, errors and redirects included.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY") // frame-ancestors for browsers without CSP 2
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		httpkit.WriteError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, Prefix)
	a := h.prepared()[rest]
	if !ok || a == nil || (rest != "" && !fs.ValidPath(rest)) {
		httpkit.WriteError(w, http.StatusNotFound, "not found")
		return
	}
	body, tag := a.body, a.etag
	w.Header().Add("Vary", "Accept-Encoding")
	if a.gz != nil && acceptsGzip(r) {
		body, tag = a.gz, a.gzETag
		w.Header().Set("Content-Encoding", "gzip")
	}
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", tag)
	// ServeContent answers If-None-Match with 304, HEAD without a body,
	// and ranges; the zero time keeps it from sending Last-Modified.
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// acceptsGzip reports whether the request's Accept-Encoding admits gzip
// (and does not refuse it with q=0).
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
				continue
			}
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

// RootNotFound answers "/" when the dashboard is on: the JSON 404 every
// unknown path gets, with the dashboard's address for a person who typed
// the listener's address into a browser.
func RootNotFound(w http.ResponseWriter, _ *http.Request) {
	httpkit.WriteJSON(w, http.StatusNotFound, struct {
		Error     string `json:"error"`
		Dashboard string `json:"dashboard"`
	}{"not found", Prefix})
}
