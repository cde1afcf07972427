package l8_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/aquiferhq/aquifer/internal/l8"
)

func writeTrustFile(t *testing.T, path string, tr *l8.Trust) {
	t.Helper()
	raw, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestFileTrustSchemesAreSeparate: an http and an https receiver on one
// host and port are two receivers, with a file each.
func TestFileTrustSchemesAreSeparate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ft, err := l8.NewFileTrust(dir)
	if err != nil {
		t.Fatal(err)
	}
	plain := &l8.Trust{Domain: "http://hooks.example.org:8443", PublicKey: newID(t).PublicKeyBase64()}
	tls := &l8.Trust{Domain: "https://hooks.example.org:8443", PublicKey: newID(t).PublicKeyBase64()}
	noPort := &l8.Trust{Domain: "https://hooks.example.org", PublicKey: newID(t).PublicKeyBase64()}
	for _, tr := range []*l8.Trust{plain, tls, noPort} {
		if err := ft.Put(tr); err != nil {
			t.Fatal(err)
		}
	}
	for name, tr := range map[string]*l8.Trust{"http_hooks.example.org_8443.json": plain, "https_hooks.example.org_8443.json": tls,
		"https_hooks.example.org.json": noPort} {
		if !exists(filepath.Join(dir, name)) {
			t.Errorf("no %s", name)
		}
		if got, err := ft.Get(tr.Domain); err != nil || got.PublicKey != tr.PublicKey {
			t.Errorf("Get(%s) = %+v, %v; want its own key", tr.Domain, got, err)
		}
	}
	if err := os.Remove(filepath.Join(dir, "http_hooks.example.org_8443.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := ft.Get(plain.Domain); !errors.Is(err, l8.ErrNoTrust) {
		t.Fatalf("revoking http still trusts it: %v", err)
	}
	if _, err := ft.Get(tls.Domain); err != nil {
		t.Fatalf("revoking http revoked https too: %v", err)
	}
	for _, bad := range []string{"hooks.example.org:8443", "ftp://hooks.example.org", "https://", "https://../x"} {
		if _, err := ft.Get(bad); err == nil || errors.Is(err, l8.ErrNoTrust) {
			t.Errorf("Get(%q) = %v, want a not-a-domain error", bad, err)
		}
	}
}

// TestFileTrustMigratesOldNames: files named {host}_{port}.json (before the
// scheme was part of the name) are renamed on open after the domain they
// record; an old file whose new name already exists is the stale copy and
// goes; anything else is left alone.
func TestFileTrustMigratesOldNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	httpsOld := &l8.Trust{Domain: "https://hooks.example.org:8443", PublicKey: newID(t).PublicKeyBase64(), ProtocolVersion: "0.1"}
	httpOld := &l8.Trust{Domain: "http://127.0.0.1:9000", PublicKey: newID(t).PublicKeyBase64(), ProtocolVersion: "0.1"}
	noPortOld := &l8.Trust{Domain: "https://receiver.example.com", PublicKey: newID(t).PublicKeyBase64()}
	stale := &l8.Trust{Domain: "https://dup.example.com:443", PublicKey: newID(t).PublicKeyBase64()}
	current := &l8.Trust{Domain: "https://dup.example.com:443", PublicKey: newID(t).PublicKeyBase64()}
	writeTrustFile(t, filepath.Join(dir, "hooks.example.org_8443.json"), httpsOld)
	writeTrustFile(t, filepath.Join(dir, "127.0.0.1_9000.json"), httpOld)
	writeTrustFile(t, filepath.Join(dir, "receiver.example.com.json"), noPortOld)
	writeTrustFile(t, filepath.Join(dir, "dup.example.com_443.json"), stale)
	writeTrustFile(t, filepath.Join(dir, "https_dup.example.com_443.json"), current)
	// Left alone: a damaged file, a file whose name is not its domain's old
	// name, and a file that is not JSON trust at all.
	_ = os.WriteFile(filepath.Join(dir, "broken_1.json"), []byte("{broken"), 0o600)
	writeTrustFile(t, filepath.Join(dir, "elsewhere_1.json"), &l8.Trust{Domain: "https://other.example:1", PublicKey: httpOld.PublicKey})
	_ = os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600)

	ft, err := l8.NewFileTrust(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, tr := range map[string]*l8.Trust{"https_hooks.example.org_8443.json": httpsOld, "http_127.0.0.1_9000.json": httpOld,
		"https_receiver.example.com.json": noPortOld, "https_dup.example.com_443.json": current} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("after migration %s: %v %v", name, fi, err)
		}
		if got, err := ft.Get(tr.Domain); err != nil || got.PublicKey != tr.PublicKey {
			t.Errorf("Get(%s) after migration = %+v, %v", tr.Domain, got, err)
		}
	}
	for _, gone := range []string{"hooks.example.org_8443.json", "127.0.0.1_9000.json", "receiver.example.com.json", "dup.example.com_443.json"} {
		if exists(filepath.Join(dir, gone)) {
			t.Errorf("old file %s is still there", gone)
		}
	}
	for _, kept := range []string{"broken_1.json", "elsewhere_1.json", "notes.txt"} {
		if !exists(filepath.Join(dir, kept)) {
			t.Errorf("%s was touched by the migration", kept)
		}
	}
	// The old http file does not make the https receiver on that port trusted.
	if _, err := ft.Get("https://127.0.0.1:9000"); !errors.Is(err, l8.ErrNoTrust) {
		t.Fatalf("https://127.0.0.1:9000 trusted from an http record: %v", err)
	}
	// Opening again changes nothing.
	if _, err := l8.NewFileTrust(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := ft.Get(current.Domain); err != nil || got.PublicKey != current.PublicKey {
		t.Fatalf("second open: %+v %v", got, err)
	}
}
