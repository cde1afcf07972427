package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/pkg/aquifer/webhookverify"
)

// testSecret makes a new shared secret, in its published and parsed forms.
func testSecret(t *testing.T) (string, l8.Secret) {
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

// verifiesWith reports whether h's delivery verifies with a verifier of
// only the shared secret s (a new verifier each time: no replay memory),
// as the receiver would when it arrived.
func verifiesWith(t *testing.T, s string, h hit) bool {
	t.Helper()
	v, err := webhookverify.NewWithSecret(s, atArrival(h))
	if err != nil {
		t.Fatal(err)
	}
	d, err := v.Verify(h.headers, []byte(h.body))
	if err == nil && (d.Version != "v1" || !strings.HasPrefix(d.ID, "msg_")) {
		t.Fatalf("verified delivery %+v", d)
	}
	return err == nil
}

// atArrival verifies deliveries as of when h arrived (on the test's clock).
func atArrival(h hit) webhookverify.Options {
	return webhookverify.Options{Now: func() time.Time { return h.at }}
}

func signatureVersions(h hit) []string {
	var out []string
	for _, e := range strings.Fields(h.headers.Get("webhook-signature")) {
		v, _, _ := strings.Cut(e, ",")
		out = append(out, v)
	}
	return out
}

// TestWebhookSecretSignsWithoutL8: a shared secret alone (no L8 identity)
// signs every delivery with one v1 entry; there is no v1a, no L8 and no
// handshake.
func TestWebhookSecretSignsWithoutL8(t *testing.T) {
	s, sec := testSecret(t)
	other, _ := testSecret(t)
	b := setup(t, func(c *app.Config) { c.WebhookSecrets = []l8.Secret{sec} })
	target := newUpstream(t, nil)
	rc := newL8Receiver(t, true) // would answer a handshake, if one came

	for _, key := range []string{"a", "b"} {
		h := deliverOne(t, b, target, rc, key)
		if got := strings.Join(signatureVersions(h), " "); got != "v1" {
			t.Fatalf("signature entries %q, want one v1", got)
		}
		if !verifiesWith(t, s, h) {
			t.Fatalf("the delivery does not verify with the secret: %v", h.headers)
		}
		if verifiesWith(t, other, h) {
			t.Fatal("the delivery verifies with another secret")
		}
		if h.headers.Get("X-L8-Signature") != "" {
			t.Fatal("L8 headers without an L8 identity")
		}
	}
	if d, c := rc.counts(); d != 0 || c != 0 {
		t.Fatalf("discovery %d, challenges %d without an L8 identity; want none", d, c)
	}
}

// TestWebhookSecretsBesideL8: with rotation secrets and an identity, one
// header carries a v1 entry per secret and the v1a entry, and the delivery
// verifies with either secret alone or with the key alone.
func TestWebhookSecretsBesideL8(t *testing.T) {
	oldS, oldSec := testSecret(t)
	newS, newSec := testSecret(t)
	aq := newTestIdentity(t)
	b := setup(t, func(c *app.Config) {
		c.WebhookSecrets = []l8.Secret{oldSec, newSec}
		c.L8 = app.L8Config{Identity: aq, MissTTL: time.Hour}
	})
	target := newUpstream(t, nil)
	rc := newL8Receiver(t, false)

	h := deliverOne(t, b, target, rc, "rot")
	if got := strings.Join(signatureVersions(h), " "); got != "v1 v1 v1a" {
		t.Fatalf("signature entries %q, want v1 v1 v1a", got)
	}
	if !verifiesWith(t, oldS, h) || !verifiesWith(t, newS, h) {
		t.Fatal("a rotation delivery does not verify with each secret alone")
	}
	verifyStandardByHand(t, aq.StandardWebhooksKey(), h)
	byKey, err := webhookverify.New(aq.PublicKeyBase64(), atArrival(h))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := byKey.Verify(h.headers, []byte(h.body)); err != nil || d.Version != "v1a" {
		t.Fatalf("by key: %+v %v", d, err)
	}
	// The log says what happens to a receiver without L8: it still gets
	// signed deliveries.
	said := false
	for _, e := range b.logs.All() {
		if strings.Contains(e.Message, "does not speak L8") {
			said = e.Message == "webhook receiver does not speak L8; deliveries carry Standard Webhooks signatures only"
		}
	}
	if !said {
		t.Error("no true log line about the receiver without L8")
	}
}

// TestTenantWebhookSecrets: a tenant with its own secret has its deliveries
// signed with it instead of the global one; a tenant without, and jobs of
// no tenant, get the global one.
func TestTenantWebhookSecrets(t *testing.T) {
	globalS, globalSec := testSecret(t)
	alphaS, alphaSec := testSecret(t)
	b := setup(t, func(c *app.Config) {
		c.WebhookSecrets = []l8.Secret{globalSec}
		c.Tenants = []app.Tenant{{Name: "alpha", WebhookSecrets: []l8.Secret{alphaSec}}, {Name: "bravo"}}
	})
	target := newUpstream(t, nil)
	hooks := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusNoContent) })
	for _, who := range []string{"alpha", "bravo", ""} {
		ctx := context.Background()
		if who != "" {
			ctx = app.WithTenant(ctx, who)
		}
		r := req("k-"+who, target.URL+"/work")
		r.WebhookURL = hooks.URL + "/" + cmpOr(who, "none")
		if _, err := b.svc.Enqueue(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "three deliveries", func() bool { return hooks.count() == 3 })
	byPath := map[string]hit{}
	for _, h := range hooks.snapshot() {
		byPath[h.path] = h
	}
	for path, want := range map[string]struct{ good, bad string }{
		"/alpha": {alphaS, globalS}, "/bravo": {globalS, alphaS}, "/none": {globalS, alphaS},
	} {
		h, ok := byPath[path]
		if !ok {
			t.Fatalf("no delivery to %s", path)
		}
		if len(signatureVersions(h)) != 1 || !verifiesWith(t, want.good, h) || verifiesWith(t, want.bad, h) {
			t.Errorf("%s: %q does not verify with exactly its own secret", path, h.headers.Get("webhook-signature"))
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestDrainPagesCarryTheGlobalSecret: drain pages are signed like webhooks,
// with the global secrets, also without an L8 identity.
func TestDrainPagesCarryTheGlobalSecret(t *testing.T) {
	s, sec := testSecret(t)
	target := newUpstream(t, nil)
	receiver := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusNoContent) })
	b := setup(t, func(c *app.Config) {
		c.WebhookSecrets = []l8.Secret{sec}
		c.Drain = app.DrainConfig{Enabled: true, WebhookURL: receiver.URL + "/drain", Idle: 100 * time.Millisecond,
			Tick: 20 * time.Millisecond, PageSize: 10, RetryMin: 30 * time.Millisecond}
	})
	id := b.enqueue(t, req("d", target.URL+"/x"))
	b.waitStatus(t, id, domain.StatusCompleted)
	waitFor(t, "the drain page", func() bool { return receiver.count() > 0 })
	page := receiver.snapshot()[0]
	var p app.DrainPayload
	if err := json.Unmarshal([]byte(page.body), &p); err != nil || p.Event != "instance_idle" {
		t.Fatalf("drain page %q: %v", page.body, err)
	}
	if !verifiesWith(t, s, page) || strings.Join(signatureVersions(page), " ") != "v1" {
		t.Fatalf("the drain page is not v1-signed with the global secret: %v", page.headers)
	}
}

func TestZeroWebhookSecretIsRefused(t *testing.T) {
	for name, mutate := range map[string]func(*app.Config){
		"global": func(c *app.Config) { c.WebhookSecrets = []l8.Secret{{}} },
		"tenant": func(c *app.Config) { c.Tenants = []app.Tenant{{Name: "a", WebhookSecrets: []l8.Secret{{}}}} },
	} {
		cfg := app.Config{Store: memory.New(nil), Doer: &http.Client{}}
		mutate(&cfg)
		if _, err := app.New(cfg); err == nil || !strings.Contains(err.Error(), "WebhookSecrets[0] is empty") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
