package main

import (
	"encoding/base64"
	"strings"
	"testing"
)

// TestGenWebhookSecret: the command prints one new whsec_ secret of 32
// random bytes alone on stdout, a different one each run, and is listed in
// -help.
func TestGenWebhookSecret(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 5 {
		out, advice, err := runCLI(t, nil, "gen-webhook-secret")
		if err != nil {
			t.Fatal(err)
		}
		s := strings.TrimSuffix(out, "\n")
		b64, ok := strings.CutPrefix(s, "whsec_")
		raw, derr := base64.StdEncoding.DecodeString(b64)
		if !ok || derr != nil || len(raw) != 32 || strings.Contains(s, "\n") {
			t.Fatalf("stdout %q: want exactly one line whsec_ + standard base64 of 32 bytes", out)
		}
		if seen[s] {
			t.Fatal("the same secret twice")
		}
		seen[s] = true
		if !strings.Contains(advice, "AQUIFER_WEBHOOK_SECRET") || strings.Contains(advice, b64) {
			t.Fatalf("advice on stderr: %q", advice)
		}
		// What it prints is accepted as the setting.
		if out, _, err := runCLI(t, map[string]string{"AQUIFER_DATA_DIR": t.TempDir(), "AQUIFER_WEBHOOK_SECRET": s}, "check-config"); err != nil || !strings.Contains(out, "v1 with 1 shared secret") {
			t.Fatalf("check-config with a generated secret: %q %v", out, err)
		}
	}
	if _, _, err := runCLI(t, nil, "gen-webhook-secret", "extra"); err == nil {
		t.Fatal("gen-webhook-secret took an argument")
	}
	_, help, _ := runCLI(t, nil, "-help")
	if !strings.Contains(help, "gen-webhook-secret") {
		t.Fatal("-help does not mention gen-webhook-secret")
	}
}

// TestCheckConfigNeverShowsWebhookSecrets: check-config counts secrets, and
// a bad one is an error naming the variable, never the value.
func TestCheckConfigNeverShowsWebhookSecrets(t *testing.T) {
	t.Parallel()
	a, _, _ := runCLI(t, nil, "gen-webhook-secret")
	b, _, _ := runCLI(t, nil, "gen-webhook-secret")
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	out, _, err := runCLI(t, map[string]string{"AQUIFER_DATA_DIR": t.TempDir(), "AQUIFER_WEBHOOK_SECRET": a + " " + b}, "check-config")
	if err != nil || !strings.Contains(out, "v1 with 2 shared secret(s)") {
		t.Fatalf("check-config: %q %v", out, err)
	}
	for _, s := range []string{a, b} {
		if strings.Contains(out, strings.TrimPrefix(s, "whsec_")) {
			t.Fatalf("check-config shows a secret: %q", out)
		}
	}
	out, _, _ = runCLI(t, map[string]string{"AQUIFER_DATA_DIR": t.TempDir()}, "check-config")
	if !strings.Contains(out, "no v1") {
		t.Fatalf("check-config without a secret: %q", out)
	}
	bad := strings.TrimPrefix(a, "whsec_")
	_, _, err = runCLI(t, map[string]string{"AQUIFER_DATA_DIR": t.TempDir(), "AQUIFER_WEBHOOK_SECRET": b + "," + bad}, "check-config")
	if err == nil || !strings.Contains(err.Error(), "AQUIFER_WEBHOOK_SECRET: secret 2 of 2 does not start with whsec_") {
		t.Fatalf("a bad secret: %v", err)
	}
	if strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), strings.TrimPrefix(b, "whsec_")) {
		t.Fatalf("the error shows a secret: %v", err)
	}
	// The daemon refuses to start with it, with the same message.
	if _, _, err := runCLI(t, map[string]string{"AQUIFER_DATA_DIR": t.TempDir(), "AQUIFER_WEBHOOK_SECRET": bad}); err == nil ||
		!strings.Contains(err.Error(), "AQUIFER_WEBHOOK_SECRET") || strings.Contains(err.Error(), bad) {
		t.Fatalf("start with a bad secret: %v", err)
	}
}
