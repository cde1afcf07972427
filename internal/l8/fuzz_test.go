package l8_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/l8"
)

// Seed corpora: testdata/fuzz/FuzzChallengeAnswer and FuzzVerifyDelivery.
// Plain `go test` replays them; explore with
//
//	go test -run '^$' -fuzz FuzzChallengeAnswer -fuzztime 60s ./internal/l8/
//
// The keys are fixed so that the committed seeds can carry valid signatures.
var (
	fuzzReceiverKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x11}, ed25519.SeedSize)) // Aquifer
	fuzzSenderKey   = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x22}, ed25519.SeedSize)) // a challenger, or a delivery's real signer
	fuzzOtherKey    = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x33}, ed25519.SeedSize)) // an impostor
)

var uuidRef = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// challengeErrors are the messages POST /l8/challenge documents (docs/API.md).
var challengeErrors = map[string]bool{
	"timestamp expired": true, "nonce already used": true, "invalid sender_public_key": true,
	"invalid signature encoding": true, "signature verification failed": true,
	"challenge_id and nonce must be UUIDs": true,
}

// FuzzChallengeAnswer decodes a challenge as POST /l8/challenge does and
// lets Aquifer's identity answer it. With resign set, the test signs
// whatever challenge_id and nonce came out with the sender's key, so the
// fuzzer can reach the signing step with ids that are not UUIDs. Answer
// never panics, never signs anything but two UUIDs, answers only a challenge
// whose signature verifies and whose timestamp is within the window, and
// its signature verifies with Aquifer's published key.
func FuzzChallengeAnswer(f *testing.F) {
	receiver := l8.NewIdentity(fuzzReceiverKey)
	senderPub := base64.StdEncoding.EncodeToString(fuzzSenderKey.Public().(ed25519.PublicKey))
	f.Fuzz(func(t *testing.T, raw []byte, nowUnix int64, resign bool) {
		var c l8.ChallengeRequest
		if json.Unmarshal(raw, &c) != nil {
			return // answered 400 "invalid json: …" before Answer runs
		}
		if resign {
			c.SenderPublicKey = senderPub
			c.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(fuzzSenderKey, []byte(c.ChallengeID+":"+c.Nonce)))
		}
		now := time.Unix(nowUnix, 0)
		nonces := l8.NewNonces(0)
		sent := c
		resp, err := receiver.Answer(&c, now, nonces)
		if c != sent {
			t.Fatalf("Answer changed the challenge: %+v -> %+v", sent, c)
		}
		if err != nil {
			var ce *l8.ChallengeError
			if resp != nil || !errors.As(err, &ce) || !challengeErrors[ce.Message] {
				t.Fatalf("Answer = %+v, %v (%T): want nil and a documented *ChallengeError", resp, err, err)
			}
			return
		}
		if !uuidRef.MatchString(c.ChallengeID) || !uuidRef.MatchString(c.Nonce) {
			t.Fatalf("signed a challenge that is not two UUIDs: %q, %q", c.ChallengeID, c.Nonce)
		}
		if d := now.Sub(time.Unix(c.Timestamp, 0)); d > l8.ChallengeWindow || d < -l8.ChallengeWindow {
			t.Fatalf("answered a challenge dated %d at %d", c.Timestamp, nowUnix)
		}
		pub, perr := base64.StdEncoding.DecodeString(c.SenderPublicKey)
		sig, serr := base64.StdEncoding.DecodeString(c.Signature)
		if perr != nil || serr != nil || len(pub) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize ||
			!ed25519.Verify(pub, []byte(c.ChallengeID+":"+c.Nonce), sig) {
			t.Fatalf("answered a challenge whose signature does not verify: %+v", c)
		}
		if resp.ChallengeID != c.ChallengeID || resp.Nonce != c.Nonce || resp.ReceiverPublicKey != receiver.PublicKeyBase64() {
			t.Fatalf("response %+v does not echo %+v", resp, c)
		}
		if err := l8.VerifyResponse(&c, resp, receiver.PublicKeyBase64()); err != nil {
			t.Fatalf("Aquifer's own answer does not verify: %v", err)
		}
		if _, err := receiver.Answer(&c, now, nonces); err == nil || err.Error() != "nonce already used" {
			t.Fatalf("replayed challenge answered: %v", err)
		}
	})
}

// fuzzHeaderBlock turns "Name: value" lines into a header, as a receiver's
// HTTP server would hand it over.
func fuzzHeaderBlock(raw string) http.Header {
	h := http.Header{}
	for line := range strings.SplitSeq(raw, "\n") {
		name, value, ok := strings.Cut(strings.TrimSuffix(line, "\r"), ":")
		if ok && strings.TrimSpace(name) != "" {
			h.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		}
	}
	return h
}

// Bits of FuzzVerifyDelivery's sign argument.
const (
	signL8       = 1 << iota // add a valid L8 signature over the fuzzed id and timestamp
	signStandard             // append a valid v1a entry over the fuzzed webhook-id and timestamp
	signImpostor             // sign with a key other than the one verified against
)

// FuzzVerifyDelivery checks both delivery verifiers against arbitrary
// headers and bodies. The fuzzer cannot forge Ed25519 signatures and the
// seeds carry none by the verified key, so a delivery may be accepted only
// when the test itself signed it with that key; and one it signed, with a
// timestamp in the window, must be accepted. Neither ever panics.
func FuzzVerifyDelivery(f *testing.F) {
	pub := fuzzSenderKey.Public().(ed25519.PublicKey)
	const window = 5 * time.Minute
	f.Fuzz(func(t *testing.T, headerBlock string, body []byte, nowUnix int64, sign uint8) {
		h := fuzzHeaderBlock(headerBlock)
		key := fuzzSenderKey
		if sign&signImpostor != 0 {
			key = fuzzOtherKey
		}
		if sign&signL8 != 0 {
			s := ed25519.Sign(key, []byte(l8.DeliveryString(h.Get(l8.HeaderDeliveryID), h.Get(l8.HeaderTimestamp), body)))
			h.Set(l8.HeaderSignature, base64.StdEncoding.EncodeToString(s))
		}
		if sign&signStandard != 0 {
			s := ed25519.Sign(key, l8.StandardString(h.Get(l8.HeaderWebhookID), h.Get(l8.HeaderWebhookTimestamp), body))
			h.Set(l8.HeaderWebhookSignature, h.Get(l8.HeaderWebhookSignature)+" v1a,"+base64.StdEncoding.EncodeToString(s))
		}
		now := time.Unix(nowUnix, 0)
		genuine := sign&signImpostor == 0

		id, err := l8.VerifyL8(pub, h, body, now, window)
		checkVerdict(t, "VerifyL8", id, err, h.Get(l8.HeaderDeliveryID), genuine && sign&signL8 != 0,
			h.Get(l8.HeaderDeliveryID), h.Get(l8.HeaderTimestamp), now, window)
		if err == nil {
			if _, err := l8.VerifyL8(pub, h, append(bytes.Clone(body), 'x'), now, window); !errors.Is(err, l8.ErrBadSignature) {
				t.Fatalf("VerifyL8 with a tampered body: %v", err)
			}
		}

		msgID, err := l8.VerifyStandard(pub, h, body, now, window)
		checkVerdict(t, "VerifyStandard", msgID, err, h.Get(l8.HeaderWebhookID), genuine && sign&signStandard != 0,
			h.Get(l8.HeaderWebhookID), h.Get(l8.HeaderWebhookTimestamp), now, window)
		if err == nil {
			if _, err := l8.VerifyStandard(pub, h, append(bytes.Clone(body), 'x'), now, window); !errors.Is(err, l8.ErrBadSignature) {
				t.Fatalf("VerifyStandard with a tampered body: %v", err)
			}
		}
	})
}

// checkVerdict asserts one verifier's answer: accepted only when signed,
// accepted whenever signed with an id and a timestamp in the window, and
// rejected with one of the documented errors.
func checkVerdict(t *testing.T, what, gotID string, err error, wantID string, signed bool, id, ts string, now time.Time, window time.Duration) {
	t.Helper()
	if err == nil {
		if !signed {
			t.Fatalf("%s accepted a delivery the verified key never signed", what)
		}
		if gotID != wantID {
			t.Fatalf("%s returned id %q, header says %q", what, gotID, wantID)
		}
		return
	}
	if gotID != "" {
		t.Fatalf("%s returned id %q with %v", what, gotID, err)
	}
	if !errors.Is(err, l8.ErrUnsigned) && !errors.Is(err, l8.ErrStale) && !errors.Is(err, l8.ErrBadSignature) {
		t.Fatalf("%s: undocumented error %v", what, err)
	}
	if !signed || id == "" {
		return
	}
	sec, perr := strconv.ParseInt(ts, 10, 64)
	if perr != nil {
		return
	}
	if d := now.Sub(time.Unix(sec, 0)); d <= window && d >= -window {
		t.Fatalf("%s rejected a genuine delivery (id %q, timestamp %q): %v", what, id, ts, err)
	}
}
