package httpapi_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/l8"
)

func newIdentity(t *testing.T) (*l8.Identity, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return l8.NewIdentity(priv), priv
}

func TestL8Metadata(t *testing.T) {
	id, _ := newIdentity(t)
	e := newEnv(t, envOptions{l8: id})
	resp, b := e.request(t, http.MethodGet, "/.well-known/l8", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	m := decodeObject(t, b)
	requireKeys(t, "/.well-known/l8", m, "protocol_version", "service_name", "public_key", "challenge_endpoint",
		"supported_algorithms", "capabilities", "spec_url", "standard_webhooks_public_key")
	if m["public_key"] != id.PublicKeyBase64() || m["challenge_endpoint"] != "/l8/challenge" || m["protocol_version"] != "0.1" {
		t.Fatalf("metadata %s does not describe the identity", b)
	}
	if m["standard_webhooks_public_key"] != "whpk_"+id.PublicKeyBase64() {
		t.Fatalf("standard_webhooks_public_key %v", m["standard_webhooks_public_key"])
	}

	_, h, hb := e.health(t)
	if h["l8_protocol"] != "0.1" || h["l8_public_key"] != id.PublicKeyBase64() || h["standard_webhooks_public_key"] != "whpk_"+id.PublicKeyBase64() {
		t.Fatalf("/health does not publish the key: %s", hb)
	}
}

func TestL8Disabled(t *testing.T) {
	e := newEnv(t, envOptions{})
	resp, b := e.request(t, http.MethodGet, "/.well-known/l8", nil)
	requireJSONError(t, resp, b, http.StatusNotFound)
	resp, b = e.request(t, http.MethodPost, "/l8/challenge", strings.NewReader(`{}`))
	requireJSONError(t, resp, b, http.StatusNotFound)
	_, h, hb := e.health(t)
	if _, ok := h["l8_public_key"]; ok {
		t.Fatalf("/health publishes a key with L8 off: %s", hb)
	}
}

func TestL8Challenge(t *testing.T) {
	id, _ := newIdentity(t)
	e := newEnv(t, envOptions{l8: id})
	sender, senderKey := newIdentity(t)

	post := func(v any) (*http.Response, []byte) {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return e.request(t, http.MethodPost, "/l8/challenge", bytes.NewReader(raw), "Content-Type", "application/json")
	}
	reject := func(name string, v any, want string) {
		t.Helper()
		resp, b := post(v)
		m := requireJSONError(t, resp, b, http.StatusBadRequest)
		if m["error"] != want {
			t.Errorf("%s: error %q, want %q", name, m["error"], want)
		}
	}

	c := sender.NewChallenge(time.Now())
	stale := sender.NewChallenge(time.Now().Add(-6 * time.Minute))
	reject("stale timestamp", stale, "timestamp expired")
	future := sender.NewChallenge(time.Now().Add(6 * time.Minute))
	reject("future timestamp", future, "timestamp expired")
	badKey := *c
	badKey.SenderPublicKey = base64.StdEncoding.EncodeToString([]byte("short"))
	reject("bad key", badKey, "invalid sender_public_key")
	badSig := *c
	badSig.Signature = base64.StdEncoding.EncodeToString(make([]byte, ed25519.SignatureSize))
	reject("bad signature", badSig, "signature verification failed")
	notUUID := *c
	notUUID.ChallengeID = "sign this for me"
	notUUID.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(senderKey, []byte(notUUID.ChallengeID+":"+c.Nonce)))
	reject("non-UUID challenge", notUUID, "challenge_id and nonce must be UUIDs")

	resp, b := e.request(t, http.MethodPost, "/l8/challenge", strings.NewReader(`{"challenge_id":`))
	if m := requireJSONError(t, resp, b, http.StatusBadRequest); !strings.HasPrefix(m["error"].(string), "invalid json") {
		t.Errorf("broken JSON: error %q", m["error"])
	}

	resp, b = post(c)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("genuine challenge: %d %s", resp.StatusCode, b)
	}
	var answer l8.ChallengeResponse
	if err := json.Unmarshal(b, &answer); err != nil {
		t.Fatal(err)
	}
	if err := l8.VerifyResponse(c, &answer, id.PublicKeyBase64()); err != nil {
		t.Fatalf("Aquifer's answer does not verify with its published key: %v", err)
	}
	reject("replayed nonce", c, "nonce already used")
}

func TestL8Spec(t *testing.T) {
	e := newEnv(t, envOptions{})
	resp, b := e.request(t, http.MethodGet, "/l8-spec", nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/markdown; charset=utf-8" {
		t.Fatalf("/l8-spec: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{"/.well-known/l8", "X-L8-Signature", "webhook-signature", "sha256", "Deleting the file revokes trust"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("/l8-spec does not mention %q", want)
		}
	}
}
