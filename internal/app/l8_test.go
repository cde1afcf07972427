package app_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/pkg/aquifer/webhookverify"
)

// l8Receiver is an in-test webhook receiver that speaks L8 (or not): it
// serves discovery and the challenge endpoint with its own identity, and
// records deliveries.
type l8Receiver struct {
	*upstream
	id *l8.Identity
	// answerWith, when set, signs challenge answers with another key (a
	// receiver that cannot prove ownership of the key it publishes).
	answerWith *l8.Identity
	speaksL8   bool
	nonces     *l8.Nonces

	mu         sync.Mutex
	discovery  int
	challenges int
}

func newL8Receiver(t *testing.T, speaksL8 bool) *l8Receiver {
	t.Helper()
	rc := &l8Receiver{id: newTestIdentity(t), speaksL8: speaksL8, nonces: l8.NewNonces(0)}
	clock := clockOf(t)
	rc.upstream = newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.URL.Path {
		case "/.well-known/l8":
			rc.mu.Lock()
			rc.discovery++
			rc.mu.Unlock()
			if !rc.speaksL8 {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(rc.id.Metadata())
		case "/l8/challenge":
			rc.mu.Lock()
			rc.challenges++
			rc.mu.Unlock()
			var c l8.ChallengeRequest
			if err := json.NewDecoder(strings.NewReader(rc.snapshot()[n-1].body)).Decode(&c); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			signer := rc.id
			if rc.answerWith != nil {
				signer = rc.answerWith
			}
			resp, err := signer.Answer(&c, clock.now(), rc.nonces)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(resp)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	return rc
}

func (rc *l8Receiver) counts() (discovery, challenges int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.discovery, rc.challenges
}

// deliveries are the webhook requests received, in order.
func (rc *l8Receiver) deliveries() []hit {
	var out []hit
	for _, h := range rc.snapshot() {
		if h.path == "/hook" {
			out = append(out, h)
		}
	}
	return out
}

func newTestIdentity(t *testing.T) *l8.Identity {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return l8.NewIdentity(priv)
}

// deliverOne runs one job whose result goes to the receiver's /hook and
// waits for the delivery.
func deliverOne(t *testing.T, b *bundle, target *upstream, rc *l8Receiver, key string) hit {
	t.Helper()
	before := len(rc.deliveries())
	r := req(key, target.URL+"/work")
	r.WebhookURL = rc.URL + "/hook"
	b.enqueue(t, r)
	waitFor(t, "the webhook delivery", func() bool { return len(rc.deliveries()) > before })
	return rc.deliveries()[before]
}

// verifyStandardByHand checks a Standard Webhooks asymmetric signature the
// way the spec describes it, independently of package l8: the key is
// "whpk_" + base64 of the Ed25519 public key, the signed content is
// "{webhook-id}.{webhook-timestamp}.{body}", and webhook-signature is a
// space-separated list of "v1a,<base64 signature>".
func verifyStandardByHand(t *testing.T, whpk string, h hit) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(whpk, "whpk_"))
	if err != nil || len(raw) != ed25519.PublicKeySize || !strings.HasPrefix(whpk, "whpk_") {
		t.Fatalf("published key %q is not whpk_<base64 32 bytes>", whpk)
	}
	id, ts := h.headers.Get("webhook-id"), h.headers.Get("webhook-timestamp")
	if id == "" || ts == "" {
		t.Fatalf("delivery lacks webhook-id/webhook-timestamp: %v", h.headers)
	}
	content := []byte(id + "." + ts + "." + h.body)
	for _, part := range strings.Split(h.headers.Get("webhook-signature"), " ") {
		v, sig, _ := strings.Cut(part, ",")
		if v != "v1a" {
			continue
		}
		s, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && ed25519.Verify(ed25519.PublicKey(raw), content, s) {
			return
		}
	}
	t.Fatalf("no v1a signature in %q verifies", h.headers.Get("webhook-signature"))
}

func TestL8HandshakeSignsDeliveries(t *testing.T) {
	aq := newTestIdentity(t)
	trustDir := filepath.Join(t.TempDir(), "l8-trust")
	trust, err := l8.NewFileTrust(trustDir)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *app.Config) { c.L8 = app.L8Config{Identity: aq, Trust: trust} })
	target := newUpstream(t, nil)
	rc := newL8Receiver(t, true)

	meta := b.svc.L8Metadata()
	v, err := webhookverify.New(meta.PublicKey, webhookverify.Options{Now: clockOf(t).now})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		h := deliverOne(t, b, target, rc, "k"+string(rune('a'+i)))
		hdr := h.headers.Clone()
		d, err := v.Verify(hdr, []byte(h.body))
		if err != nil || d.Scheme != webhookverify.SchemeL8 {
			t.Fatalf("delivery %d: %v (scheme %q), want a verified L8 signature; headers %v", i, err, d.Scheme, h.headers)
		}
		if kid := h.headers.Get("X-L8-Key-Id"); kid != aq.KeyID() {
			t.Fatalf("X-L8-Key-Id %q, want %q", kid, aq.KeyID())
		}
		// The Standard Webhooks set verifies on its own too.
		hdr.Del("X-L8-Signature")
		if d, err := v.Verify(hdr, []byte(h.body)); err != nil || d.Scheme != webhookverify.SchemeStandard {
			t.Fatalf("delivery %d Standard Webhooks signature: %v", i, err)
		}
		verifyStandardByHand(t, meta.StandardWebhooksKey, h)
		// A tampered body fails both.
		if _, err := v.Verify(h.headers, []byte(h.body+" ")); err == nil {
			t.Fatal("a tampered body verified")
		}
	}
	if d, c := rc.counts(); d != 1 || c != 1 {
		t.Fatalf("discovery %d, challenges %d for three deliveries; want one handshake", d, c)
	}
	file := filepath.Join(trustDir, "http_"+strings.ReplaceAll(strings.TrimPrefix(rc.URL, "http://"), ":", "_")+".json")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatalf("trust file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("trust file mode %v, want 0600", fi.Mode().Perm())
	}

	// Revocation: deleting the file makes the next delivery handshake again.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	h := deliverOne(t, b, target, rc, "after-revoke")
	if d, c := rc.counts(); d != 2 || c != 2 {
		t.Fatalf("after revocation: discovery %d, challenges %d; want a second handshake", d, c)
	}
	if h.headers.Get("X-L8-Signature") == "" {
		t.Fatal("the delivery after the new handshake is unsigned")
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("trust file not rewritten after the new handshake: %v", err)
	}
}

func TestL8ReceiverWithoutL8GetsUnsignedDeliveries(t *testing.T) {
	aq := newTestIdentity(t)
	const missTTL = 10 * time.Minute // the default
	b := setup(t, func(c *app.Config) { c.L8 = app.L8Config{Identity: aq} })
	target := newUpstream(t, nil)
	rc := newL8Receiver(t, false)

	for i := range 4 {
		h := deliverOne(t, b, target, rc, "n"+string(rune('a'+i)))
		if h.headers.Get("X-L8-Signature") != "" || h.headers.Get("X-L8-Delivery-Id") != "" {
			t.Fatalf("delivery %d to a receiver without L8 carries L8 headers", i)
		}
		verifyStandardByHand(t, aq.StandardWebhooksKey(), h) // Standard Webhooks always
		elapse(t, 2*time.Minute)
	}
	discoveries := func() []time.Time {
		var at []time.Time
		for _, h := range rc.snapshot() {
			if h.path == "/.well-known/l8" {
				at = append(at, h.at)
			}
		}
		return at
	}
	if d := discoveries(); len(d) != 1 {
		t.Fatalf("%d discovery requests within one miss window, want 1", len(d))
	}
	// Still within the window (a delivery takes a millisecond or two of the
	// clock's time, for its job's pacing slot): no new discovery…
	missed := discoveries()[0]
	clockOf(t).drv.To(missed.Add(missTTL - 100*time.Millisecond))
	deliverOne(t, b, target, rc, "in-window")
	if d := discoveries(); len(d) != 1 {
		t.Fatalf("discovery again %v after the miss, within the %v window", d[1].Sub(missed), missTTL)
	}
	// …and once it is over, the next delivery asks again.
	clockOf(t).drv.To(missed.Add(missTTL))
	deliverOne(t, b, target, rc, "after-window")
	if d, c := rc.counts(); d != 2 || c != 0 {
		t.Fatalf("after the miss window: discovery %d, challenges %d; want 2 and 0", d, c)
	}
	if again := discoveries()[1].Sub(missed); again < missTTL {
		t.Fatalf("asked again %v after the miss, within the %v window", again, missTTL)
	}
}

func TestL8FailedOwnershipProofLeavesDeliveriesUnsigned(t *testing.T) {
	aq := newTestIdentity(t)
	trust, err := l8.NewFileTrust(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *app.Config) { c.L8 = app.L8Config{Identity: aq, Trust: trust} })
	target := newUpstream(t, nil)
	rc := newL8Receiver(t, true)
	rc.answerWith = newTestIdentity(t) // publishes one key, answers with another

	h := deliverOne(t, b, target, rc, "impostor")
	if h.headers.Get("X-L8-Signature") != "" {
		t.Fatal("a receiver that failed the ownership proof got a signed delivery")
	}
	if d, c := rc.counts(); d != 1 || c != 1 {
		t.Fatalf("discovery %d, challenges %d; want one attempt", d, c)
	}
	if _, err := trust.Get(strings.TrimSuffix(rc.URL, "/")); err == nil {
		t.Fatal("trust was stored for a receiver that failed the proof")
	}
	deliverOne(t, b, target, rc, "impostor-2")
	if d, _ := rc.counts(); d != 1 {
		t.Fatalf("the failed receiver was probed again within the miss window (%d discoveries)", d)
	}
}

func TestL8ChallengeEndpointMustStayOnTheReceiver(t *testing.T) {
	aq := newTestIdentity(t)
	b := setup(t, func(c *app.Config) { c.L8 = app.L8Config{Identity: aq} })
	target := newUpstream(t, nil)
	other := newL8Receiver(t, true)
	rc := newL8Receiver(t, true)
	// Discovery points the challenge at another host.
	rc.handle = func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/.well-known/l8" {
			m := rc.id.Metadata()
			m.ChallengeEndpoint = other.URL + "/l8/challenge"
			_ = json.NewEncoder(w).Encode(m)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
	h := deliverOne(t, b, target, rc, "redirected")
	if h.headers.Get("X-L8-Signature") != "" {
		t.Fatal("signed after a challenge endpoint on another host")
	}
	if _, c := other.counts(); c != 0 {
		t.Fatal("Aquifer sent a challenge to a host other than the receiver")
	}
}

func TestForwardDispatchesAreNotSigned(t *testing.T) {
	aq := newTestIdentity(t)
	b := setup(t, func(c *app.Config) { c.L8 = app.L8Config{Identity: aq} })
	target := newUpstream(t, nil)
	id := b.enqueue(t, req("plain", target.URL+"/work"))
	b.waitStatus(t, id, "completed")
	for _, h := range target.snapshot() {
		if h.headers.Get("webhook-signature") != "" || h.headers.Get("X-L8-Signature") != "" {
			t.Fatalf("a forward dispatch carries webhook signatures: %v", h.headers)
		}
	}
}
