package l8

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
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
//
// A Secret is made from its published form by ParseSecret (checked at once)
// or SecretFrom (checked later, by Check: a program's settings can then
// report every bad secret together, each with where it was given). A
// Secret whose form was bad, and the zero Secret, sign and verify nothing.
type Secret struct {
	key []byte
	bad *SecretError // why the published form was refused; nil when key is set
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

// SecretError says what is wrong with a webhook secret, never its value.
// This is the one check of the secret form; callers add where the secret
// came from. Error() is a sentence ("a webhook secret starts with whsec_")
// for messages of the form "<where>: <error>"; Problem is the same finding
// as a predicate ("does not start with whsec_") for "<which secret>
// <problem>".
type SecretError struct {
	Problem string
	rule    string
}

func (e *SecretError) Error() string { return e.rule }

// errSecretEmpty is the finding for the zero Secret.
var errSecretEmpty = &SecretError{Problem: "is empty", rule: "a webhook secret is empty"}

// SecretFrom returns the secret whose published form is s ("whsec_" +
// standard base64 of 24 to 64 bytes; surrounding white space is ignored)
// without failing: Check reports what is wrong with s, if anything.
func SecretFrom(s string) Secret {
	b64, ok := strings.CutPrefix(strings.TrimSpace(s), SecretPrefix)
	if !ok {
		return Secret{bad: &SecretError{Problem: "does not start with " + SecretPrefix,
			rule: "a webhook secret starts with " + SecretPrefix}}
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return Secret{bad: &SecretError{Problem: "is not " + SecretPrefix + " followed by standard base64 (with padding)",
			rule: "a webhook secret is " + SecretPrefix + " followed by standard base64 (with padding)"}}
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return Secret{bad: &SecretError{
			Problem: fmt.Sprintf("decodes to %d bytes, not %d to %d", len(key), MinSecretBytes, MaxSecretBytes),
			rule:    fmt.Sprintf("a webhook secret decodes to %d to %d bytes; this one has %d", MinSecretBytes, MaxSecretBytes, len(key))}}
	}
	return Secret{key: key}
}

// ParseSecret reads a secret in its published form; the error is
// SecretFrom's Check, a *SecretError.
func ParseSecret(s string) (Secret, error) {
	sec := SecretFrom(s)
	if err := sec.Check(); err != nil {
		return Secret{}, err
	}
	return sec, nil
}

// Check reports why s cannot sign, as a *SecretError: the form it was made
// from was bad, or s is the zero Secret. Nil means it signs.
func (s Secret) Check() error {
	switch {
	case s.bad != nil:
		return s.bad
	case len(s.key) == 0:
		return errSecretEmpty
	}
	return nil
}

// IsZero reports whether s is the zero Secret.
func (s Secret) IsZero() bool { return len(s.key) == 0 && s.bad == nil }

// Equal reports whether s and o hold the same key (a Secret without one
// equals none).
func (s Secret) Equal(o Secret) bool { return len(s.key) > 0 && hmac.Equal(s.key, o.key) }

// String hides the key.
func (s Secret) String() string { return SecretPrefix + "[redacted]" }

// GoString hides the key from %#v too.
func (s Secret) GoString() string { return "l8.Secret{" + SecretPrefix + "[redacted]}" }

// signs reports whether s has a key to sign and verify with.
func (s Secret) signs() bool { return len(s.key) > 0 }

// mac is the raw HMAC-SHA256 of signed under s.
func (s Secret) mac(signed []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(signed)
	return m.Sum(nil)
}
