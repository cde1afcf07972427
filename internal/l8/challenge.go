package l8

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"sync"
	"time"
)

// ChallengeWindow is how far a challenge's timestamp may be from now, either
// way.
const ChallengeWindow = 5 * time.Minute

// ChallengeRequest is what a sender POSTs to a receiver's challenge endpoint
// to prove it holds its key, and asks the receiver to prove the same.
type ChallengeRequest struct {
	ChallengeID     string `json:"challenge_id"`
	Nonce           string `json:"nonce"`
	Timestamp       int64  `json:"timestamp"` // Unix seconds
	SenderPublicKey string `json:"sender_public_key"`
	Signature       string `json:"signature"` // over challenge_id + ":" + nonce
}

// ChallengeResponse is the receiver's proof.
type ChallengeResponse struct {
	ChallengeID       string `json:"challenge_id"`
	Nonce             string `json:"nonce"`
	ReceiverSignature string `json:"receiver_signature"`
	ReceiverPublicKey string `json:"receiver_public_key"`
}

// ChallengeError is a rejected challenge; Message is for the caller.
type ChallengeError struct{ Message string }

func (e *ChallengeError) Error() string { return e.Message }

func challengeMessage(challengeID, nonce string) []byte { return []byte(challengeID + ":" + nonce) }

// NewChallenge builds a challenge from this identity, with fresh random
// UUIDs.
func (id *Identity) NewChallenge(now time.Time) *ChallengeRequest {
	c := &ChallengeRequest{ChallengeID: NewUUID(), Nonce: NewUUID(), Timestamp: now.Unix(), SenderPublicKey: id.PublicKeyBase64()}
	c.Signature = base64.StdEncoding.EncodeToString(id.sign(challengeMessage(c.ChallengeID, c.Nonce)))
	return c
}

// VerifyResponse checks a receiver's answer to c: it echoes c, names the key
// the receiver published (wantKey, standard base64), and its signature over
// the challenge verifies with that key.
func VerifyResponse(c *ChallengeRequest, r *ChallengeResponse, wantKey string) error {
	if r.ChallengeID != c.ChallengeID || r.Nonce != c.Nonce {
		return errors.New("l8: the response does not echo the challenge")
	}
	pub, err := decodePublicKey(wantKey)
	if err != nil {
		return err
	}
	if r.ReceiverPublicKey != "" && r.ReceiverPublicKey != wantKey {
		return errors.New("l8: the response names a key other than the one the receiver publishes")
	}
	sig, err := base64.StdEncoding.DecodeString(r.ReceiverSignature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return errors.New("l8: receiver_signature is not a base64 Ed25519 signature")
	}
	if !ed25519.Verify(pub, challengeMessage(c.ChallengeID, c.Nonce), sig) {
		return errors.New("l8: receiver_signature does not verify")
	}
	return nil
}

// Answer is the receiver role: it checks a challenge and signs it back. It
// signs only challenges whose challenge_id and nonce are UUIDs, so the
// endpoint cannot be used to make this identity sign arbitrary strings, and
// it records the nonce only after the signature verified, so nobody can burn
// nonces without holding a key.
func (id *Identity) Answer(c *ChallengeRequest, now time.Time, nonces *Nonces) (*ChallengeResponse, error) {
	if !IsUUID(c.ChallengeID) || !IsUUID(c.Nonce) {
		return nil, &ChallengeError{"challenge_id and nonce must be UUIDs"}
	}
	if d := now.Sub(time.Unix(c.Timestamp, 0)); d > ChallengeWindow || d < -ChallengeWindow {
		return nil, &ChallengeError{"timestamp expired"}
	}
	if nonces.seen(c.Nonce, now) {
		return nil, &ChallengeError{"nonce already used"}
	}
	pub, err := decodePublicKey(c.SenderPublicKey)
	if err != nil {
		return nil, &ChallengeError{"invalid sender_public_key"}
	}
	sig, err := base64.StdEncoding.DecodeString(c.Signature)
	if err != nil {
		return nil, &ChallengeError{"invalid signature encoding"}
	}
	msg := challengeMessage(c.ChallengeID, c.Nonce)
	if len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, msg, sig) {
		return nil, &ChallengeError{"signature verification failed"}
	}
	// Keep the nonce for as long as its timestamp would still be accepted,
	// so a challenge dated in the future cannot be replayed later.
	until := time.Unix(c.Timestamp, 0).Add(ChallengeWindow)
	if !nonces.remember(c.Nonce, now, until) {
		return nil, &ChallengeError{"nonce already used"} // a concurrent request won the race
	}
	return &ChallengeResponse{ChallengeID: c.ChallengeID, Nonce: c.Nonce,
		ReceiverSignature: base64.StdEncoding.EncodeToString(id.sign(msg)), ReceiverPublicKey: id.PublicKeyBase64()}, nil
}

func decodePublicKey(b64 string) (ed25519.PublicKey, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, errors.New("l8: a public key must be the standard base64 of 32 bytes")
	}
	return ed25519.PublicKey(raw), nil
}

// Nonces remembers the challenge nonces seen in the last ChallengeWindow.
// It is bounded: when full, expired entries are dropped, and if none have
// expired new challenges are refused until some do. Safe for concurrent use.
type Nonces struct {
	mu      sync.Mutex
	max     int
	byNonce map[string]time.Time // nonce → expiry
}

// NewNonces returns a cache holding at most max nonces (default 100,000).
func NewNonces(max int) *Nonces {
	if max <= 0 {
		max = 100_000
	}
	return &Nonces{max: max, byNonce: map[string]time.Time{}}
}

func (n *Nonces) seen(nonce string, now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	exp, ok := n.byNonce[nonce]
	return ok && !now.After(exp) // up to and including its last acceptable instant
}

// remember records nonce until until; false if it is already there or the
// cache is full.
func (n *Nonces) remember(nonce string, now, until time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if exp, ok := n.byNonce[nonce]; ok && !now.After(exp) {
		return false
	}
	if len(n.byNonce) >= n.max {
		for k, exp := range n.byNonce {
			if now.After(exp) {
				delete(n.byNonce, k)
			}
		}
		if len(n.byNonce) >= n.max {
			return false
		}
	}
	if until.Before(now) {
		until = now
	}
	n.byNonce[nonce] = until
	return true
}

// Sweep drops expired nonces.
func (n *Nonces) Sweep(now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, exp := range n.byNonce {
		if now.After(exp) {
			delete(n.byNonce, k)
		}
	}
}

// NewUUID returns a random (version 4) UUID.
func NewUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("l8: crypto/rand failed: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// IsUUID reports whether s is a UUID in its canonical 8-4-4-4-12 hex form.
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}
