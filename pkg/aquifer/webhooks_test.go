package aquifer_test

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
	"github.com/aquiferhq/aquifer/pkg/aquifer/webhookverify"
)

func TestNewWebhookSecret(t *testing.T) {
	t.Parallel()
	a, err := aquifer.NewWebhookSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := aquifer.NewWebhookSecret()
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, "whsec_"))
	if !strings.HasPrefix(a, "whsec_") || err != nil || len(raw) != 32 || a == b {
		t.Fatalf("%q, %q: want two different whsec_ + base64 of 32 bytes", a, b)
	}
}

// TestNewReportsEveryBadWebhookSecret: each bad secret, global or a
// tenant's, is reported with where it is, and never with its value.
func TestNewReportsEveryBadWebhookSecret(t *testing.T) {
	t.Parallel()
	good, _ := aquifer.NewWebhookSecret()
	noPrefix := strings.TrimPrefix(good, "whsec_")
	_, err := aquifer.New(aquifer.Options{
		Store:          aquifer.NewMemoryStore(),
		WebhookSecrets: aquifer.WebhookSecrets(good, noPrefix),
		Tenants:        []aquifer.Tenant{{Name: "a", WebhookSecrets: aquifer.WebhookSecrets("whsec_dG9vIHNob3J0")}},
	})
	if err == nil {
		t.Fatal("New accepted bad webhook secrets")
	}
	for _, want := range []string{"WebhookSecrets[1]: a webhook secret starts with whsec_", "Tenants[0].WebhookSecrets[0]: a webhook secret decodes to 24 to 64 bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), noPrefix) || strings.Contains(err.Error(), "dG9vIHNob3J0") {
		t.Errorf("the error shows a secret: %v", err)
	}
}

// TestWebhookSecretsSignWithoutL8 runs a job through the facade with a
// shared secret and no L8 key: its delivery verifies with the secret.
func TestWebhookSecretsSignWithoutL8(t *testing.T) {
	t.Parallel()
	secret, _ := aquifer.NewWebhookSecret()
	got := make(chan *http.Request, 1)
	bodies := make(chan []byte, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
	}))
	defer hook.Close()
	dest := echo(t)
	aq := start(t, aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true, WebhookSecrets: aquifer.WebhookSecrets(secret)})
	if _, err := aq.Enqueue(t.Context(), &aquifer.JobRequest{UserID: "u", IdempotentKey: "k", URL: dest.URL + "/x",
		WebhookURL: hook.URL + "/hook"}); err != nil {
		t.Fatal(err)
	}
	v, err := webhookverify.NewWithSecret(secret, webhookverify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if d, err := v.Verify(r.Header, <-bodies); err != nil || d.Version != "v1" {
			t.Fatalf("delivery: %+v %v (headers %v)", d, err, r.Header)
		}
		if sig := r.Header.Get("webhook-signature"); strings.Contains(sig, "v1a,") {
			t.Fatalf("a v1a signature without an L8 key: %q", sig)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery")
	}
}
