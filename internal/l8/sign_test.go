package l8

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"testing"
	"time"
)

// The expanded key signs exactly what crypto/ed25519 signs: Ed25519 is
// deterministic, so any difference in any byte is a bug.
func TestSigningKeyMatchesCryptoEd25519(t *testing.T) {
	sizes := []int{0, 1, 31, 32, 63, 64, 65, 111, 112, 127, 128, 129, 1000, 64 << 10}
	for i := range 64 {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		k := expandKey(priv)
		for _, n := range sizes {
			msg := make([]byte, n)
			rand.Read(msg)
			want := ed25519.Sign(priv, msg)
			got := k.sign(msg)
			if !bytes.Equal(got, want) {
				t.Fatalf("key %d, %d-byte message: signature %x, crypto/ed25519 gives %x", i, n, got, want)
			}
			if !ed25519.Verify(priv.Public().(ed25519.PublicKey), msg, got) {
				t.Fatalf("key %d, %d-byte message: the signature does not verify", i, n)
			}
		}
	}
}

// RFC 8032 §7.1, test 3: a fixed key and message, so the check holds even
// if crypto/ed25519 and this file were wrong in the same way.
func TestSigningKeyRFC8032Vector(t *testing.T) {
	seed, _ := hex.DecodeString("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7")
	msg, _ := hex.DecodeString("af82")
	want := "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac" +
		"18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"
	if got := hex.EncodeToString(expandKey(ed25519.NewKeyFromSeed(seed)).sign(msg)); got != want {
		t.Fatalf("signature %s, RFC 8032 gives %s", got, want)
	}
}

// An identity's signatures go through the expanded key; a delivery signed
// with it verifies with the public key.
func TestIdentitySignsWithExpandedKey(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	id := NewIdentity(priv)
	msg := []byte("msg_1.1700000000.{}")
	if got, want := id.sign(msg), ed25519.Sign(priv, msg); !bytes.Equal(got, want) {
		t.Fatalf("identity signature %x, want %x", got, want)
	}
}

// BenchmarkSign compares one webhook-sized signature by the expanded key
// with crypto/ed25519.Sign (make bench records the ratio).
func BenchmarkSign(b *testing.B) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	msg := bytes.Repeat([]byte("x"), 200) // id, timestamp and a small webhook payload
	b.Run("expanded", func(b *testing.B) {
		k := expandKey(priv)
		b.ReportAllocs()
		for b.Loop() {
			k.sign(msg)
		}
	})
	b.Run("crypto-ed25519", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ed25519.Sign(priv, msg)
		}
	})
}

// Signing a delivery allocates a bounded, small number of times: the
// header map here, the signed string, the timestamp, the header value and
// the values' backing array, the signature and the hash's state (6 in all).
// Before, the per-entry strings, the join and one slice per header made it
// 8; the bound fails if they come back.
func TestSignStandardHeadersAllocations(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	id := NewIdentity(priv)
	body := bytes.Repeat([]byte("x"), 200)
	now := time.Unix(1700000000, 0)
	allocs := testing.AllocsPerRun(100, func() {
		h := make(http.Header, 4)
		SignStandardHeaders(h, "msg_1", body, now, nil, id)
	})
	t.Logf("%.0f allocations per signed delivery (v1a only)", allocs)
	if allocs > 6 {
		t.Fatalf("%.0f allocations per signed delivery, want at most 6", allocs)
	}
}
