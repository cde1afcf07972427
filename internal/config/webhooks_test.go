package config_test

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/config"
	"github.com/aquiferhq/aquifer/internal/l8"
)

func secretOf(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// sameSecrets reports whether got are the secrets whose published forms are
// want, in order.
func sameSecrets(got []l8.Secret, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i, w := range want {
		sec, err := l8.ParseSecret(w)
		if err != nil || !got[i].Equal(sec) {
			return false
		}
	}
	return true
}

func TestWebhookSecret(t *testing.T) {
	t.Parallel()
	a, b, long := secretOf(t, 32), secretOf(t, 24), secretOf(t, 64)
	for name, c := range map[string]struct {
		env  map[string]string
		want []string
	}{
		"unset":          {map[string]string{}, nil},
		"one":            {map[string]string{"AQUIFER_WEBHOOK_SECRET": a}, []string{a}},
		"spaces":         {map[string]string{"AQUIFER_WEBHOOK_SECRET": a + " " + b}, []string{a, b}},
		"commas":         {map[string]string{"AQUIFER_WEBHOOK_SECRET": " " + a + ", " + b + ","}, []string{a, b}},
		"yaml list":      {map[string]string{"CONFIG_PATH": writeYAML(t, "webhooks:\n  secret:\n    - "+a+"\n    - "+b+"\n")}, []string{a, b}},
		"yaml one":       {map[string]string{"CONFIG_PATH": writeYAML(t, "webhooks:\n  secret: "+a+"\n")}, []string{a}},
		"env wins":       {map[string]string{"CONFIG_PATH": writeYAML(t, "webhooks:\n  secret: "+a+"\n"), "AQUIFER_WEBHOOK_SECRET": b}, []string{b}},
		"64 bytes is ok": {map[string]string{"AQUIFER_WEBHOOK_SECRET": long}, []string{long}},
	} {
		cfg := mustLoad(t, envOf(c.env))
		if !sameSecrets(cfg.WebhookSecrets, c.want) {
			t.Errorf("%s: got %d secrets, want %d", name, len(cfg.WebhookSecrets), len(c.want))
		}
	}
}

// TestWebhookSecretErrors: a bad secret is an error naming the variable
// (or YAML key) and which entry is wrong, and never shows a secret.
func TestWebhookSecretErrors(t *testing.T) {
	t.Parallel()
	good := secretOf(t, 32)
	raw := strings.TrimPrefix(good, "whsec_")
	short := secretOf(t, 16)
	for name, c := range map[string]struct {
		env  map[string]string
		want []string
	}{
		"no prefix":     {map[string]string{"AQUIFER_WEBHOOK_SECRET": raw}, []string{"AQUIFER_WEBHOOK_SECRET: the secret does not start with whsec_"}},
		"short":         {map[string]string{"AQUIFER_WEBHOOK_SECRET": short}, []string{"AQUIFER_WEBHOOK_SECRET: the secret decodes to 16 bytes"}},
		"not base64":    {map[string]string{"AQUIFER_WEBHOOK_SECRET": "whsec_" + raw[:len(raw)-1]}, []string{"not whsec_ followed by standard base64"}},
		"second of two": {map[string]string{"AQUIFER_WEBHOOK_SECRET": good + "," + raw}, []string{"secret 2 of 2 does not start with whsec_"}},
		"both bad":      {map[string]string{"AQUIFER_WEBHOOK_SECRET": raw + " " + short}, []string{"secret 1 of 2", "secret 2 of 2 decodes to 16"}},
		"yaml":          {map[string]string{"CONFIG_PATH": writeYAML(t, "webhooks:\n  secret: "+raw+"\n")}, []string{"YAML key webhooks.secret: the secret does not start with whsec_"}},
	} {
		_, err := config.Load(envOf(c.env))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to say %q", name, err, w)
			}
		}
		for _, secret := range []string{raw, raw[:len(raw)-1], strings.TrimPrefix(short, "whsec_")} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the error shows a secret: %v", name, err)
			}
		}
	}
}

func TestTenantWebhookSecret(t *testing.T) {
	t.Parallel()
	a, b, c := secretOf(t, 32), secretOf(t, 32), secretOf(t, 32)
	path := writeYAML(t, `tenants:
  - name: alpha
    key_sha256: `+config.HashKey("ka")+`
    webhook_secret: `+a+`
  - name: bravo
    key_sha256: `+config.HashKey("kb")+`
    webhook_secret:
      - `+b+`
      - `+c+`
  - name: charlie
    key_sha256: `+config.HashKey("kc")+`
`)
	cfg := mustLoad(t, envOf(map[string]string{"CONFIG_PATH": path}))
	if len(cfg.Tenants) != 3 || !sameSecrets(cfg.Tenants[0].WebhookSecrets, []string{a}) ||
		!sameSecrets(cfg.Tenants[1].WebhookSecrets, []string{b, c}) || cfg.Tenants[2].WebhookSecrets != nil {
		t.Fatalf("tenant secrets not as configured (%d tenants)", len(cfg.Tenants))
	}

	raw := strings.TrimPrefix(a, "whsec_")
	for name, y := range map[string]struct{ yaml, want string }{
		"bad one":     {"    webhook_secret: " + raw + "\n", "YAML key tenants[0].webhook_secret: the secret does not start with whsec_"},
		"bad in list": {"    webhook_secret: [" + a + ", " + raw + "]\n", "YAML key tenants[0].webhook_secret: secret 2 of 2"},
		"empty list":  {"    webhook_secret: []\n", "tenants[0].webhook_secret: is empty"},
		"a map":       {"    webhook_secret: {a: b}\n", "tenants[0].webhook_secret: must be a whsec_ secret or a list"},
	} {
		_, err := config.Load(envOf(map[string]string{"CONFIG_PATH": writeYAML(t, "tenants:\n  - name: alpha\n    key_sha256: "+config.HashKey("ka")+"\n"+y.yaml)}))
		if err == nil || !strings.Contains(err.Error(), y.want) {
			t.Errorf("%s: %v, want it to say %q", name, err, y.want)
		}
		if err != nil && strings.Contains(err.Error(), raw) {
			t.Errorf("%s: the error shows a secret: %v", name, err)
		}
	}
}
