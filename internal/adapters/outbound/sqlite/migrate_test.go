package sqlite_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
)

// TestMigratesVersion1 opens a database written by schema version 1 (kept in
// testdata) and checks that its rows survive the upgrade.
func TestMigratesVersion1(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "v1.db")
	v1, err := os.ReadFile("testdata/schema_v1.sql")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(v1)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO jobs (seq, id, user_id, idempotent_key, method, lane, status, created_at, updated_at,
		expires_at, ready_lane, ready_seq) VALUES (7, '0123456789abcdef0123456789abcdef', 'u', 'k', 'GET', 'l', 'queued',
		1, 1, 99999999999999, 'l', 7)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := sqlite.Open(t.Context(), sqlite.Options{Path: path})
	if err != nil {
		t.Fatalf("open v1 database: %v", err)
	}
	defer s.Close()
	j, err := s.Lookup(t.Context(), "u", "k")
	if err != nil || j.Seq != 7 || j.Deferrals != 0 {
		t.Fatalf("row after migration = %+v, %v", j, err)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "future.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE jobs (x); PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := sqlite.Open(t.Context(), sqlite.Options{Path: path}); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Fatalf("Open(newer schema) = %v, want a version error", err)
	}
}
