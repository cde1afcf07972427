// Package l8 implements the L8 protocol v0.1, with which Aquifer proves its
// identity to webhook receivers: an Ed25519 identity, the challenge/response
// handshake in both roles, signing and verifying deliveries, the trust cache,
// and Standard Webhooks (https://www.standardwebhooks.com) signatures:
// asymmetric (v1a) over the same key, and symmetric (v1, HMAC-SHA256) with
// shared secrets.
//
// It is a leaf library: standard library only, no goroutines, no clock reads
// (callers pass now), no network I/O (the handshake's HTTP calls belong to
// the caller).
package l8

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ProtocolVersion is the L8 version spoken here.
const ProtocolVersion = "0.1"

// Identity is Aquifer's Ed25519 key pair.
type Identity struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
	key  *signingKey // priv expanded once, for signing
}

// KeySource says where an identity came from, for the start-up log.
type KeySource string

const (
	FromEnv       KeySource = "environment"
	FromFile      KeySource = "key file"
	FromGenerated KeySource = "generated"
	FromOptions   KeySource = "given" // by the embedding program (aquiferd: L8_PRIVATE_KEY)
)

// ErrKeyMismatch is the finding for a 64-byte private key whose public
// half (its last 32 bytes) is not the public key of its seed.
var ErrKeyMismatch = errors.New("is not a valid Ed25519 private key: its public half does not match its seed")

// CheckPrivateKey is the one check of an Ed25519 private key: 64 bytes
// whose public half matches its seed. The error is the reason alone
// ("holds 12 bytes, want 64", ErrKeyMismatch); callers add where the key
// came from.
func CheckPrivateKey(priv []byte) error {
	if len(priv) != ed25519.PrivateKeySize {
		return fmt.Errorf("holds %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	derived := ed25519.NewKeyFromSeed(priv[:ed25519.SeedSize])
	if string(derived[ed25519.SeedSize:]) != string(priv[ed25519.SeedSize:]) {
		return ErrKeyMismatch
	}
	return nil
}

// ParsePrivateKey reads a private key in its published form, the standard
// base64 of the 64 bytes (as aquiferd's L8_PRIVATE_KEY carries it), and
// checks it with CheckPrivateKey. The error is the reason alone.
func ParsePrivateKey(b64 string) (ed25519.PrivateKey, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err == nil {
		err = CheckPrivateKey(raw)
	}
	switch {
	case errors.Is(err, ErrKeyMismatch):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("must be the standard base64 of a %d-byte Ed25519 private key", ed25519.PrivateKeySize)
	}
	return ed25519.PrivateKey(raw), nil
}

// ReadKeyFile reads the key file at path (the raw 64 bytes) and checks the
// key. A missing file is an error wrapping fs.ErrNotExist; a file with a
// bad key, CheckPrivateKey's reason alone.
func ReadKeyFile(path string) (ed25519.PrivateKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := CheckPrivateKey(raw); err != nil {
		return nil, err
	}
	return ed25519.PrivateKey(raw), nil
}

// LoadIdentity returns the identity from envKey (ParsePrivateKey's form, as
// L8_PRIVATE_KEY carries it) if set, else from the key file at path (raw
// 64 bytes), else a new key pair written to path with mode 0600. An envKey
// that is set but invalid is an error: a misconfigured identity must not
// silently become a different one.
func LoadIdentity(envKey, path string) (*Identity, KeySource, error) {
	if envKey != "" {
		priv, err := ParsePrivateKey(envKey)
		if err != nil {
			return nil, "", fmt.Errorf("L8_PRIVATE_KEY: %w", err)
		}
		return newIdentity(priv), FromEnv, nil
	}
	if path == "" {
		return nil, "", errors.New("l8: no key path")
	}
	priv, err := ReadKeyFile(path)
	var readErr *fs.PathError
	switch {
	case err == nil:
		return newIdentity(priv), FromFile, nil
	case errors.Is(err, fs.ErrNotExist): // first start: make one
	case errors.As(err, &readErr):
		return nil, "", fmt.Errorf("read l8 key file: %w", err)
	default:
		return nil, "", fmt.Errorf("l8 key file %s: %w", path, err)
	}
	_, priv, err = ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", fmt.Errorf("generate l8 key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, "", fmt.Errorf("create l8 key directory: %w", err)
	}
	if err := writeFileAtomic(path, priv, 0o600); err != nil {
		return nil, "", fmt.Errorf("save l8 key: %w", err)
	}
	return newIdentity(priv), FromGenerated, nil
}

// NewIdentity wraps a private key the caller has checked (tests,
// embedding, a key CheckPrivateKey accepted).
func NewIdentity(priv ed25519.PrivateKey) *Identity { return newIdentity(priv) }

// IdentityFromKey returns the identity of priv after CheckPrivateKey; the
// error is its reason alone.
func IdentityFromKey(priv ed25519.PrivateKey) (*Identity, error) {
	if err := CheckPrivateKey(priv); err != nil {
		return nil, err
	}
	return newIdentity(priv), nil
}

func newIdentity(priv ed25519.PrivateKey) *Identity {
	return &Identity{priv: priv, pub: priv.Public().(ed25519.PublicKey), key: expandKey(priv)}
}

// PublicKey returns the raw 32-byte public key.
func (id *Identity) PublicKey() ed25519.PublicKey { return id.pub }

// PublicKeyBase64 is the public key as L8 publishes it.
func (id *Identity) PublicKeyBase64() string { return base64.StdEncoding.EncodeToString(id.pub) }

// KeyID is the standard base64 of the first 8 bytes of the public key.
func (id *Identity) KeyID() string { return base64.StdEncoding.EncodeToString(id.pub[:8]) }

// StandardWebhooksKey is the public key in Standard Webhooks form:
// "whpk_" + base64 of the raw key.
func (id *Identity) StandardWebhooksKey() string { return "whpk_" + id.PublicKeyBase64() }

// sign signs msg with the identity: the bytes ed25519.Sign(id.priv, msg)
// would return, made with the key expanded once (sign.go).
func (id *Identity) sign(msg []byte) []byte { return id.key.sign(msg) }

// writeFileAtomic writes data to a temporary file in the same directory and
// renames it over path, so a crash never leaves a half-written file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
