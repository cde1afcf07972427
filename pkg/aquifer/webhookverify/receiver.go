package webhookverify

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aquiferhq/aquifer/internal/l8"
)

// Receiver makes a webhook receiver speak L8: it serves GET /.well-known/l8
// and POST /l8/challenge with the receiver's own key, so Aquifer completes
// the handshake and from then on adds the X-L8-* signature to every
// delivery. Without it deliveries still carry the Standard Webhooks
// signature, which Verify checks just as well.
type Receiver struct {
	id     *l8.Identity
	sender ed25519.PublicKey
	nonces *l8.Nonces
	now    func() time.Time
	name   string
}

// ReceiverOptions configure a Receiver.
type ReceiverOptions struct {
	// SenderKey is Aquifer's public key (either published form). When set,
	// challenges from any other key are refused with 403, so the endpoint
	// answers only the Aquifer you expect. Recommended.
	SenderKey string
	// ServiceName is announced in /.well-known/l8. Default "webhook-receiver".
	ServiceName string
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// NewReceiver returns a Receiver with the receiver's Ed25519 private key.
// Keep the key stable (store it): a new key means a new handshake.
func NewReceiver(privateKey ed25519.PrivateKey, opts ReceiverOptions) (*Receiver, error) {
	if err := l8.CheckPrivateKey(privateKey); err != nil {
		return nil, fmt.Errorf("webhookverify: the receiver key %w", err)
	}
	r := &Receiver{id: l8.NewIdentity(privateKey), nonces: l8.NewNonces(0), now: opts.Now, name: opts.ServiceName}
	if opts.SenderKey != "" {
		pub, err := l8.ParsePublicKey(opts.SenderKey)
		if err != nil {
			return nil, fmt.Errorf("webhookverify: sender key: %w", err)
		}
		r.sender = pub
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.name == "" {
		r.name = "webhook-receiver"
	}
	return r, nil
}

// PublicKey is the receiver's public key, standard base64.
func (r *Receiver) PublicKey() string { return r.id.PublicKeyBase64() }

// Mount registers GET /.well-known/l8 and POST /l8/challenge on mux.
func (r *Receiver) Mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /.well-known/l8", r.serveMetadata)
	mux.HandleFunc("POST /l8/challenge", r.serveChallenge)
}

func (r *Receiver) serveMetadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, l8.Metadata{
		ProtocolVersion: l8.ProtocolVersion, ServiceName: r.name, PublicKey: r.id.PublicKeyBase64(),
		ChallengeEndpoint: "/l8/challenge", SupportedAlgorithms: []string{"ed25519"},
		Capabilities: []string{"signed_payloads"}, StandardWebhooksKey: r.id.StandardWebhooksKey(),
	})
}

func (r *Receiver) serveChallenge(w http.ResponseWriter, req *http.Request) {
	var c l8.ChallengeRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 8<<10)).Decode(&c); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid json"})
		return
	}
	if r.sender != nil {
		if pub, err := l8.ParsePublicKey(c.SenderPublicKey); err != nil || !pub.Equal(r.sender) {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "unknown sender"})
			return
		}
	}
	resp, err := r.id.Answer(&c, r.now(), r.nonces)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
