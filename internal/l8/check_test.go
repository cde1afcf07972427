package l8_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/l8"
)

// TestCheckPrivateKey: the one check of a private key gives the reason
// alone, for callers to say where the key came from.
func TestCheckPrivateKey(t *testing.T) {
	t.Parallel()
	_, priv := newIDKey(t)
	if err := l8.CheckPrivateKey(priv); err != nil {
		t.Fatalf("a generated key: %v", err)
	}
	if err := l8.CheckPrivateKey(priv[:12]); err == nil || err.Error() != "holds 12 bytes, want 64" {
		t.Errorf("12 bytes: %v", err)
	}
	bad := append(ed25519.PrivateKey(nil), priv...)
	bad[40] ^= 1
	if err := l8.CheckPrivateKey(bad); !errors.Is(err, l8.ErrKeyMismatch) || !strings.Contains(err.Error(), "public half does not match its seed") {
		t.Errorf("a mismatched public half: %v", err)
	}
}

func TestParsePrivateKey(t *testing.T) {
	t.Parallel()
	_, priv := newIDKey(t)
	got, err := l8.ParsePrivateKey(base64.StdEncoding.EncodeToString(priv))
	if err != nil || !got.Equal(priv) {
		t.Fatalf("a valid key: %v", err)
	}
	bad := append(ed25519.PrivateKey(nil), priv...)
	bad[40] ^= 1
	for in, want := range map[string]string{
		"not base64!": "must be the standard base64 of a 64-byte Ed25519 private key",
		base64.StdEncoding.EncodeToString(priv[:32]): "must be the standard base64 of a 64-byte Ed25519 private key",
		base64.StdEncoding.EncodeToString(bad):       "is not a valid Ed25519 private key: its public half does not match its seed",
	} {
		if _, err := l8.ParsePrivateKey(in); err == nil || err.Error() != want {
			t.Errorf("%.12s…: %v, want %q", in, err, want)
		}
	}
}

func TestReadKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, priv := newIDKey(t)
	good, short := filepath.Join(dir, "good.key"), filepath.Join(dir, "short.key")
	if err := os.WriteFile(good, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, []byte("tiny"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := l8.ReadKeyFile(good); err != nil || !got.Equal(priv) {
		t.Errorf("a good file: %v", err)
	}
	if _, err := l8.ReadKeyFile(short); err == nil || err.Error() != "holds 4 bytes, want 64" {
		t.Errorf("a short file: %v", err)
	}
	if _, err := l8.ReadKeyFile(filepath.Join(dir, "none.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
	if _, _, err := l8.LoadIdentity("", short); err == nil || !strings.Contains(err.Error(), "l8 key file "+short+": holds 4 bytes") {
		t.Errorf("LoadIdentity of a short file: %v", err)
	}
}

// TestSecretFromIsCheckedLater: a secret of a bad form is kept with its
// finding, in both wordings, never shows its value, and signs nothing.
func TestSecretFromIsCheckedLater(t *testing.T) {
	t.Parallel()
	s, good := newSecret(t)
	if err := l8.SecretFrom(" " + s + "\n").Check(); err != nil || !l8.SecretFrom(s).Equal(good) {
		t.Fatalf("a good secret: %v", err)
	}
	raw := strings.TrimPrefix(s, "whsec_")
	for in, want := range map[string][2]string{
		raw:                  {"a webhook secret starts with whsec_", "does not start with whsec_"},
		"whsec_" + raw[:10]:  {"a webhook secret is whsec_ followed by standard base64 (with padding)", "is not whsec_ followed by standard base64 (with padding)"},
		"whsec_dG9vIHNob3J0": {"a webhook secret decodes to 24 to 64 bytes; this one has 9", "decodes to 9 bytes, not 24 to 64"},
	} {
		sec := l8.SecretFrom(in)
		var bad *l8.SecretError
		if !errors.As(sec.Check(), &bad) || bad.Error() != want[0] || bad.Problem != want[1] {
			t.Errorf("%.8s…: %v, want %q / %q", in, sec.Check(), want[0], want[1])
			continue
		}
		if sec.IsZero() || sec.Equal(sec) || sec.Equal(good) {
			t.Errorf("%.8s…: a bad secret is zero or equals a secret", in)
		}
		if _, err := l8.ParseSecret(in); err == nil || err.Error() != want[0] {
			t.Errorf("ParseSecret(%.8s…): %v", in, err)
		}
		h := http.Header{}
		if l8.SignStandardHeaders(h, "msg_1", []byte("{}"), t0, []l8.Secret{sec}, nil) || len(h) != 0 {
			t.Errorf("%.8s…: a bad secret signed: %v", in, h)
		}
	}
	var zero l8.Secret
	var bad *l8.SecretError
	if !errors.As(zero.Check(), &bad) || bad.Problem != "is empty" || !zero.IsZero() {
		t.Errorf("the zero Secret: %v", zero.Check())
	}
	h := http.Header{}
	if l8.SignStandardHeaders(h, "msg_1", []byte("{}"), t0, []l8.Secret{zero, good}, nil); len(strings.Fields(h.Get("webhook-signature"))) != 1 {
		t.Errorf("a list with a zero secret: %q, want the good secret's signature only", h.Get("webhook-signature"))
	}
}
