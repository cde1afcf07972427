package l8_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/l8"
)

func mustSecret(t *testing.T, s string) l8.Secret {
	t.Helper()
	sec, err := l8.ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	return sec
}

func newSecret(t *testing.T) (string, l8.Secret) {
	t.Helper()
	s, err := l8.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s, mustSecret(t, s)
}

// TestStandardHMACVector signs the published Standard Webhooks example (the
// one the official libraries' own tests use) and compares with its known
// signature.
func TestStandardHMACVector(t *testing.T) {
	t.Parallel()
	sec := mustSecret(t, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	h := http.Header{}
	body := []byte(`{"test": 2432232314}`)
	if !l8.SignStandardHeaders(h, "msg_p5jXN8AQM9LWM0D4loKWxJek", body, time.Unix(1614265330, 0), []l8.Secret{sec}, nil) {
		t.Fatal("nothing signed")
	}
	if got, want := h.Get("webhook-signature"), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("webhook-signature %q, want %q", got, want)
	}
	if h.Get("webhook-id") != "msg_p5jXN8AQM9LWM0D4loKWxJek" || h.Get("webhook-timestamp") != "1614265330" {
		t.Fatalf("headers %v", h)
	}
}

func TestNewSecret(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 20 {
		s, err := l8.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		b64, ok := strings.CutPrefix(s, "whsec_")
		raw, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || len(raw) != 32 {
			t.Fatalf("%q is not whsec_ + base64 of 32 bytes", s)
		}
		if seen[s] {
			t.Fatal("the same secret twice")
		}
		seen[s] = true
		if _, err := l8.ParseSecret(s); err != nil {
			t.Fatalf("ParseSecret(NewSecret()): %v", err)
		}
	}
}

func TestParseSecretRejects(t *testing.T) {
	t.Parallel()
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	for name, c := range map[string]struct {
		in   string
		want string
	}{
		"no prefix":   {key, "starts with whsec_"},
		"other form":  {"whpk_" + key, "starts with whsec_"},
		"not base64":  {"whsec_!!!!" + key, "standard base64"},
		"unpadded":    {"whsec_" + strings.TrimRight(base64.StdEncoding.EncodeToString(make([]byte, 32)), "="), "standard base64"},
		"too short":   {"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 16)), "has 16"},
		"too long":    {"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65)), "has 65"},
		"empty":       {"", "starts with whsec_"},
		"prefix only": {"whsec_", "has 0"},
	} {
		_, err := l8.ParseSecret(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", name, err, c.want)
			continue
		}
		if b64 := strings.TrimPrefix(c.in, "whsec_"); len(b64) > 4 && strings.Contains(err.Error(), b64) {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
}

// TestSecretNeverPrints: however a Secret is printed or encoded, its key
// does not show.
func TestSecretNeverPrints(t *testing.T) {
	t.Parallel()
	s, sec := newSecret(t)
	b64 := strings.TrimPrefix(s, "whsec_")
	raw, _ := base64.StdEncoding.DecodeString(b64)
	js, _ := json.Marshal(struct{ S l8.Secret }{sec})
	for _, out := range []string{fmt.Sprint(sec), fmt.Sprintf("%v %+v %#v %s", sec, sec, sec, sec),
		fmt.Sprintf("%+v", struct{ Secrets []l8.Secret }{[]l8.Secret{sec}}), string(js)} {
		if strings.Contains(out, b64) || strings.Contains(out, fmt.Sprint(raw)) || strings.Contains(out, fmt.Sprintf("%x", raw)) {
			t.Fatalf("the secret shows in %q", out)
		}
	}
	if !sec.Equal(mustSecret(t, s)) || sec.Equal(mustSecret(t, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")) || sec.IsZero() || !(l8.Secret{}).IsZero() {
		t.Fatal("Equal/IsZero")
	}
}

// hmacByHand computes a v1 signature as the Standard Webhooks spec states
// it, independently of package l8.
func hmacByHand(secret, id, ts string, body []byte) string {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "." + string(body)))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// TestSignStandardHeaders: one v1 entry per secret (in order) and then the
// v1a entry, all over the same id, timestamp and body.
func TestSignStandardHeaders(t *testing.T) {
	t.Parallel()
	id := newID(t)
	s1, sec1 := newSecret(t)
	s2, sec2 := newSecret(t)
	body := []byte(`{"job_id":"j1","status":"completed"}`)
	h := http.Header{}
	l8.SignStandardHeaders(h, "msg_j1", body, t0, []l8.Secret{sec1, sec2}, id)
	ts := strconv.FormatInt(t0.Unix(), 10)
	entries := strings.Split(h.Get("webhook-signature"), " ")
	if len(entries) != 3 || entries[0] != "v1,"+hmacByHand(s1, "msg_j1", ts, body) || entries[1] != "v1,"+hmacByHand(s2, "msg_j1", ts, body) {
		t.Fatalf("webhook-signature %q", h.Get("webhook-signature"))
	}
	if !strings.HasPrefix(entries[2], "v1a,") || !independentStandardVerify(id.StandardWebhooksKey(), "msg_j1", ts, entries[2], body) {
		t.Fatalf("the v1a entry %q does not verify", entries[2])
	}

	// Secrets only: no identity needed.
	h = http.Header{}
	if !l8.SignStandardHeaders(h, "msg_j2", body, t0, []l8.Secret{sec1}, nil) || h.Get("webhook-signature") != "v1,"+hmacByHand(s1, "msg_j2", ts, body) {
		t.Fatalf("secret only: %v", h)
	}
	// Identity only: exactly what SignStandard always sent.
	h, old := http.Header{}, http.Header{}
	l8.SignStandardHeaders(h, "msg_j3", body, t0, nil, id)
	id.SignStandard(old, "msg_j3", body, t0)
	if h.Get("webhook-signature") != old.Get("webhook-signature") || !strings.HasPrefix(h.Get("webhook-signature"), "v1a,") || strings.Contains(h.Get("webhook-signature"), " ") {
		t.Fatalf("identity only: %q vs %q", h.Get("webhook-signature"), old.Get("webhook-signature"))
	}
	// Neither: nothing.
	h = http.Header{}
	if l8.SignStandardHeaders(h, "msg_j4", body, t0, nil, nil) || len(h) != 0 {
		t.Fatalf("signed with nothing: %v", h)
	}
}

func TestVerifyStandardWith(t *testing.T) {
	t.Parallel()
	id, other := newID(t), newID(t)
	_, sec := newSecret(t)
	_, old := newSecret(t)
	_, wrong := newSecret(t)
	body := []byte(`{"job_id":"j1"}`)
	window := 5 * time.Minute
	sign := func(secrets []l8.Secret, who *l8.Identity, at time.Time) http.Header {
		h := http.Header{}
		l8.SignStandardHeaders(h, "msg_j1", body, at, secrets, who)
		return h
	}
	check := func(name string, secrets []l8.Secret, who *l8.Identity, h http.Header, b []byte, wantVersion string, wantErr error) {
		t.Helper()
		var pub []byte
		if who != nil {
			pub = who.PublicKey()
		}
		msgID, version, err := l8.VerifyStandardWith(secrets, pub, h, b, t0, window)
		if !errors.Is(err, wantErr) || version != wantVersion || (err == nil && msgID != "msg_j1") {
			t.Errorf("%s: %q %q %v, want version %q, error %v", name, msgID, version, err, wantVersion, wantErr)
		}
	}
	check("good v1", []l8.Secret{sec}, nil, sign([]l8.Secret{sec}, nil, t0), body, "v1", nil)
	check("tampered body", []l8.Secret{sec}, nil, sign([]l8.Secret{sec}, nil, t0), append([]byte{' '}, body...), "", l8.ErrBadSignature)
	check("wrong secret", []l8.Secret{wrong}, nil, sign([]l8.Secret{sec}, nil, t0), body, "", l8.ErrBadSignature)
	check("old timestamp", []l8.Secret{sec}, nil, sign([]l8.Secret{sec}, nil, t0.Add(-window-time.Second)), body, "", l8.ErrStale)
	check("future timestamp", []l8.Secret{sec}, nil, sign([]l8.Secret{sec}, nil, t0.Add(window+time.Second)), body, "", l8.ErrStale)
	// Rotation: the sender signs with both; a receiver with either accepts.
	both := sign([]l8.Secret{old, sec}, nil, t0)
	check("rotation, new secret", []l8.Secret{sec}, nil, both, body, "v1", nil)
	check("rotation, old secret", []l8.Secret{old}, nil, both, body, "v1", nil)
	check("rotation, receiver knows both", []l8.Secret{wrong, old}, nil, sign([]l8.Secret{sec, old}, nil, t0), body, "v1", nil)
	check("rotation, neither", []l8.Secret{wrong}, nil, both, body, "", l8.ErrBadSignature)
	// v1 and v1a in one header.
	mixed := sign([]l8.Secret{sec}, id, t0)
	check("mixed, by secret", []l8.Secret{sec}, nil, mixed, body, "v1", nil)
	check("mixed, by key", nil, id, mixed, body, "v1a", nil)
	check("mixed, wrong secret and wrong key", []l8.Secret{wrong}, other, mixed, body, "", l8.ErrBadSignature)
	check("mixed, wrong secret, right key", []l8.Secret{wrong}, id, mixed, body, "v1a", nil)
	// A v1a entry never satisfies a secret-only verifier, nor v1 a key-only one.
	check("v1a only, secret verifier", []l8.Secret{sec}, nil, sign(nil, id, t0), body, "", l8.ErrBadSignature)
	check("v1 only, key verifier", nil, id, sign([]l8.Secret{sec}, nil, t0), body, "", l8.ErrBadSignature)
	// A v1a signature relabelled v1 (and the reverse) does not pass.
	relabel := sign(nil, id, t0)
	relabel.Set("webhook-signature", "v1,"+strings.TrimPrefix(relabel.Get("webhook-signature"), "v1a,"))
	check("v1a relabelled v1", []l8.Secret{sec}, id, relabel, body, "", l8.ErrBadSignature)
	check("unsigned", []l8.Secret{sec}, nil, http.Header{}, body, "", l8.ErrUnsigned)
}
