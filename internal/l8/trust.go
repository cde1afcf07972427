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
// (mode 0700, files 0600): l8-trust/{scheme}_{host}[_{port}].json, the
// receiver's scheme://host[:port] with "://" and ':' turned into '_'
// (https_hooks.example.org_8443.json). Deleting a file revokes trust at
// once: Get looks at the file every time (a stat, and a read only when it
// changed).
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

// NewFileTrust uses dir, creating it, and renames files of the older
// naming ({host}[_{port}].json, without the scheme, which let an http and
// an https receiver on one host and port share trust) to the current one.
func NewFileTrust(dir string) (*FileTrust, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create l8 trust directory: %w", err)
	}
	f := &FileTrust{dir: dir, cache: map[string]cachedTrust{}}
	if err := f.migrate(); err != nil {
		return nil, err
	}
	return f, nil
}

// fileName maps a domain to its file name, refusing anything that could
// escape the directory.
func (f *FileTrust) fileName(domain string) (string, error) {
	scheme, hostPort, ok := strings.Cut(domain, "://")
	if !ok || (scheme != "http" && scheme != "https") || !safeName(hostPort) {
		return "", fmt.Errorf("l8: %q is not a domain", domain)
	}
	return filepath.Join(f.dir, scheme+"_"+strings.ReplaceAll(hostPort, ":", "_")+".json"), nil
}

// legacyFileName is the name fileName gave before it included the scheme.
func (f *FileTrust) legacyFileName(domain string) string {
	_, hostPort, _ := strings.Cut(domain, "://")
	return filepath.Join(f.dir, strings.ReplaceAll(hostPort, ":", "_")+".json")
}

func safeName(hostPort string) bool {
	return hostPort != "" && !strings.ContainsAny(hostPort, `/\`) && !strings.Contains(hostPort, "..") && hostPort[0] != '.'
}

// migrate renames every file of the old naming to its current name, found
// from the domain it records. When a file of the current name already
// exists it is the newer record, and the old file is removed (so deleting
// the current file still revokes trust). Files that do not parse, or whose
// name is not the old name of the domain they record, are left alone.
func (f *FileTrust) migrate() error {
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return fmt.Errorf("read l8 trust directory: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		old := filepath.Join(f.dir, e.Name())
		raw, err := os.ReadFile(old)
		if err != nil {
			continue
		}
		var t Trust
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		current, err := f.fileName(t.Domain)
		if err != nil || current == old || f.legacyFileName(t.Domain) != old {
			continue
		}
		if _, err := os.Stat(current); err == nil {
			err = os.Remove(old)
		} else {
			err = os.Rename(old, current)
		}
		if err != nil {
			return fmt.Errorf("migrate l8 trust file %s: %w", e.Name(), err)
		}
	}
	return nil
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
