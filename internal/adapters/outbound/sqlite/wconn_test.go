package sqlite

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// openTestWconn opens a database with foreign keys enforced (a deferred
// foreign key is a way to make a COMMIT fail and leave its transaction
// open) and takes its one connection as a writer's.
func openTestWconn(t *testing.T) (*wconn, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "w.db")
	db, err := sql.Open("sqlite", dsn(path, SyncFull, false)+"&_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE parent (id INTEGER PRIMARY KEY);
		CREATE TABLE child (id INTEGER PRIMARY KEY, name TEXT NOT NULL, body BLOB, flag INTEGER NOT NULL DEFAULT 0,
			parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	w, err := openWconn(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := errors.Join(w.close(), db.Close()); err != nil {
			t.Error(err)
		}
	})
	return w, db
}

func prepareTest(t *testing.T, w *wconn, query string) *wstmt {
	t.Helper()
	st, err := w.prepare(t.Context(), query)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func countChildren(t *testing.T, w *wconn, count *wstmt) int64 {
	t.Helper()
	var n int64
	if err := w.raw(func(driver.Conn) error { return w.queryRow(t.Context(), count).Scan(&n) }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWconnTxRollsBackWhatFails checks that a transaction whose function
// fails, or whose COMMIT fails and leaves it open, is rolled back: it
// writes nothing and the next transaction begins.
func TestWconnTxRollsBackWhatFails(t *testing.T) {
	w, _ := openTestWconn(t)
	ctx := t.Context()
	insert := prepareTest(t, w, "INSERT INTO child (id, name, parent) VALUES (?, ?, ?)")
	count := prepareTest(t, w, "SELECT count(*) FROM child")

	failed := errors.New("an op failed")
	err := w.tx(ctx, func() error {
		if _, err := w.exec(ctx, insert, 1, "a", nil); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("tx whose function fails: %v, want %v", err, failed)
	}
	// A child of no parent passes the deferred check until COMMIT, which
	// fails and leaves the transaction open.
	err = w.tx(ctx, func() error {
		_, err := w.exec(ctx, insert, 2, "orphan", 7)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "FOREIGN KEY") {
		t.Fatalf("tx whose commit fails: %v, want a foreign key failure", err)
	}
	if n := countChildren(t, w, count); n != 0 {
		t.Fatalf("%d rows after two failed transactions, want 0", n)
	}
	if err := w.tx(ctx, func() error {
		_, err := w.exec(ctx, insert, 3, "b", nil)
		return err
	}); err != nil {
		t.Fatalf("tx after a failed commit: %v", err)
	}
	if n := countChildren(t, w, count); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}

// TestWconnScan checks the conversions of the writer's rows: integers into
// int64, int and bool, text into string, a blob and NULL into []byte, and
// sql.ErrNoRows for no row.
func TestWconnScan(t *testing.T) {
	w, _ := openTestWconn(t)
	ctx := t.Context()
	insert := prepareTest(t, w, "INSERT INTO child (id, name, body, flag) VALUES (?, ?, ?, ?)")
	get := prepareTest(t, w, "SELECT id, id, flag, name, body FROM child WHERE id = ?")
	if err := w.tx(ctx, func() error {
		if _, err := w.exec(ctx, insert, int64(1), "one", []byte("body"), true); err != nil {
			return err
		}
		_, err := w.exec(ctx, insert, 2, "two", nil, false)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	err := w.raw(func(driver.Conn) error {
		var id64 int64
		var id int
		var flag bool
		var name string
		var body []byte
		if err := w.queryRow(ctx, get, 1).Scan(&id64, &id, &flag, &name, &body); err != nil {
			return err
		}
		if id64 != 1 || id != 1 || !flag || name != "one" || string(body) != "body" {
			t.Errorf("row 1: %d %d %v %q %q", id64, id, flag, name, body)
		}
		if err := w.queryRow(ctx, get, 2).Scan(&id64, &id, &flag, &name, &body); err != nil {
			return err
		}
		if id64 != 2 || flag || name != "two" || body != nil {
			t.Errorf("row 2: %d %v %q %q", id64, flag, name, body)
		}
		if err := w.queryRow(ctx, get, 3).Scan(&id64, &id, &flag, &name, &body); !errors.Is(err, sql.ErrNoRows) {
			t.Errorf("no row: %v, want sql.ErrNoRows", err)
		}
		if err := w.queryRow(ctx, get, 1).Scan(&name, &id, &flag, &name, &body); err == nil {
			t.Error("an integer scanned into a string")
		}
		if err := w.queryRow(ctx, get, 1).Scan(&id); err == nil {
			t.Error("five columns scanned into one value")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWriterPageCacheStaysSmall holds the writer's page cache to 8 MiB:
// after a commit that rebalanced a B-tree, SQLite's truncation of the page
// cache walks every cached page (the rebalance parked a page under the
// lock-byte page's number, far above the database's size), which cost 2.8 %
// of the daemon's CPU under the e2e bench at 32 MiB. A bigger cache for the
// writer needs a profile showing it pays (docs/BENCHMARKS.md, issue 21).
func TestWriterPageCacheStaysSmall(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		db, err := sql.Open("sqlite", dsn(filepath.Join(t.TempDir(), "c.db"), SyncFull, readOnly))
		if err != nil {
			t.Fatal(err)
		}
		if !readOnly {
			if _, err := db.Exec("CREATE TABLE t (x)"); err != nil {
				t.Fatal(err)
			}
		}
		var kib int64
		if err := db.QueryRow("PRAGMA cache_size").Scan(&kib); err != nil {
			t.Fatal(err)
		}
		// A negative cache_size is in KiB.
		if kib >= 0 || -kib > 8<<10 {
			t.Errorf("read-only %v: cache_size = %d, want at most 8 MiB (-8192)", readOnly, kib)
		}
		db.Close()
	}
}
