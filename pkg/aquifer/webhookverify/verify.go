// Package webhookverify checks that a webhook delivery really comes from
// Aquifer: its signature verifies, it is recent, and it has not been
// accepted before.
//
// Aquifer signs every delivery the Standard Webhooks way (webhook-id,
// webhook-timestamp, webhook-signature) with two kinds of entry in the one
// signature header: "v1," (HMAC-SHA256 with a shared "whsec_" secret, when
// the operator configured one; what the official Standard Webhooks
// libraries verify) and "v1a," (Ed25519 with Aquifer's public key). For
// receivers that completed the L8 handshake it also adds the four X-L8-*
// headers. A Verifier may hold a public key, shared secrets, or both:
//
//	v, err := webhookverify.NewWithSecret(os.Getenv("AQUIFER_WEBHOOK_SECRET"), webhookverify.Options{})
//	// or: webhookverify.New(aquiferPublicKey, webhookverify.Options{Secrets: …})
//	…
//	func handle(w http.ResponseWriter, r *http.Request) {
//		body, d, err := v.VerifyRequest(r, 1<<20)
//		if err != nil {
//			http.Error(w, err.Error(), http.StatusUnauthorized)
//			return
//		}
//		… use body; d.ID is stable across retries of one result (Standard) …
//	}
//
// With a public key, a delivery carrying the L8 headers is checked by its
// L8 signature; otherwise (and always for a verifier without a key) by its
// Standard Webhooks signatures, any v1 entry matching any secret or the v1a
// entry matching the key.
package webhookverify

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/aquiferhq/aquifer/internal/l8"
)

// Errors returned by Verify; match them with errors.Is.
var (
	ErrUnsigned     = l8.ErrUnsigned     // neither header set is present
	ErrBadSignature = l8.ErrBadSignature // no signature verifies with the key or a secret
	ErrStale        = l8.ErrStale        // the timestamp is outside the tolerance
	ErrReplayed     = l8.ErrReplayed     // this exact delivery was already accepted
	ErrTooLarge     = errors.New("webhookverify: request body too large")
)

// Scheme says which header set a delivery was verified with.
type Scheme string

const (
	SchemeL8       Scheme = "l8"
	SchemeStandard Scheme = "standard-webhooks"
)

// Delivery describes a verified delivery.
type Delivery struct {
	Scheme Scheme
	// ID is X-L8-Delivery-Id (new on every attempt) for L8, webhook-id
	// ("msg_<job id>", the same on every retry of one result) for Standard
	// Webhooks. Deduplicate results on the job id in the body, or on the
	// Standard Webhooks id.
	ID string
	// Version is the Standard Webhooks signature that verified: "v1"
	// (shared secret) or "v1a" (public key); "" for L8.
	Version string
}

// Options tune the checks. The zero value is the recommended setting for a
// verifier with a public key only.
type Options struct {
	// Tolerance is how far a delivery's timestamp may be from now, either
	// way. Default 5 minutes.
	Tolerance time.Duration
	// MaxRemembered bounds the replay cache (deliveries accepted within
	// the tolerance window). Default 100,000; when it is full of live
	// entries new deliveries are refused with ErrReplayed until some age
	// out, rather than forgetting ones that could still be replayed.
	MaxRemembered int
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Secrets are shared secrets ("whsec_" + base64, as Aquifer's
	// AQUIFER_WEBHOOK_SECRET holds them) for v1 (HMAC-SHA256) signatures.
	// A delivery passes when any of its v1 signatures matches any of them,
	// so while Aquifer rotates its secret a receiver listing the old and
	// the new one accepts deliveries signed with either.
	Secrets []string
}

// Verifier checks deliveries against a public key, shared secrets, or
// both. It is safe for concurrent use.
type Verifier struct {
	pub     ed25519.PublicKey // nil: no v1a or L8
	secrets []l8.Secret
	opts    Options

	mu   sync.Mutex
	seen map[string]time.Time // delivery key → forget after
}

// New returns a verifier for Aquifer's public key, in either published
// form: standard base64 of the 32 bytes (l8_public_key) or "whpk_…"
// (standard_webhooks_public_key), and for the shared secrets in
// opts.Secrets, if any. publicKey may be "" when opts.Secrets is not empty:
// the verifier then checks v1 signatures only, as NewWithSecret.
func New(publicKey string, opts Options) (*Verifier, error) {
	v := &Verifier{seen: map[string]time.Time{}}
	if publicKey != "" {
		pub, err := l8.ParsePublicKey(publicKey)
		if err != nil {
			return nil, fmt.Errorf("webhookverify: %w", err)
		}
		v.pub = pub
	}
	var errs []error
	for i, s := range opts.Secrets {
		sec, err := l8.ParseSecret(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("webhookverify: Secrets[%d]: %w", i, err)) // never the value
			continue
		}
		v.secrets = append(v.secrets, sec)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if v.pub == nil && len(v.secrets) == 0 {
		return nil, errors.New("webhookverify: give Aquifer's public key, a shared secret (Options.Secrets), or both")
	}
	if opts.Tolerance <= 0 {
		opts.Tolerance = 5 * time.Minute
	}
	if opts.MaxRemembered <= 0 {
		opts.MaxRemembered = 100_000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	v.opts = opts
	return v, nil
}

// NewWithSecret returns a verifier of v1 signatures with the shared secret
// ("whsec_…", Aquifer's AQUIFER_WEBHOOK_SECRET or the tenant's
// webhook_secret) and any further ones in opts.Secrets: what the official
// Standard Webhooks libraries check, plus replay protection.
func NewWithSecret(secret string, opts Options) (*Verifier, error) {
	opts.Secrets = append([]string{secret}, opts.Secrets...)
	return New("", opts)
}

// Verify checks a delivery given its headers and exact body bytes. A
// delivery that verifies is remembered, and the same delivery presented
// again within the tolerance window fails with ErrReplayed. (A retry of a
// result is a new delivery with a new timestamp, and is accepted.)
func (v *Verifier) Verify(h http.Header, body []byte) (Delivery, error) {
	now := v.opts.Now()
	var d Delivery
	var key string
	if v.pub != nil && h.Get(l8.HeaderSignature) != "" {
		id, err := l8.VerifyL8(v.pub, h, body, now, v.opts.Tolerance)
		if err != nil {
			return Delivery{}, err
		}
		d, key = Delivery{Scheme: SchemeL8, ID: id}, "l8|"+id
	} else {
		id, version, err := l8.VerifyStandardWith(v.secrets, v.pub, h, body, now, v.opts.Tolerance)
		if err != nil {
			return Delivery{}, err
		}
		// The id repeats across retries; id and timestamp together name one
		// delivery.
		d, key = Delivery{Scheme: SchemeStandard, ID: id, Version: version}, "sw|"+id+"|"+h.Get(l8.HeaderWebhookTimestamp)
	}
	if !v.remember(key, now) {
		return Delivery{}, ErrReplayed
	}
	return d, nil
}

// VerifyRequest reads r's body (at most maxBytes; 0 means 1 MiB) and
// verifies it. It returns the body so the handler can use it.
func (v *Verifier) VerifyRequest(r *http.Request, maxBytes int64) ([]byte, Delivery, error) {
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBytes+1))
	if err != nil {
		return nil, Delivery{}, fmt.Errorf("webhookverify: reading body: %w", err)
	}
	if int64(len(body)) > maxBytes {
		return nil, Delivery{}, ErrTooLarge
	}
	d, err := v.Verify(r.Header, body)
	return body, d, err
}

// remember records key; false if it is already there (a replay) or the
// cache is full of entries that could still be replayed.
func (v *Verifier) remember(key string, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if exp, ok := v.seen[key]; ok && now.Before(exp) {
		return false
	}
	if len(v.seen) >= v.opts.MaxRemembered {
		for k, exp := range v.seen {
			if !now.Before(exp) {
				delete(v.seen, k)
			}
		}
		if len(v.seen) >= v.opts.MaxRemembered {
			return false
		}
	}
	// A timestamp may be up to Tolerance ahead of now and is accepted until
	// Tolerance after itself: remember for twice the tolerance.
	v.seen[key] = now.Add(2 * v.opts.Tolerance)
	return true
}
