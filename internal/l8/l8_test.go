package l8_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/l8"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func newID(t *testing.T) *l8.Identity {
	t.Helper()
	id, _ := newIDKey(t)
	return id
}

func newIDKey(t *testing.T) (*l8.Identity, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return l8.NewIdentity(priv), priv
}

func TestLoadIdentity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "keys", "l8.key")

	gen, src, err := l8.LoadIdentity("", path)
	if err != nil || src != l8.FromGenerated {
		t.Fatalf("first start: %v %v", src, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 64 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	again, src, err := l8.LoadIdentity("", path)
	if err != nil || src != l8.FromFile || again.PublicKeyBase64() != gen.PublicKeyBase64() {
		t.Fatalf("restart: %v %v; identity changed", src, err)
	}

	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	env := base64.StdEncoding.EncodeToString(priv)
	fromEnv, src, err := l8.LoadIdentity(env, path)
	if err != nil || src != l8.FromEnv || string(fromEnv.PublicKey()) != string(priv.Public().(ed25519.PublicKey)) {
		t.Fatalf("env key: %v %v", src, err)
	}
	for _, bad := range []string{"not base64!", base64.StdEncoding.EncodeToString(priv[:32])} {
		if _, _, err := l8.LoadIdentity(bad, path); err == nil || !strings.Contains(err.Error(), "L8_PRIVATE_KEY") {
			t.Fatalf("invalid L8_PRIVATE_KEY %q: %v", bad, err)
		}
	}
	short := filepath.Join(dir, "short.key")
	_ = os.WriteFile(short, []byte("tiny"), 0o600)
	if _, _, err := l8.LoadIdentity("", short); err == nil {
		t.Fatal("a 4-byte key file was accepted")
	}
	corrupt := filepath.Join(dir, "corrupt.key")
	bad := append([]byte(nil), priv...)
	bad[40] ^= 0xff
	_ = os.WriteFile(corrupt, bad, 0o600)
	if _, _, err := l8.LoadIdentity("", corrupt); err == nil {
		t.Fatal("a key file whose public half does not match was accepted")
	}
	if _, _, err := l8.LoadIdentity(base64.StdEncoding.EncodeToString(bad), path); err == nil || !strings.Contains(err.Error(), "L8_PRIVATE_KEY") {
		t.Fatalf("an L8_PRIVATE_KEY whose public half does not match: %v", err)
	}
}

func TestIdentityForms(t *testing.T) {
	t.Parallel()
	id := newID(t)
	pub := id.PublicKey()
	if id.KeyID() != base64.StdEncoding.EncodeToString(pub[:8]) {
		t.Fatal("key id is not the base64 of the first 8 bytes")
	}
	if id.StandardWebhooksKey() != "whpk_"+base64.StdEncoding.EncodeToString(pub) {
		t.Fatal("Standard Webhooks key form")
	}
	for _, form := range []string{id.PublicKeyBase64(), id.StandardWebhooksKey()} {
		if k, err := l8.ParsePublicKey(form); err != nil || string(k) != string(pub) {
			t.Fatalf("ParsePublicKey(%q) = %v", form, err)
		}
	}
	m := id.Metadata()
	if m.ProtocolVersion != "0.1" || m.PublicKey != id.PublicKeyBase64() || m.ChallengeEndpoint != "/l8/challenge" ||
		m.StandardWebhooksKey != id.StandardWebhooksKey() {
		t.Fatalf("metadata %+v", m)
	}
}

func TestChallengeRoundTrip(t *testing.T) {
	t.Parallel()
	sender, receiver := newID(t), newID(t)
	c := sender.NewChallenge(t0)
	if !l8.IsUUID(c.ChallengeID) || !l8.IsUUID(c.Nonce) || c.ChallengeID == c.Nonce {
		t.Fatalf("challenge ids %q %q", c.ChallengeID, c.Nonce)
	}
	resp, err := receiver.Answer(c, t0.Add(time.Minute), l8.NewNonces(0))
	if err != nil {
		t.Fatalf("Answer: %v", err)
	}
	if err := l8.VerifyResponse(c, resp, receiver.PublicKeyBase64()); err != nil {
		t.Fatalf("VerifyResponse: %v", err)
	}
	if err := l8.VerifyResponse(c, resp, sender.PublicKeyBase64()); err == nil {
		t.Fatal("a response verified against a key the receiver does not hold")
	}
	echo := *resp
	echo.Nonce = l8.NewUUID()
	if err := l8.VerifyResponse(c, &echo, receiver.PublicKeyBase64()); err == nil {
		t.Fatal("a response that does not echo the challenge was accepted")
	}
	forged := *resp
	forged.ReceiverSignature = base64.StdEncoding.EncodeToString(make([]byte, 64))
	if err := l8.VerifyResponse(c, &forged, receiver.PublicKeyBase64()); err == nil {
		t.Fatal("a forged receiver signature was accepted")
	}
}

func TestAnswerRejections(t *testing.T) {
	t.Parallel()
	sender, senderKey := newIDKey(t)
	receiver := newID(t)
	nonces := l8.NewNonces(0)
	reject := func(name string, c *l8.ChallengeRequest, now time.Time, want string) {
		t.Helper()
		_, err := receiver.Answer(c, now, nonces)
		var ce *l8.ChallengeError
		if !errors.As(err, &ce) || ce.Message != want {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	c := sender.NewChallenge(t0)
	reject("stale", c, t0.Add(5*time.Minute+time.Second), "timestamp expired")
	reject("from the future", c, t0.Add(-5*time.Minute-time.Second), "timestamp expired")

	notUUID := *c
	notUUID.ChallengeID = "arbitrary text to sign"
	// Correctly signed by the sender: only the UUID rule stops Aquifer from
	// signing an arbitrary string with its identity.
	notUUID.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(senderKey, []byte(notUUID.ChallengeID+":"+c.Nonce)))
	reject("non-UUID challenge id", &notUUID, t0, "challenge_id and nonce must be UUIDs")

	badKey := *c
	badKey.SenderPublicKey = "AAAA"
	reject("bad key", &badKey, t0, "invalid sender_public_key")
	badEnc := *c
	badEnc.Signature = "%%%"
	reject("bad encoding", &badEnc, t0, "invalid signature encoding")
	badSig := *c
	badSig.Signature = base64.StdEncoding.EncodeToString(make([]byte, 64))
	reject("bad signature", &badSig, t0, "signature verification failed")

	// None of the failed attempts burned the nonce: the genuine challenge
	// is still answered, once.
	if _, err := receiver.Answer(c, t0, nonces); err != nil {
		t.Fatalf("genuine challenge after failed ones: %v", err)
	}
	reject("replayed", c, t0.Add(time.Second), "nonce already used")
	// After the window the nonce may be forgotten, but then the timestamp is stale anyway.
	reject("replayed late", c, t0.Add(6*time.Minute), "timestamp expired")

	// A challenge dated 4 minutes ahead is answered now and must stay
	// refused for as long as its timestamp is acceptable (until t0+9m).
	future := sender.NewChallenge(t0.Add(4 * time.Minute))
	if _, err := receiver.Answer(future, t0, nonces); err != nil {
		t.Fatalf("future-dated challenge within the window: %v", err)
	}
	reject("future-dated, replayed after 6m", future, t0.Add(6*time.Minute), "nonce already used")
	reject("future-dated, replayed after 10m", future, t0.Add(10*time.Minute), "timestamp expired")
}

func TestNoncesAreBounded(t *testing.T) {
	t.Parallel()
	sender, receiver := newID(t), newID(t)
	nonces := l8.NewNonces(2)
	for i := range 2 {
		if _, err := receiver.Answer(sender.NewChallenge(t0), t0, nonces); err != nil {
			t.Fatalf("challenge %d: %v", i, err)
		}
	}
	if _, err := receiver.Answer(sender.NewChallenge(t0), t0, nonces); err == nil {
		t.Fatal("a full nonce cache accepted a new challenge")
	}
	if _, err := receiver.Answer(sender.NewChallenge(t0.Add(6*time.Minute)), t0.Add(6*time.Minute), nonces); err != nil {
		t.Fatalf("after the window expired: %v", err)
	}
}

func TestL8DeliverySignature(t *testing.T) {
	t.Parallel()
	id := newID(t)
	body := []byte(`{"job_id":"x","status":"completed"}`)
	h := http.Header{}
	id.SignL8(h, body, t0)
	// The signed string, computed here from the spec, verifies with the key.
	sum := sha256.Sum256(body)
	signed := h.Get("X-L8-Delivery-Id") + "." + strconv.FormatInt(t0.Unix(), 10) + "." + base64.StdEncoding.EncodeToString(sum[:])
	sig, _ := base64.StdEncoding.DecodeString(h.Get("X-L8-Signature"))
	if !ed25519.Verify(id.PublicKey(), []byte(signed), sig) || h.Get("X-L8-Key-Id") != id.KeyID() || !l8.IsUUID(h.Get("X-L8-Delivery-Id")) {
		t.Fatalf("headers %v do not match the spec's signed string", h)
	}
	if _, err := l8.VerifyL8(id.PublicKey(), h, body, t0.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatalf("VerifyL8: %v", err)
	}
	if _, err := l8.VerifyL8(id.PublicKey(), h, []byte(`{"job_id":"x","status":"failed"}`), t0, 5*time.Minute); !errors.Is(err, l8.ErrBadSignature) {
		t.Fatalf("tampered body: %v", err)
	}
	if _, err := l8.VerifyL8(newID(t).PublicKey(), h, body, t0, 5*time.Minute); !errors.Is(err, l8.ErrBadSignature) {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := l8.VerifyL8(id.PublicKey(), h, body, t0.Add(6*time.Minute), 5*time.Minute); !errors.Is(err, l8.ErrStale) {
		t.Fatalf("stale: %v", err)
	}
	if _, err := l8.VerifyL8(id.PublicKey(), http.Header{}, body, t0, 5*time.Minute); !errors.Is(err, l8.ErrUnsigned) {
		t.Fatalf("unsigned: %v", err)
	}
}

// independentStandardVerify implements Standard Webhooks verification from
// the spec, without the package: signed content "{id}.{timestamp}.{body}",
// "v1a," + base64 Ed25519 signatures, space-separated, key "whpk_" + base64.
func independentStandardVerify(whpk, id, ts, sigHeader string, body []byte) bool {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(whpk, "whpk_"))
	if err != nil || len(raw) != 32 {
		return false
	}
	content := id + "." + ts + "." + string(body)
	for _, part := range strings.Split(sigHeader, " ") {
		if !strings.HasPrefix(part, "v1a,") {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(part[4:])
		if err == nil && ed25519.Verify(raw, []byte(content), sig) {
			return true
		}
	}
	return false
}

func TestStandardWebhooksSignature(t *testing.T) {
	t.Parallel()
	id := newID(t)
	body := []byte(`{"body":"ok","job_id":"abc","response_status":200,"status":"completed"}`)
	h := http.Header{}
	id.SignStandard(h, "msg_abc", body, t0)
	if h.Get("webhook-id") != "msg_abc" || h.Get("webhook-timestamp") != strconv.FormatInt(t0.Unix(), 10) ||
		!strings.HasPrefix(h.Get("webhook-signature"), "v1a,") {
		t.Fatalf("headers %v", h)
	}
	if !independentStandardVerify(id.StandardWebhooksKey(), h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature"), body) {
		t.Fatal("an independent Standard Webhooks verifier rejects the signature")
	}
	if _, err := l8.VerifyStandard(id.PublicKey(), h, body, t0, 5*time.Minute); err != nil {
		t.Fatalf("VerifyStandard: %v", err)
	}
	// Several signatures, one matching; unknown versions ignored.
	h.Set("webhook-signature", "v1,c2VjcmV0 v1a,"+base64.StdEncoding.EncodeToString(make([]byte, 64))+" "+h.Get("webhook-signature"))
	if _, err := l8.VerifyStandard(id.PublicKey(), h, body, t0, 5*time.Minute); err != nil {
		t.Fatalf("a list with one valid signature: %v", err)
	}
	if _, err := l8.VerifyStandard(id.PublicKey(), h, append(body, ' '), t0, 5*time.Minute); !errors.Is(err, l8.ErrBadSignature) {
		t.Fatalf("tampered body: %v", err)
	}
	if _, err := l8.VerifyStandard(id.PublicKey(), h, body, t0.Add(-6*time.Minute), 5*time.Minute); !errors.Is(err, l8.ErrStale) {
		t.Fatalf("stale: %v", err)
	}
}

func TestFileTrust(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "l8-trust")
	ft, err := l8.NewFileTrust(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("trust dir mode %v", fi.Mode().Perm())
	}
	if _, err := ft.Get("https://hooks.example.org:8443"); !errors.Is(err, l8.ErrNoTrust) {
		t.Fatalf("Get before Put = %v", err)
	}
	tr := &l8.Trust{Domain: "https://hooks.example.org:8443", PublicKey: newID(t).PublicKeyBase64(), ValidatedAt: t0.Unix(),
		ProtocolVersion: "0.1", Capabilities: []string{"signed_payloads"}}
	if err := ft.Put(tr); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "https_hooks.example.org_8443.json")
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("trust file: %v %v", fi, err)
	}
	raw, _ := os.ReadFile(file)
	for _, key := range []string{`"domain"`, `"public_key"`, `"validated_at"`, `"protocol_version"`, `"capabilities"`, "\n  "} {
		if !strings.Contains(string(raw), key) {
			t.Fatalf("trust file lacks %q:\n%s", key, raw)
		}
	}
	if got, err := ft.Get(tr.Domain); err != nil || got.PublicKey != tr.PublicKey {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	// Revocation: deleting the file takes effect at once.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if _, err := ft.Get(tr.Domain); !errors.Is(err, l8.ErrNoTrust) {
		t.Fatalf("Get after deleting the file = %v", err)
	}
	// A damaged file trusts nobody.
	_ = os.WriteFile(file, []byte("{broken"), 0o600)
	if _, err := ft.Get(tr.Domain); !errors.Is(err, l8.ErrNoTrust) {
		t.Fatalf("Get of a damaged file = %v", err)
	}
	for _, evil := range []string{"https://../../etc", "https://a/b", "https://.hidden"} {
		if err := ft.Put(&l8.Trust{Domain: evil, PublicKey: tr.PublicKey}); err == nil {
			t.Fatalf("Put(%q) accepted a path outside the directory", evil)
		}
	}
}

func TestIdentityFromKey(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := l8.IdentityFromKey(priv)
	if err != nil || string(id.PublicKey()) != string(priv.Public().(ed25519.PublicKey)) {
		t.Fatalf("a valid key: %v", err)
	}
	if _, err := l8.IdentityFromKey(priv[:32]); err == nil {
		t.Error("a 32-byte key was accepted")
	}
	bad := append(ed25519.PrivateKey(nil), priv...)
	bad[33] ^= 1
	if _, err := l8.IdentityFromKey(bad); err == nil {
		t.Error("a key whose public half does not match its seed was accepted")
	}
}
