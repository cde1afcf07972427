package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
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

	"github.com/aquiferhq/aquifer/pkg/aquifer/webhookverify"
)

func getJSON(t *testing.T, url string) map[string]any {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return m
}

// TestL8IdentityPersistsInTheDataDir checks the key is generated under the
// data directory (0600, never the working directory), survives a restart,
// is published in /.well-known/l8 and /health, and signs webhooks.
func TestL8IdentityPersistsInTheDataDir(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	env := []string{"AQUIFER_DATA_DIR=" + dataDir}

	hooks := make(chan *http.Request, 4)
	bodies := make(chan []byte, 4)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hook" {
			http.NotFound(w, r) // no L8 here: deliveries go unsigned by L8, signed by Standard Webhooks
			return
		}
		b, _ := io.ReadAll(r.Body)
		hooks <- r
		bodies <- b
	}))
	defer receiver.Close()
	target := newRecorder(t, func(*http.Request, []byte) string { return "x" })

	d := startDaemon(t, env)
	meta := getJSON(t, d.url+"/.well-known/l8")
	key, _ := meta["public_key"].(string)
	if key == "" || getJSON(t, d.url+"/health")["l8_public_key"] != key {
		t.Fatalf("/.well-known/l8 %v and /health disagree on the key", meta)
	}
	fi, err := os.Stat(filepath.Join(dataDir, "l8.key"))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != ed25519.PrivateKeySize {
		t.Fatalf("key file: %v, %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(d.cmd.Dir, "l8.key")); err == nil {
		t.Fatal("a key file was written to the working directory")
	}

	// A webhook carries a Standard Webhooks signature that verifies with the
	// published key.
	v, err := webhookverify.New(meta["standard_webhooks_public_key"].(string), webhookverify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	job := fmt.Sprintf(`{"user_id":"u","idempotent_key":"k1","url":%q,"webhook_url":%q}`, target.URL+"/t", receiver.URL+"/hook")
	resp, err := http.Post(d.url+"/jobs", "application/json", strings.NewReader(job))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /jobs: %v %v", resp, err)
	}
	resp.Body.Close()
	select {
	case r := <-hooks:
		if _, err := v.Verify(r.Header, <-bodies); err != nil {
			t.Fatalf("webhook signature: %v (headers %v)", err, r.Header)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no webhook delivered")
	}

	// Same identity after a restart.
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
	d2 := startDaemon(t, env)
	if got := getJSON(t, d2.url+"/.well-known/l8")["public_key"]; got != key {
		t.Fatalf("key changed across restart: %v then %v", key, got)
	}
}

func TestL8PrivateKeyFromEnvironment(t *testing.T) {
	t.Parallel()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	d := startDaemon(t, []string{"AQUIFER_DATA_DIR=" + dataDir, "L8_PRIVATE_KEY=" + base64.StdEncoding.EncodeToString(priv)})
	if got := getJSON(t, d.url+"/.well-known/l8")["public_key"]; got != base64.StdEncoding.EncodeToString(pub) {
		t.Fatalf("published key %v is not the configured one", got)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "l8.key")); err == nil {
		t.Fatal("a key file was written although L8_PRIVATE_KEY is set")
	}
}
