package l8

import (
	"crypto/ed25519"
	"crypto/sha512"

	"filippo.io/edwards25519"
)

// signingKey is an Ed25519 private key expanded once (RFC 8032 §5.1.5):
// the clamped secret scalar and the nonce prefix, both from SHA-512 of the
// seed. crypto/ed25519.Sign expands the key again on every call and encodes
// the nonce point R twice (each encoding is a field inversion); signing
// every webhook delivery, that is a fifth of the signature's cost. The
// signatures are the same bytes crypto/ed25519 makes (Ed25519 is
// deterministic; sign_test.go compares them), and every step is a
// constant-time operation of filippo.io/edwards25519, the library Go's own
// implementation was taken from.
type signingKey struct {
	s      edwards25519.Scalar
	prefix [32]byte
	pub    [ed25519.PublicKeySize]byte
}

// expandKey expands priv, a key CheckPrivateKey accepted (or one
// ed25519.GenerateKey made).
func expandKey(priv ed25519.PrivateKey) *signingKey {
	h := sha512.Sum512(priv[:ed25519.SeedSize])
	k := &signingKey{}
	if _, err := k.s.SetBytesWithClamping(h[:32]); err != nil {
		panic("l8: clamping a 32-byte scalar failed: " + err.Error()) // cannot happen: the length is right
	}
	copy(k.prefix[:], h[32:])
	copy(k.pub[:], priv[ed25519.SeedSize:])
	return k
}

// sign returns the Ed25519 signature of msg (RFC 8032 §5.1.6):
// r = SHA-512(prefix ‖ msg), R = r·B, k = SHA-512(R ‖ A ‖ msg),
// S = k·s + r; the signature is R ‖ S.
func (k *signingKey) sign(msg []byte) []byte {
	var digest [sha512.Size]byte
	h := sha512.New()
	h.Write(k.prefix[:])
	h.Write(msg)
	r, err := edwards25519.NewScalar().SetUniformBytes(h.Sum(digest[:0]))
	if err != nil {
		panic("l8: reducing a 64-byte digest failed: " + err.Error()) // cannot happen: the length is right
	}
	sig := make([]byte, 0, ed25519.SignatureSize)
	sig = append(sig, new(edwards25519.Point).ScalarBaseMult(r).Bytes()...) // R, encoded once

	h.Reset()
	h.Write(sig[:32])
	h.Write(k.pub[:])
	h.Write(msg)
	c, err := edwards25519.NewScalar().SetUniformBytes(h.Sum(digest[:0]))
	if err != nil {
		panic("l8: reducing a 64-byte digest failed: " + err.Error())
	}
	return append(sig, edwards25519.NewScalar().MultiplyAdd(c, &k.s, r).Bytes()...)
}
