package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/config"
)

// TestDestinationRulesThroughTheDaemon: a job whose URL is the cloud
// metadata address is refused at submission (400, nothing stored); a job to
// a loopback server that redirects there fails at dial time with the reason
// and is not retried; a tenant with deny_private cannot reach loopback while
// another tenant can.
func TestDestinationRulesThroughTheDaemon(t *testing.T) {
	t.Parallel()
	var hits, redirects atomic.Int64
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/redirect" {
			redirects.Add(1)
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam/", http.StatusFound)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer redirector.Close()
	keyOpen, keyStrict := "aq_open_key", "aq_strict_key"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "aquifer.yml")
	yml := fmt.Sprintf(`defaults: {rps: 100, max_concurrent: 8}
tenants:
  - name: open
    key_sha256: %s
  - name: strict
    key_sha256: %s
    destinations:
      deny_private: true
`, config.HashKey(keyOpen), config.HashKey(keyStrict))
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, []string{"CONFIG_PATH=" + cfg, "AQUIFER_DATA_DIR=" + filepath.Join(dir, "data")})

	job := func(key, url string) string {
		return fmt.Sprintf(`{"user_id":"u","idempotent_key":%q,"url":%q}`, key, url)
	}
	code, m := call(t, keyOpen, http.MethodPost, d.url+"/jobs", job("meta", "http://169.254.169.254/latest/meta-data/"))
	if code != http.StatusBadRequest || m["field"] != "url" || !strings.Contains(fmt.Sprint(m["error"]), "denied") {
		t.Fatalf("a metadata URL: %d %v, want 400 naming url", code, m)
	}
	code, m = call(t, keyOpen, http.MethodPost, d.url+"/jobs",
		fmt.Sprintf(`{"user_id":"u","idempotent_key":"hook","url":%q,"webhook_url":"http://[fd00:ec2::254]/"}`, redirector.URL+"/ok"))
	if code != http.StatusBadRequest || m["field"] != "webhook_url" {
		t.Fatalf("a metadata webhook: %d %v, want 400 naming webhook_url", code, m)
	}
	// Numbers many clients read as an IPv4 address are that address: refused
	// at submission as the dotted form is, never looked up.
	for i, c := range []struct{ url, want string }{
		{"http://2852039166/latest/meta-data/", "url: destination 169.254.169.254 is denied: link-local / cloud metadata address"},
		{"http://0xa9fea9fe/", "url: destination 169.254.169.254 is denied: link-local / cloud metadata address"},
		{"http://0251.0376.0251.0376/", "url: destination 169.254.169.254 is denied: link-local / cloud metadata address"},
		{"http://169.254.43518/", "url: destination 169.254.169.254 is denied: link-local / cloud metadata address"},
		{"http://0:8080/", "url: destination 0.0.0.0 is denied: unspecified address"},
		{"http://1.2.3.4.5/", "url: host 1.2.3.4.5 is not a valid IPv4 address"},
	} {
		code, m := call(t, keyOpen, http.MethodPost, d.url+"/jobs", job(fmt.Sprint("num", i), c.url))
		if code != http.StatusBadRequest || m["field"] != "url" || m["error"] != c.want {
			t.Errorf("%s: %d %v, want 400 %q naming url", c.url, code, m, c.want)
		}
	}
	if h := getJSON(t, d.url+"/health"); h["jobs"].(map[string]any)["queued"] != float64(0) {
		t.Fatalf("a refused submission left a job behind: %v", h["jobs"])
	}

	// Through a redirect: known only when following it.
	code, m = call(t, keyOpen, http.MethodPost, d.url+"/jobs", job("redir", redirector.URL+"/redirect"))
	if code != http.StatusCreated {
		t.Fatalf("redirecting job: %d %v", code, m)
	}
	id := m["job_id"].(string)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, j := call(t, keyOpen, http.MethodGet, d.url+"/jobs/"+id, "")
		if j["status"] == "failed" {
			if !strings.Contains(fmt.Sprint(j["reason"]), "169.254.169.254") || j["attempts"] != float64(1) {
				t.Fatalf("refused through a redirect: %v, want one attempt and the reason", j)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redirected job: %v", j)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("the redirecting server was hit %d times; a refused destination must not be retried", n)
	}

	// A webhook receiver redirecting there: the delivery fails, with the reason.
	code, m = call(t, keyOpen, http.MethodPost, d.url+"/jobs",
		fmt.Sprintf(`{"user_id":"u","idempotent_key":"hook-redir","url":%q,"webhook_url":%q}`, redirector.URL+"/ok", redirector.URL+"/redirect"))
	if code != http.StatusCreated {
		t.Fatalf("job with a redirecting webhook: %d %v", code, m)
	}
	id = m["job_id"].(string)
	for {
		_, j := call(t, keyOpen, http.MethodGet, d.url+"/jobs/"+id, "")
		if w, _ := j["webhook"].(map[string]any); w != nil && w["status"] != "pending" {
			if w["status"] != "failed" || w["reason"] != "destination 169.254.169.254 is denied: link-local / cloud metadata address" {
				t.Fatalf("webhook redirected to the metadata address: %v, want a failed delivery with the reason", w)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redirected webhook: %v", j)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := redirects.Load(); n != 2 {
		t.Fatalf("the redirect was followed from %d requests, want 2 (the job, the webhook once)", n)
	}

	// Per tenant: strict denies private and loopback addresses, open does not.
	if code, m := call(t, keyStrict, http.MethodPost, d.url+"/jobs", job("lo", redirector.URL+"/ok")); code != http.StatusBadRequest {
		t.Fatalf("strict tenant to loopback: %d %v, want 400", code, m)
	}
	if code, _ := call(t, keyOpen, http.MethodPost, d.url+"/jobs", job("lo", redirector.URL+"/ok")); code != http.StatusCreated {
		t.Fatalf("open tenant to loopback: %d, want 201", code)
	}
	// A pool member address is checked too.
	if code, m := call(t, keyOpen, http.MethodPost, d.url+"/pools/p/members",
		`{"member_id":"m","address":"http://169.254.169.254/","capacity_rps":1}`); code != http.StatusBadRequest || m["field"] != "address" {
		t.Fatalf("a metadata pool member: %d %v", code, m)
	}
}
