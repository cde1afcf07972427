package webhookverify_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/pkg/aquifer/webhookverify"
)

func newSecret(t *testing.T) (string, l8.Secret) {
	t.Helper()
	s, err := l8.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	sec, err := l8.ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, sec
}

// signV1ByHand builds the Standard Webhooks headers the way the spec states
// them, with one v1 entry per secret, independently of package l8.
func signV1ByHand(msgID string, at time.Time, body []byte, secrets ...string) http.Header {
	ts := strconv.FormatInt(at.Unix(), 10)
	var entries []string
	for _, s := range secrets {
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		m := hmac.New(sha256.New, key)
		m.Write([]byte(msgID + "." + ts + "." + string(body)))
		entries = append(entries, "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	h := http.Header{}
	h.Set("webhook-id", msgID)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", strings.Join(entries, " "))
	return h
}

func secretVerifier(t *testing.T, now *time.Time, secret string, more ...string) *webhookverify.Verifier {
	t.Helper()
	v, err := webhookverify.NewWithSecret(secret, webhookverify.Options{Secrets: more, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerifySharedSecret(t *testing.T) {
	secret, _ := newSecret(t)
	wrong, _ := newSecret(t)
	body := []byte(`{"job_id":"j1","status":"completed"}`)
	now := t0
	v := secretVerifier(t, &now, secret)
	check := func(name string, h http.Header, b []byte, want error) {
		t.Helper()
		d, err := v.Verify(h, b)
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
		if err == nil && (d.Scheme != webhookverify.SchemeStandard || d.Version != "v1" || d.ID != h.Get("webhook-id")) {
			t.Errorf("%s: delivery %+v", name, d)
		}
	}
	check("good v1", signV1ByHand("msg_a", t0, body, secret), body, nil)
	check("tampered body", signV1ByHand("msg_b", t0, body, secret), []byte(`{"job_id":"j1","status":"failed"}`), webhookverify.ErrBadSignature)
	check("wrong secret", signV1ByHand("msg_c", t0, body, wrong), body, webhookverify.ErrBadSignature)
	check("old timestamp", signV1ByHand("msg_d", t0.Add(-6*time.Minute), body, secret), body, webhookverify.ErrStale)
	check("future timestamp", signV1ByHand("msg_e", t0.Add(6*time.Minute), body, secret), body, webhookverify.ErrStale)
	tampered := signV1ByHand("msg_f", t0, body, secret)
	tampered.Set("webhook-id", "msg_other")
	check("tampered id", tampered, body, webhookverify.ErrBadSignature)
	check("unsigned", http.Header{}, body, webhookverify.ErrUnsigned)
	replayed := signV1ByHand("msg_g", t0, body, secret)
	check("first", replayed, body, nil)
	check("replayed", replayed, body, webhookverify.ErrReplayed)
	// A retry of the same message, later, is a new delivery.
	check("retry", signV1ByHand("msg_g", t0.Add(2*time.Second), body, secret), body, nil)
}

// TestVerifySecretRotation: while Aquifer rotates, deliveries carry one v1
// entry per secret; a receiver that knows only the old, only the new, or
// both accepts them, and one that knows neither does not.
func TestVerifySecretRotation(t *testing.T) {
	oldS, _ := newSecret(t)
	newS, _ := newSecret(t)
	other, _ := newSecret(t)
	body := []byte(`{"job_id":"j1"}`)
	now := t0
	for name, c := range map[string]struct {
		receiver []string
		ok       bool
	}{
		"old only":  {[]string{oldS}, true},
		"new only":  {[]string{newS}, true},
		"both":      {[]string{newS, oldS}, true},
		"neither":   {[]string{other}, false},
		"other+new": {[]string{other, newS}, true},
	} {
		v := secretVerifier(t, &now, c.receiver[0], c.receiver[1:]...)
		_, err := v.Verify(signV1ByHand("msg_"+name, t0, body, oldS, newS), body)
		if (err == nil) != c.ok {
			t.Errorf("receiver with %s: %v, want ok=%v", name, err, c.ok)
		}
	}
	// A receiver in the middle of its own rotation (old and new) accepts a
	// sender that already signs with the new secret only, and one that
	// still signs with the old only.
	v := secretVerifier(t, &now, oldS, newS)
	for i, s := range []string{oldS, newS} {
		if _, err := v.Verify(signV1ByHand("msg_single"+strconv.Itoa(i), t0, body, s), body); err != nil {
			t.Errorf("sender with one secret, receiver with both: %v", err)
		}
	}
}

// TestVerifyMixedHeader: a header carrying v1 and v1a entries (what Aquifer
// sends with a secret and its identity) verifies with the secret alone,
// the key alone, or both; the L8 headers are checked only by a verifier
// with the key.
func TestVerifyMixedHeader(t *testing.T) {
	id, stranger := identity(t), identity(t)
	secret, sec := newSecret(t)
	wrong, _ := newSecret(t)
	body := []byte(`{"job_id":"j1"}`)
	now := t0
	mixed := func(msgID string) http.Header {
		h := http.Header{}
		l8.SignStandardHeaders(h, msgID, body, t0, []l8.Secret{sec}, id)
		return h
	}
	if sig := mixed("msg_x").Get("webhook-signature"); !strings.HasPrefix(sig, "v1,") || !strings.Contains(sig, " v1a,") {
		t.Fatalf("webhook-signature %q, want a v1 and a v1a entry", sig)
	}
	bySecret := secretVerifier(t, &now, secret)
	if d, err := bySecret.Verify(mixed("msg_1"), body); err != nil || d.Version != "v1" {
		t.Fatalf("by secret: %+v %v", d, err)
	}
	byKey := verifier(t, id.StandardWebhooksKey(), &now)
	if d, err := byKey.Verify(mixed("msg_2"), body); err != nil || d.Version != "v1a" {
		t.Fatalf("by key: %+v %v", d, err)
	}
	both, err := webhookverify.New(id.PublicKeyBase64(), webhookverify.Options{Secrets: []string{secret}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := both.Verify(mixed("msg_3"), body); err != nil || d.Scheme != webhookverify.SchemeStandard {
		t.Fatalf("by both: %+v %v", d, err)
	}
	// Wrong secret, right key: the v1a entry carries it.
	wrongSecret, err := webhookverify.New(id.PublicKeyBase64(), webhookverify.Options{Secrets: []string{wrong}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := wrongSecret.Verify(mixed("msg_4"), body); err != nil || d.Version != "v1a" {
		t.Fatalf("wrong secret, right key: %+v %v", d, err)
	}
	// Wrong both.
	neither, err := webhookverify.New(stranger.PublicKeyBase64(), webhookverify.Options{Secrets: []string{wrong}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := neither.Verify(mixed("msg_5"), body); !errors.Is(err, webhookverify.ErrBadSignature) {
		t.Fatalf("wrong secret and key: %v", err)
	}
	// A v1a-only delivery does not satisfy a secret-only verifier.
	v1a := http.Header{}
	id.SignStandard(v1a, "msg_6", body, t0)
	if _, err := bySecret.Verify(v1a, body); !errors.Is(err, webhookverify.ErrBadSignature) {
		t.Fatalf("v1a only, secret verifier: %v", err)
	}
	// With L8 headers too: a secret-only verifier checks the v1 entry; a
	// verifier with the key checks L8 (so a broken L8 signature fails it).
	withL8 := mixed("msg_7")
	id.SignL8(withL8, body, t0)
	if d, err := bySecret.Verify(withL8, body); err != nil || d.Scheme != webhookverify.SchemeStandard || d.Version != "v1" {
		t.Fatalf("secret verifier, L8 headers present: %+v %v", d, err)
	}
	if d, err := byKey.Verify(withL8, body); err != nil || d.Scheme != webhookverify.SchemeL8 {
		t.Fatalf("key verifier, L8 headers present: %+v %v", d, err)
	}
}

func TestNewRejectsBadSecrets(t *testing.T) {
	good, _ := newSecret(t)
	raw := strings.TrimPrefix(good, "whsec_")
	for name, c := range map[string]struct {
		key     string
		secrets []string
		want    string
	}{
		"nothing":        {"", nil, "public key, a shared secret"},
		"no prefix":      {"", []string{raw}, "Secrets[0]"},
		"second is bad":  {"", []string{good, "whsec_short"}, "Secrets[1]"},
		"bad with a key": {identity(t).PublicKeyBase64(), []string{"nope"}, "Secrets[0]"},
	} {
		_, err := webhookverify.New(c.key, webhookverify.Options{Secrets: c.secrets})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to mention %q", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), raw) {
			t.Errorf("%s: the error shows a secret: %v", name, err)
		}
	}
	if _, err := webhookverify.NewWithSecret(raw, webhookverify.Options{}); err == nil || strings.Contains(err.Error(), raw) {
		t.Errorf("NewWithSecret without whsec_: %v", err)
	}
}
