package l8

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// SecretPrefix starts every Standard Webhooks shared secret: "whsec_" +
// standard base64 of the key bytes, the form the official libraries decode.
const SecretPrefix = "whsec_"

// Sizes of a shared secret's key, in bytes: the Standard Webhooks spec asks
// for 24 to 64; NewSecret makes 32.
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
	NewSecretBytes = 32
)

// Secret is a Standard Webhooks shared secret, the key of "v1"
// (HMAC-SHA256) signatures. Printing it never shows the key.
type Secret struct {
	key []byte
}

// NewSecret returns a new random secret in its published form:
// "whsec_" + standard base64 of 32 bytes from crypto/rand.
func NewSecret() (string, error) {
	b := make([]byte, NewSecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("l8: generate webhook secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// Errors of ParseSecret. They never include the secret itself.
var (
	ErrSecretPrefix = errors.New("a webhook secret starts with " + SecretPrefix)
	ErrSecretBase64 = errors.New("a webhook secret is " + SecretPrefix + " followed by standard base64 (with padding)")
)

// ParseSecret reads a secret in its published form. Errors name what is
// wrong, never the value.
func ParseSecret(s string) (Secret, error) {
	b64, ok := strings.CutPrefix(strings.TrimSpace(s), SecretPrefix)
	if !ok {
		return Secret{}, ErrSecretPrefix
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return Secret{}, ErrSecretBase64
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return Secret{}, fmt.Errorf("a webhook secret decodes to %d to %d bytes; this one has %d", MinSecretBytes, MaxSecretBytes, len(key))
	}
	return Secret{key: key}, nil
}

// IsZero reports whether s holds no key (the zero Secret).
func (s Secret) IsZero() bool { return len(s.key) == 0 }

// Equal reports whether s and o hold the same key.
func (s Secret) Equal(o Secret) bool { return hmac.Equal(s.key, o.key) }

// String hides the key.
func (s Secret) String() string { return SecretPrefix + "[redacted]" }

// GoString hides the key from %#v too.
func (s Secret) GoString() string { return "l8.Secret{" + SecretPrefix + "[redacted]}" }

// mac is the raw HMAC-SHA256 of signed under s.
func (s Secret) mac(signed []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(signed)
	return m.Sum(nil)
}
