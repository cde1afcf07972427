package l8

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// L8 delivery headers (BEHAVIOR.md §23.6).
const (
	HeaderDeliveryID = "X-L8-Delivery-Id"
	HeaderTimestamp  = "X-L8-Timestamp"
	HeaderKeyID      = "X-L8-Key-Id"
	HeaderSignature  = "X-L8-Signature"
)

// Standard Webhooks headers (https://www.standardwebhooks.com).
const (
	HeaderWebhookID        = "Webhook-Id"
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	HeaderWebhookSignature = "Webhook-Signature"
)

// DeliveryString is the exact string an L8 delivery signature covers:
// "{delivery_id}.{timestamp}.{base64(sha256(body))}".
func DeliveryString(deliveryID, timestamp string, body []byte) string {
	sum := sha256.Sum256(body)
	return deliveryID + "." + timestamp + "." + base64.StdEncoding.EncodeToString(sum[:])
}

// StandardString is the exact string a Standard Webhooks signature covers:
// "{webhook-id}.{webhook-timestamp}.{body}".
func StandardString(msgID, timestamp string, body []byte) []byte {
	b := make([]byte, 0, len(msgID)+len(timestamp)+2+len(body))
	b = append(b, msgID...)
	b = append(b, '.')
	b = append(b, timestamp...)
	b = append(b, '.')
	return append(b, body...)
}

// SignL8 sets the four L8 delivery headers on h for body: a new delivery id
// per attempt, the time, the key id and the signature.
func (id *Identity) SignL8(h http.Header, body []byte, now time.Time) {
	deliveryID, ts := NewUUID(), strconv.FormatInt(now.Unix(), 10)
	sig := id.sign([]byte(DeliveryString(deliveryID, ts, body)))
	h.Set(HeaderDeliveryID, deliveryID)
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderKeyID, id.KeyID())
	h.Set(HeaderSignature, base64.StdEncoding.EncodeToString(sig))
}

// SignStandard sets the Standard Webhooks headers on h for body, with
// msgID as webhook-id (stable across retries of one message) and an
// asymmetric v1a signature.
func (id *Identity) SignStandard(h http.Header, msgID string, body []byte, now time.Time) {
	SignStandardHeaders(h, msgID, body, now, nil, id)
}

// Signature versions in webhook-signature.
const (
	VersionHMAC       = "v1"  // HMAC-SHA256 with a shared secret
	VersionAsymmetric = "v1a" // Ed25519 with Aquifer's identity
)

// SignStandardHeaders sets the Standard Webhooks headers on h for body:
// webhook-id msgID (stable across retries of one message), the time, and
// webhook-signature listing one "v1,<sig>" per secret, then "v1a,<sig>"
// when id is not nil, all over the same id, timestamp and body. A secret
// without a key (see Secret.Check) signs nothing. With neither a secret
// nor id it sets nothing and returns false.
func SignStandardHeaders(h http.Header, msgID string, body []byte, now time.Time, secrets []Secret, id *Identity) bool {
	n := 0
	for _, s := range secrets {
		if s.signs() {
			n++
		}
	}
	if id != nil {
		n++
	}
	if n == 0 {
		return false
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	signed := StandardString(msgID, ts, body)
	// The header value is built in one buffer: "v1,<b64>" per secret, then
	// "v1a,<b64>", space-separated (every delivery is signed, so its
	// allocations count).
	const macLen, sigLen = sha256.Size, ed25519.SignatureSize
	sig := make([]byte, 0, n*(len(VersionAsymmetric)+2+base64.StdEncoding.EncodedLen(max(macLen, sigLen))))
	entry := func(version string, raw []byte) {
		if len(sig) > 0 {
			sig = append(sig, ' ')
		}
		sig = append(sig, version...)
		sig = append(sig, ',')
		sig = base64.StdEncoding.AppendEncode(sig, raw)
	}
	for _, s := range secrets {
		if s.signs() {
			entry(VersionHMAC, s.mac(signed))
		}
	}
	if id != nil {
		entry(VersionAsymmetric, id.sign(signed))
	}
	vals := make([]string, 3) // one backing array for the three headers' values
	vals[0], vals[1], vals[2] = msgID, ts, string(sig)
	h[HeaderWebhookID] = vals[0:1:1]
	h[HeaderWebhookTimestamp] = vals[1:2:2]
	h[HeaderWebhookSignature] = vals[2:3:3]
	return true
}

// ParsePublicKey accepts a public key in either published form: L8's
// standard base64 of the 32 bytes, or Standard Webhooks' "whpk_" + base64.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	return decodePublicKey(strings.TrimPrefix(strings.TrimSpace(s), "whpk_"))
}

// Verification errors.
var (
	ErrUnsigned     = errors.New("l8: the delivery carries no signature")
	ErrBadSignature = errors.New("l8: the signature does not verify")
	ErrStale        = errors.New("l8: the delivery's timestamp is outside the allowed window")
	ErrReplayed     = errors.New("l8: this delivery was already accepted")
)

// VerifyL8 checks the L8 headers of a delivery against pub. It does not
// check replays: see the webhookverify package for the full check.
func VerifyL8(pub ed25519.PublicKey, h http.Header, body []byte, now time.Time, window time.Duration) (deliveryID string, err error) {
	deliveryID, ts, sigB64 := h.Get(HeaderDeliveryID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if deliveryID == "" || ts == "" || sigB64 == "" {
		return "", ErrUnsigned
	}
	if err := checkTimestamp(ts, now, window); err != nil {
		return "", err
	}
	sig, err := base64.StdEncoding.DecodeString(sigB64)
	if err != nil || len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, []byte(DeliveryString(deliveryID, ts, body)), sig) {
		return "", ErrBadSignature
	}
	return deliveryID, nil
}

// VerifyStandard checks the Standard Webhooks headers of a delivery against
// pub: any v1a entry of the space-separated signature list may match.
func VerifyStandard(pub ed25519.PublicKey, h http.Header, body []byte, now time.Time, window time.Duration) (msgID string, err error) {
	msgID, _, err = VerifyStandardWith(nil, pub, h, body, now, window)
	return msgID, err
}

// VerifyStandardWith checks the Standard Webhooks headers of a delivery:
// a v1 entry of the signature list that matches any of secrets (compared
// in constant time), or a v1a entry that verifies with pub (when not nil).
// It returns the webhook-id and the version that matched.
func VerifyStandardWith(secrets []Secret, pub ed25519.PublicKey, h http.Header, body []byte, now time.Time, window time.Duration) (msgID, version string, err error) {
	msgID, ts, sigs := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp), h.Get(HeaderWebhookSignature)
	if msgID == "" || ts == "" || sigs == "" {
		return "", "", ErrUnsigned
	}
	if err := checkTimestamp(ts, now, window); err != nil {
		return "", "", err
	}
	signed := StandardString(msgID, ts, body)
	macs := make([][]byte, 0, len(secrets))
	for _, s := range secrets {
		if s.signs() {
			macs = append(macs, s.mac(signed))
		}
	}
	for _, entry := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(entry, ",")
		if !ok {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		switch {
		case version == VersionHMAC:
			for _, m := range macs {
				if hmac.Equal(sig, m) {
					return msgID, version, nil
				}
			}
		case version == VersionAsymmetric && pub != nil:
			if len(sig) == ed25519.SignatureSize && ed25519.Verify(pub, signed, sig) {
				return msgID, version, nil
			}
		}
	}
	return "", "", ErrBadSignature
}

func checkTimestamp(ts string, now time.Time, window time.Duration) error {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrStale
	}
	if d := now.Sub(time.Unix(sec, 0)); d > window || d < -window {
		return ErrStale
	}
	return nil
}
