package l8

import (
	"crypto/ed25519"
	"crypto/sha512"

	"github.com/oasisprotocol/curve25519-voi/curve"
	"github.com/oasisprotocol/curve25519-voi/curve/scalar"
)

// signingKey is an Ed25519 private key expanded once (RFC 8032 §5.1.5):
// the clamped secret scalar and the nonce prefix, both from SHA-512 of the
// seed. crypto/ed25519.Sign expands the key again on every call and encodes
// the nonce point R twice.
//
// Every webhook delivery is signed (v1a), so the signature is a tenth of an
// end-to-end job's CPU. The one costly step is R = r·B, a fixed-base scalar
// multiplication; curve25519-voi does it in half the time of Go's own
// implementation (BenchmarkSign: 15 µs against 29 µs on the bench machine),
// with AVX2 where the CPU has it and a constant-time table lookup either way.
// The signatures are the same bytes crypto/ed25519 makes (Ed25519 is
// deterministic; sign_test.go compares them and checks RFC 8032's vector).
// Verification stays with crypto/ed25519.
type signingKey struct {
	s      scalar.Scalar
	prefix [32]byte
	pub    [ed25519.PublicKeySize]byte
}

// expandKey expands priv, a key CheckPrivateKey accepted (or one
// ed25519.GenerateKey made).
func expandKey(priv ed25519.PrivateKey) *signingKey {
	h := sha512.Sum512(priv[:ed25519.SeedSize])
	h[0] &= 248 // clamp (RFC 8032 §5.1.5 step 2)
	h[31] &= 127
	h[31] |= 64
	k := &signingKey{}
	if _, err := k.s.SetBits(h[:32]); err != nil {
		panic("l8: loading a 32-byte scalar failed: " + err.Error()) // cannot happen: the length is right
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
	var r scalar.Scalar
	if _, err := r.SetBytesModOrderWide(h.Sum(digest[:0])); err != nil {
		panic("l8: reducing a 64-byte digest failed: " + err.Error()) // cannot happen: the length is right
	}
	var R curve.EdwardsPoint
	var rc curve.CompressedEdwardsY
	rc.SetEdwardsPoint(R.MulBasepoint(curve.ED25519_BASEPOINT_TABLE, &r))
	sig := make([]byte, ed25519.SignatureSize)
	copy(sig, rc[:])

	h.Reset()
	h.Write(rc[:])
	h.Write(k.pub[:])
	h.Write(msg)
	var c scalar.Scalar
	if _, err := c.SetBytesModOrderWide(h.Sum(digest[:0])); err != nil {
		panic("l8: reducing a 64-byte digest failed: " + err.Error())
	}
	c.Mul(&c, &k.s)
	c.Add(&c, &r)
	if err := c.ToBytes(sig[32:]); err != nil {
		panic("l8: encoding a scalar failed: " + err.Error()) // cannot happen: the length is right
	}
	return sig
}
