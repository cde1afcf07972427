package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/config"
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
