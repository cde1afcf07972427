package webhookverify_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/pkg/aquifer/webhookverify"
)

var t0 = time.Unix(1_767_225_600, 0)

func identity(t *testing.T) *l8.Identity {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return l8.NewIdentity(priv)
}

func verifier(t *testing.T, key string, now *time.Time) *webhookverify.Verifier {
	t.Helper()
	v, err := webhookverify.New(key, webhookverify.Options{Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerifyBothSchemes(t *testing.T) {
	id := identity(t)
	body := []byte(`{"job_id":"j1","status":"completed"}`)
	now := t0
	for _, key := range []string{id.PublicKeyBase64(), id.StandardWebhooksKey()} {
		v := verifier(t, key, &now)

		l8h := http.Header{}
		id.SignL8(l8h, body, t0)
		if d, err := v.Verify(l8h, body); err != nil || d.Scheme != webhookverify.SchemeL8 || d.ID != l8h.Get(l8.HeaderDeliveryID) {
			t.Fatalf("L8 delivery with key %q: %+v, %v", key, d, err)
		}
		sw := http.Header{}
		id.SignStandard(sw, "msg_j1", body, t0)
		if d, err := v.Verify(sw, body); err != nil || d.Scheme != webhookverify.SchemeStandard || d.ID != "msg_j1" {
			t.Fatalf("Standard delivery with key %q: %+v, %v", key, d, err)
		}
	}
}

func TestVerifyRejects(t *testing.T) {
	id, other := identity(t), identity(t)
	body := []byte(`{"job_id":"j1"}`)
	now := t0
	v := verifier(t, id.PublicKeyBase64(), &now)

	for _, scheme := range []string{"l8", "standard"} {
		sign := func(who *l8.Identity, at time.Time) http.Header {
			h := http.Header{}
			if scheme == "l8" {
				who.SignL8(h, body, at)
			} else {
				who.SignStandard(h, "msg_"+l8.NewUUID(), body, at)
			}
			return h
		}
		check := func(name string, h http.Header, b []byte, want error) {
			t.Helper()
			if _, err := v.Verify(h, b); !errors.Is(err, want) {
				t.Errorf("%s/%s: %v, want %v", scheme, name, err, want)
			}
		}
		check("unsigned", http.Header{}, body, webhookverify.ErrUnsigned)
		check("tampered body", sign(id, t0), []byte(`{"job_id":"j2"}`), webhookverify.ErrBadSignature)
		check("wrong key", sign(other, t0), body, webhookverify.ErrBadSignature)
		check("stale", sign(id, t0.Add(-5*time.Minute-time.Second)), body, webhookverify.ErrStale)
		check("from the future", sign(id, t0.Add(5*time.Minute+time.Second)), body, webhookverify.ErrStale)

		h := sign(id, t0)
		check("first", h, body, nil)
		check("replayed", h, body, webhookverify.ErrReplayed)
		now = t0.Add(4 * time.Minute)
		check("replayed within the window", h, body, webhookverify.ErrReplayed)
		now = t0
	}
}

func TestStandardRetryIsNotAReplay(t *testing.T) {
	id := identity(t)
	body := []byte(`{"job_id":"j1"}`)
	now := t0
	v := verifier(t, id.StandardWebhooksKey(), &now)
	first, retry := http.Header{}, http.Header{}
	id.SignStandard(first, "msg_j1", body, t0)
	id.SignStandard(retry, "msg_j1", body, t0.Add(2*time.Second))
	now = t0.Add(2 * time.Second)
	if _, err := v.Verify(first, body); err != nil {
		t.Fatal(err)
	}
	if d, err := v.Verify(retry, body); err != nil || d.ID != "msg_j1" {
		t.Fatalf("a retry of the same message (new timestamp) was refused: %v", err)
	}
}

func TestReplayCacheIsBounded(t *testing.T) {
	id := identity(t)
	body := []byte(`{}`)
	now := t0
	v, err := webhookverify.New(id.PublicKeyBase64(), webhookverify.Options{MaxRemembered: 2, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		h := http.Header{}
		id.SignL8(h, body, now)
		if _, err := v.Verify(h, body); err != nil {
			t.Fatal(err)
		}
	}
	h := http.Header{}
	id.SignL8(h, body, now)
	if _, err := v.Verify(h, body); !errors.Is(err, webhookverify.ErrReplayed) {
		t.Fatalf("a full cache of live deliveries accepted another: %v", err)
	}
	now = t0.Add(11 * time.Minute)
	h = http.Header{}
	id.SignL8(h, body, now)
	if _, err := v.Verify(h, body); err != nil {
		t.Fatalf("after the old entries expired: %v", err)
	}
}

func TestVerifyRequest(t *testing.T) {
	id := identity(t)
	now := t0
	v := verifier(t, id.PublicKeyBase64(), &now)
	body := `{"job_id":"j1"}`
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	id.SignL8(r.Header, []byte(body), t0)
	got, _, err := v.VerifyRequest(r, 0)
	if err != nil || string(got) != body {
		t.Fatalf("VerifyRequest: %q, %v", got, err)
	}
	big := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(strings.Repeat("x", 100)))
	if _, _, err := v.VerifyRequest(big, 10); !errors.Is(err, webhookverify.ErrTooLarge) {
		t.Fatalf("oversized body: %v", err)
	}
}

func TestNewRejectsBadKeys(t *testing.T) {
	for _, k := range []string{"", "whpk_", "not base64!", "AAAA"} {
		if _, err := webhookverify.New(k, webhookverify.Options{}); err == nil {
			t.Errorf("New(%q) accepted a bad key", k)
		}
	}
}

func TestReceiverAnswersOnlyTheExpectedSender(t *testing.T) {
	aq, stranger := identity(t), identity(t)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	r, err := webhookverify.NewReceiver(priv, webhookverify.ReceiverOptions{SenderKey: aq.StandardWebhooksKey()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	r.Mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/.well-known/l8")
	if err != nil {
		t.Fatal(err)
	}
	var meta l8.Metadata
	_ = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	if meta.PublicKey != r.PublicKey() || meta.ChallengeEndpoint != "/l8/challenge" {
		t.Fatalf("metadata %+v", meta)
	}
	challenge := func(from *l8.Identity) (int, l8.ChallengeResponse, *l8.ChallengeRequest) {
		c := from.NewChallenge(time.Now())
		b, _ := json.Marshal(c)
		resp, err := http.Post(srv.URL+"/l8/challenge", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out l8.ChallengeResponse
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out, c
	}
	if code, _, _ := challenge(stranger); code != http.StatusForbidden {
		t.Fatalf("challenge from an unknown sender: %d, want 403", code)
	}
	code, out, c := challenge(aq)
	if code != http.StatusOK {
		t.Fatalf("challenge from Aquifer: %d", code)
	}
	if err := l8.VerifyResponse(c, &out, meta.PublicKey); err != nil {
		t.Fatalf("the receiver's proof does not verify: %v", err)
	}
}
