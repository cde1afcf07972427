package sqlite

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/storetest"
)

// TestTheCheckpointerCopiesTheWAL checks that the writer's connection does
// not checkpoint and that the checkpointer does: once the writer's commits
// have written checkpointPages pages, the database file grows with the
// pages copied back from the WAL.
func TestTheCheckpointerCopiesTheWAL(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	// The writer is idle: its connection can be asked on this goroutine.
	auto, err := s.wc.prepare(ctx, "PRAGMA wal_autocheckpoint")
	if err != nil {
		t.Fatal(err)
	}
	var pages int64
	if err := s.wc.raw(func(driver.Conn) error { return s.wc.queryRow(ctx, auto).Scan(&pages) }); err != nil {
		t.Fatal(err)
	}
	if pages != 0 {
		t.Fatalf("the writer's connection checkpoints every %d pages itself", pages)
	}
	n := 0
	for ; s.Stats().Pages < checkpointPages; n++ {
		if _, _, err := s.Insert(ctx, storetest.NewJob("u", fmt.Sprint(n), "a.test:80")); err != nil {
			t.Fatal(err)
		}
	}
	// The database file alone, copied without its WAL, holds what the
	// checkpoints copied into it.
	checkpointed := func() int {
		b, err := os.ReadFile(s.opts.Path)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "copy.db")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var jobs int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM jobs").Scan(&jobs); err != nil {
			return 0 // a copy taken in the middle of a checkpoint
		}
		return jobs
	}
	for deadline := time.Now().Add(10 * time.Second); checkpointed() < n/2; {
		if time.Now().After(deadline) {
			t.Fatalf("the database file holds %d of %d jobs after %d pages written: no checkpoint", checkpointed(), n, s.Stats().Pages)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
