package l8

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Metadata is the discovery document served at /.well-known/l8.
type Metadata struct {
	ProtocolVersion     string   `json:"protocol_version"`
	ServiceName         string   `json:"service_name"`
	PublicKey           string   `json:"public_key"`
	ChallengeEndpoint   string   `json:"challenge_endpoint"`
	SupportedAlgorithms []string `json:"supported_algorithms"`
	Capabilities        []string `json:"capabilities"`
	SpecURL             string   `json:"spec_url"`
	// StandardWebhooksKey is the same key as "whpk_…", for Standard
	// Webhooks verifiers.
	StandardWebhooksKey string `json:"standard_webhooks_public_key"`
}

// Metadata describes this identity for /.well-known/l8.
func (id *Identity) Metadata() Metadata {
	return Metadata{
		ProtocolVersion: ProtocolVersion, ServiceName: "aquifer", PublicKey: id.PublicKeyBase64(),
		ChallengeEndpoint: "/l8/challenge", SupportedAlgorithms: []string{"ed25519"},
		Capabilities: []string{"signed_payloads"}, SpecURL: "/l8-spec", StandardWebhooksKey: id.StandardWebhooksKey(),
	}
}

// Trust records that a receiver proved it holds its key (BEHAVIOR.md §23.5).
type Trust struct {
	Domain          string   `json:"domain"` // scheme://host[:port]
	PublicKey       string   `json:"public_key"`
	ValidatedAt     int64    `json:"validated_at"` // Unix seconds
	ProtocolVersion string   `json:"protocol_version"`
	Capabilities    []string `json:"capabilities"`
}

// ErrNoTrust means the receiver is not (or no longer) trusted.
var ErrNoTrust = errors.New("l8: receiver not trusted")

// FileTrust keeps trust as one JSON file per receiver in a directory
// (mode 0700, files 0600): l8-trust/{domain without scheme, ':' → '_'}.json.
// Deleting a file revokes trust at once: Get looks at the file every time
// (a stat, and a read only when it changed).
type FileTrust struct {
	dir string

	mu    sync.Mutex
	cache map[string]cachedTrust
}

type cachedTrust struct {
	trust   *Trust
	modTime time.Time
	size    int64
}

// NewFileTrust uses dir, creating it.
func NewFileTrust(dir string) (*FileTrust, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create l8 trust directory: %w", err)
	}
	return &FileTrust{dir: dir, cache: map[string]cachedTrust{}}, nil
}

// fileName maps a domain to its file name, refusing anything that could
// escape the directory.
func (f *FileTrust) fileName(domain string) (string, error) {
	name := strings.TrimPrefix(strings.TrimPrefix(domain, "https://"), "http://")
	name = strings.ReplaceAll(name, ":", "_")
	if name == "" || strings.ContainsAny(name, `/\`) || strings.Contains(name, "..") || name[0] == '.' {
		return "", fmt.Errorf("l8: %q is not a domain", domain)
	}
	return filepath.Join(f.dir, name+".json"), nil
}

// Get returns the trust record for domain, or ErrNoTrust.
func (f *FileTrust) Get(domain string) (*Trust, error) {
	path, err := f.fileName(domain)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		f.mu.Lock()
		delete(f.cache, domain)
		f.mu.Unlock()
		return nil, ErrNoTrust
	}
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	c, ok := f.cache[domain]
	f.mu.Unlock()
	if ok && c.modTime.Equal(fi.ModTime()) && c.size == fi.Size() {
		return c.trust, nil
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoTrust
	}
	if err != nil {
		return nil, err
	}
	var t Trust
	if err := json.Unmarshal(raw, &t); err != nil || t.Domain != domain {
		return nil, ErrNoTrust // a damaged file trusts nobody
	}
	if _, err := decodePublicKey(t.PublicKey); err != nil {
		return nil, ErrNoTrust
	}
	f.mu.Lock()
	f.cache[domain] = cachedTrust{trust: &t, modTime: fi.ModTime(), size: fi.Size()}
	f.mu.Unlock()
	return &t, nil
}

// Put saves a trust record.
func (f *FileTrust) Put(t *Trust) error {
	path, err := f.fileName(t.Domain)
	if err != nil {
		return err
	}
	raw, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(path, append(raw, '\n'), 0o600); err != nil {
		return fmt.Errorf("save l8 trust: %w", err)
	}
	return nil
}
