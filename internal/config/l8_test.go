package config_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/config"
)

// TestL8PrivateKeyIsDecodedAndChecked: L8_PRIVATE_KEY arrives decoded, and
// a key whose public half does not match its seed stops Load, named.
func TestL8PrivateKeyIsDecodedAndChecked(t *testing.T) {
	t.Parallel()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustLoad(t, envOf(map[string]string{"L8_PRIVATE_KEY": base64.StdEncoding.EncodeToString(priv)}))
	if !cfg.L8PrivateKey.Equal(priv) {
		t.Fatal("L8PrivateKey is not the key L8_PRIVATE_KEY gives")
	}
	bad := slices.Clone(priv)
	bad[40] ^= 1
	cfg, err = config.Load(envOf(map[string]string{"L8_PRIVATE_KEY": base64.StdEncoding.EncodeToString(bad)}))
	wantErr(t, cfg, err, "L8_PRIVATE_KEY: is not a valid Ed25519 private key: its public half does not match its seed")
}

func TestCheckL8KeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := mustLoad(t, envOf(map[string]string{"AQUIFER_DATA_DIR": dir}))
	if err := cfg.CheckL8KeyFile(); err != nil {
		t.Fatalf("no key file yet (it is generated at start): %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "l8.key"), []byte("tiny"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cfg.CheckL8KeyFile(); err == nil || !strings.Contains(err.Error(), "L8 key file "+filepath.Join(dir, "l8.key")+": holds 4 bytes, want 64") {
		t.Fatalf("a 4-byte key file: %v", err)
	}
	_, priv, _ := ed25519.GenerateKey(nil)
	withKey := mustLoad(t, envOf(map[string]string{"AQUIFER_DATA_DIR": dir, "L8_PRIVATE_KEY": base64.StdEncoding.EncodeToString(priv)}))
	if err := withKey.CheckL8KeyFile(); err != nil {
		t.Fatalf("the key file is not used when L8_PRIVATE_KEY is set: %v", err)
	}
}
