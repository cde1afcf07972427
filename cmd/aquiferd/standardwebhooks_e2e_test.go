package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
	"github.com/aquiferhq/aquifer/pkg/aquifer/webhookverify"
)

// standardWebhooksVersion is the official npm library the interop test
// verifies with; scripts/test-deps.sh warms the same install.
const standardWebhooksVersion = "1.1.1"

// standardWebhooksDir is where the library is installed once and reused:
// <user cache dir>/aquifer-test/standardwebhooks-<version> (scripts/test-deps.sh
// uses the same path).
func standardWebhooksDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = filepath.Join(os.TempDir(), "aquifer-cache")
	}
	return filepath.Join(base, "aquifer-test", "standardwebhooks-"+standardWebhooksVersion)
}

// installStandardWebhooks returns the install directory of the official
// library, installing it with npm the first time. The install goes to a
// fresh directory beside the final one and is renamed into place when it
// completed, so a run that dies half-way or a concurrent run never leaves a
// broken install behind. Any failure fails the test.
func installStandardWebhooks(t *testing.T, npm string) string {
	t.Helper()
	dir := standardWebhooksDir()
	marker := filepath.Join(dir, "installed")
	if _, err := os.Stat(marker); err == nil {
		return dir
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp) // gone after a successful rename
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"private": true}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "standardwebhooks@"+standardWebhooksVersion)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install standardwebhooks@%s: %v\n%s", standardWebhooksVersion, err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, "installed"), []byte(standardWebhooksVersion+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another run may have finished first; its install is as good.
		if _, serr := os.Stat(marker); serr != nil {
			t.Fatalf("put the npm install in place: %v", err)
		}
	}
	return dir
}

// capture is one delivery as the receiver got it.
type capture struct {
	path    string
	headers http.Header
	body    []byte
}

// swCase is one verification for the node script (testdata/standardwebhooks/verify.cjs).
type swCase struct {
	Name         string            `json:"name"`
	Secret       string            `json:"secret"`
	Headers      map[string]string `json:"headers"`
	BodyBase64   string            `json:"body_base64"`
	ClockOffsetS int               `json:"clock_offset_seconds"`
}

type swResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

func newSWCase(name, secret string, c capture) swCase {
	h := map[string]string{}
	for k := range c.headers {
		h[k] = c.headers.Get(k)
	}
	return swCase{Name: name, Secret: secret, Headers: h, BodyBase64: base64.StdEncoding.EncodeToString(c.body)}
}

// runOfficialVerifier verifies the cases with the official library.
func runOfficialVerifier(t *testing.T, node, dir string, cases []swCase) map[string]swResult {
	t.Helper()
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "standardwebhooks", "verify.cjs"), dir)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node verify.cjs: %v\n%s", err, stderr.String())
	}
	var got struct {
		Version string     `json:"version"`
		Results []swResult `json:"results"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node verify.cjs printed %q: %v", out, err)
	}
	if got.Version != standardWebhooksVersion {
		t.Fatalf("verified with standardwebhooks %s, want %s", got.Version, standardWebhooksVersion)
	}
	if len(got.Results) != len(cases) {
		t.Fatalf("%d results for %d cases", len(got.Results), len(cases))
	}
	byName := map[string]swResult{}
	for _, r := range got.Results {
		byName[r.Name] = r
	}
	return byName
}

func newWhsec(t *testing.T) string {
	t.Helper()
	s, err := aquifer.NewWebhookSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOfficialStandardWebhooksLibrary checks real aquiferd deliveries with
// the official Standard Webhooks library for JavaScript (npm
// standardwebhooks), which verifies v1 signatures only: every delivery
// verifies with the shared secret (a retried one too), a tampered body, a
// delivery verified too late and a wrong secret are refused, and a
// delivery signed during a rotation (two secrets) verifies with either.
func TestOfficialStandardWebhooksLibrary(t *testing.T) {
	t.Parallel()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm not found: install Node.js and npm to run the Standard Webhooks interop test: ", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found: install Node.js to run the Standard Webhooks interop test: ", err)
	}
	libDir := installStandardWebhooks(t, npm)

	var mu sync.Mutex
	var got []capture
	flakyFailed := false
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/hook") {
			http.NotFound(w, r) // the L8 discovery: this receiver knows only Standard Webhooks
			return
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, capture{path: r.URL.Path, headers: r.Header.Clone(), body: body})
		if r.URL.Path == "/single/flaky/hook" && !flakyFailed {
			flakyFailed = true // answer the first delivery 503: the retry must verify too
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()
	target := newRecorder(t, func(*http.Request, []byte) string { return "x" })
	deliveries := func(prefix string, n int) []capture {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			var out []capture
			for _, c := range got {
				if strings.HasPrefix(c.path, prefix) {
					out = append(out, c)
				}
			}
			mu.Unlock()
			if len(out) >= n {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d deliveries under %s, want %d", len(out), prefix, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	submit := func(base, key, hookPath string) {
		t.Helper()
		body := fmt.Sprintf(`{"user_id":"u","idempotent_key":%q,"url":%q,"webhook_url":%q}`, key, target.URL+"/t", receiver.URL+hookPath)
		if ids := submitJobs(t, base, 1, 1, func(int) string { return body }); ids[0] == "" {
			t.Fatalf("job %s not accepted", key)
		}
	}

	secret, oldSecret, stranger := newWhsec(t), newWhsec(t), newWhsec(t)
	single := startDaemon(t, []string{"AQUIFER_DATA_DIR=" + filepath.Join(t.TempDir(), "single"), "AQUIFER_WEBHOOK_SECRET=" + secret})
	rotating := startDaemon(t, []string{"AQUIFER_DATA_DIR=" + filepath.Join(t.TempDir(), "rotating"),
		"AQUIFER_WEBHOOK_SECRET=" + oldSecret + " " + secret})
	submit(single.url, "a", "/single/a/hook")
	submit(single.url, "b", "/single/b/hook")
	submit(single.url, "flaky", "/single/flaky/hook")
	submit(rotating.url, "r", "/rotating/hook")
	singles := deliveries("/single/", 4) // a, b, flaky twice
	rotated := deliveries("/rotating/", 1)[0]

	var cases []swCase
	for i, c := range singles {
		cases = append(cases, newSWCase(fmt.Sprintf("delivery %d (%s)", i, c.path), secret, c))
	}
	tampered := singles[0]
	tampered.body = bytes.Replace(tampered.body, []byte(`"completed"`), []byte(`"failed"`), 1)
	if bytes.Equal(tampered.body, singles[0].body) {
		t.Fatalf("nothing to tamper with in %s", singles[0].body)
	}
	late := newSWCase("late", secret, singles[1])
	late.ClockOffsetS = 10 * 60 // verified 10 minutes after it was signed: the timestamp is too old
	cases = append(cases,
		newSWCase("tampered", secret, tampered),
		late,
		newSWCase("wrong secret", stranger, singles[0]),
		newSWCase("rotation, new secret", secret, rotated),
		newSWCase("rotation, old secret", oldSecret, rotated),
		newSWCase("rotation, other secret", stranger, rotated),
	)
	res := runOfficialVerifier(t, node, libDir, cases)

	for i, c := range singles {
		if r := res[fmt.Sprintf("delivery %d (%s)", i, c.path)]; !r.OK {
			t.Errorf("the official library refused a real delivery to %s: %s\nheaders %v\nbody %s", c.path, r.Error, c.headers, c.body)
		}
	}
	for name, wantErr := range map[string]string{
		"tampered": "No matching signature found", "late": "Message timestamp too old",
		"wrong secret": "No matching signature found", "rotation, other secret": "No matching signature found",
	} {
		if r := res[name]; r.OK || r.Error != wantErr {
			t.Errorf("%s: ok=%v error %q, want refused with %q", name, r.OK, r.Error, wantErr)
		}
	}
	for _, name := range []string{"rotation, new secret", "rotation, old secret"} {
		if r := res[name]; !r.OK {
			t.Errorf("%s: refused: %s (webhook-signature %q)", name, r.Error, rotated.headers.Get("webhook-signature"))
		}
	}

	// What the library saw: one header with a v1 entry per secret and
	// aquiferd's v1a entry (which it ignores); the retry kept its
	// webhook-id and was signed anew.
	if n := strings.Count(rotated.headers.Get("webhook-signature"), "v1,"); n != 2 || !strings.Contains(rotated.headers.Get("webhook-signature"), " v1a,") {
		t.Errorf("rotation webhook-signature %q: want two v1 entries and a v1a", rotated.headers.Get("webhook-signature"))
	}
	var flaky []capture
	for _, c := range singles {
		if c.path == "/single/flaky/hook" {
			flaky = append(flaky, c)
		}
	}
	if len(flaky) != 2 || flaky[0].headers.Get("webhook-id") != flaky[1].headers.Get("webhook-id") {
		t.Errorf("the retried delivery: %d deliveries, webhook-ids %v", len(flaky), flaky)
	}

	// webhookverify agrees with the official library on the same deliveries.
	for _, s := range []string{secret, oldSecret} {
		v, err := webhookverify.NewWithSecret(s, webhookverify.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(rotated.headers, rotated.body); err != nil {
			t.Errorf("webhookverify refused the rotation delivery: %v", err)
		}
	}
	v, err := webhookverify.NewWithSecret(secret, webhookverify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(tampered.headers, tampered.body); !errors.Is(err, webhookverify.ErrBadSignature) {
		t.Errorf("webhookverify on the tampered body: %v", err)
	}
}

// TestStandardWebhooksInstallDir keeps the cache path and scripts/test-deps.sh
// in agreement, so the script warms the install the test uses.
func TestStandardWebhooksInstallDir(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "scripts", "test-deps.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"aquifer-test/standardwebhooks-" + standardWebhooksVersion, "standardwebhooks@" + standardWebhooksVersion,
		"--no-audit --no-fund"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("scripts/test-deps.sh does not contain %q", want)
		}
	}
}
