package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"debug/elf"
	"encoding/base64"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/config"
	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

func runCLI(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	err := Run(context.Background(), args, lookup, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestHelpListsEverySetting(t *testing.T) {
	t.Parallel()
	_, help, err := runCLI(t, nil, "-help")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range config.Settings {
		if !strings.Contains(help, s.Env) || !strings.Contains(help, s.Key) {
			t.Errorf("-help does not list %s (%s)", s.Env, s.Key)
		}
	}
	for _, cmd := range []string{"check-config", "hash-key", "version"} {
		if !strings.Contains(help, cmd) {
			t.Errorf("-help does not mention the %s command", cmd)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-version"}, {"version"}} {
		out, _, err := runCLI(t, nil, args...)
		if err != nil || out != "aquiferd "+Version+"\n" {
			t.Fatalf("%v: %q %v", args, out, err)
		}
	}
}

func TestCheckConfig(t *testing.T) {
	t.Parallel()
	out, _, err := runCLI(t, map[string]string{"AQUIFER_DATA_DIR": t.TempDir()}, "check-config")
	if err != nil || !strings.Contains(out, "configuration OK") || !strings.Contains(out, "open mode") {
		t.Fatalf("valid configuration: %q %v", out, err)
	}
	_, _, err = runCLI(t, map[string]string{"AQUIFER_DATA_DIR": t.TempDir(), "AQUIFER_PROXY_ORCA_THRESHOLD": "2"}, "check-config")
	if err == nil || !strings.Contains(err.Error(), "AQUIFER_PROXY_ORCA_THRESHOLD") {
		t.Fatalf("invalid configuration: %v", err)
	}
}

func TestHashKey(t *testing.T) {
	t.Parallel()
	out, _, err := runCLI(t, nil, "hash-key", "secret")
	if err != nil || strings.TrimSpace(out) != config.HashKey("secret") {
		t.Fatalf("hash-key secret: %q %v", out, err)
	}
	out, _, err = runCLI(t, nil, "hash-key")
	if err != nil || !strings.Contains(out, "key:") || !strings.Contains(out, "key_sha256:") {
		t.Fatalf("hash-key: %q %v", out, err)
	}
	var key, hash string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "key:"); ok {
			key = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "key_sha256:"); ok {
			hash = strings.TrimSpace(v)
		}
	}
	if key == "" || config.HashKey(key) != hash {
		t.Fatalf("the printed hash is not the printed key's: %q", out)
	}
	if _, _, err := runCLI(t, nil, "frobnicate"); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("unknown command: %v", err)
	}
}

// TestTakenPortFailsCleanly: a front door that cannot start fails Run with
// the reason, after stopping the core and closing the store (the database
// opens again at once).
func TestTakenPortFailsCleanly(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	data := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"AQUIFER_DATA_DIR": data, "AQUIFER_HOST": "127.0.0.1",
		"PORT": strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)}
	_, _, err = runCLI(t, env)
	if err == nil || !strings.Contains(err.Error(), "start adapter web: listen on 127.0.0.1:") {
		t.Fatalf("Run on a taken port: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	store, err := aquifer.OpenSQLite(ctx, aquifer.SQLiteOptions{Path: filepath.Join(data, "aquifer.db")})
	if err != nil {
		t.Fatalf("reopen the store: %v", err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestBadL8PrivateKeyIsRefused(t *testing.T) {
	t.Parallel()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	mismatched := slices.Clone(priv)
	mismatched[40] ^= 1 // the public half no longer matches the seed
	for key, want := range map[string]string{
		"not base64!": "must be the standard base64 of a 64-byte Ed25519 private key",
		base64.StdEncoding.EncodeToString(priv[:32]):  "must be the standard base64 of a 64-byte Ed25519 private key",
		base64.StdEncoding.EncodeToString(mismatched): "public half does not match its seed",
	} {
		env := map[string]string{"AQUIFER_DATA_DIR": filepath.Join(t.TempDir(), "data"), "AQUIFER_HOST": "127.0.0.1",
			"PORT": strconv.Itoa(freePort(t)), "L8_PRIVATE_KEY": key}
		if _, _, err := runCLI(t, env); err == nil || !strings.Contains(err.Error(), "L8_PRIVATE_KEY") || !strings.Contains(err.Error(), want) {
			t.Errorf("L8_PRIVATE_KEY %.12s…: %v, want %q", key, err, want)
		}
	}
}

// TestStaticBuildForTheImage builds aquiferd as deploy/Dockerfile does (CGO
// off, the version stamped with -ldflags; without -trimpath, which would
// recompile every package for nothing this test checks) and checks what the
// distroless image relies on: the binary is static (no ELF interpreter, so
// it runs without a libc) and reports the stamped version.
func TestStaticBuildForTheImage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a binary: skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "aquiferd")
	build := exec.Command("go", "build", "-buildvcs=false", "-ldflags", "-s -w -X main.Version=v9.9.9-image",
		"-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary is dynamically linked (it has an ELF interpreter); the distroless/static image has no libc")
		}
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || strings.TrimSpace(string(out)) != "aquiferd v9.9.9-image" {
		t.Errorf("version: %q, %v", out, err)
	}
}
