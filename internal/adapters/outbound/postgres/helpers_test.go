package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap/zaptest"
)

// The tests need a PostgreSQL server: TEST_DATABASE_URL, by default the
// loopback one scripts/test-deps.sh provides. Each test works in a schema of
// its own, dropped when it ends. Without a server the tests fail (CI must run
// them) unless AQUIFER_TEST_POSTGRES=skip.

const defaultTestDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func testDSN() string {
	if dsn := os.Getenv("TEST_DATABASE_URL"); dsn != "" {
		return dsn
	}
	return defaultTestDSN
}

var (
	adminOnce sync.Once
	adminPool *pgxpool.Pool
	adminErr  error
)

// admin returns a pool for test bookkeeping (creating and dropping schemas),
// failing or skipping the test if the server cannot be reached.
func admin(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	adminOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cfg, err := pgxpool.ParseConfig(testDSN())
		if err != nil {
			adminErr = err
			return
		}
		cfg.MaxConns = 4
		cfg.ConnConfig.ConnectTimeout = 3 * time.Second
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err == nil {
			err = p.Ping(ctx)
		}
		if err != nil {
			if p != nil {
				p.Close()
			}
			adminErr = err
			return
		}
		adminPool = p
	})
	if adminErr != nil {
		msg := "PostgreSQL is not reachable at " + redact(testDSN()) + ": " + adminErr.Error() +
			"\nStart it with `scripts/test-deps.sh` (or `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`)," +
			" point TEST_DATABASE_URL at another server, or set AQUIFER_TEST_POSTGRES=skip to skip the PostgreSQL tests."
		if os.Getenv("AQUIFER_TEST_POSTGRES") == "skip" {
			tb.Skip(msg)
		}
		tb.Fatal(msg)
	}
	return adminPool
}

// newSchema returns the name of a fresh schema (created by the first Open
// that uses it) that is dropped when the test ends.
func newSchema(tb testing.TB) string {
	tb.Helper()
	p := admin(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "aqt_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := p.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// openStore opens a store on schema as owner; edit may change the options.
// The store is closed when the test ends.
func openStore(tb testing.TB, schema, owner string, edit func(*Options)) *Store {
	tb.Helper()
	opts := Options{DSN: testDSN(), Schema: schema, Owner: owner, Logger: zaptest.NewLogger(tb)}
	if edit != nil {
		edit(&opts)
	}
	s, err := Open(context.Background(), opts)
	if err != nil {
		tb.Fatalf("open postgres store: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// query runs fn in a transaction whose search_path is schema, for a test's
// own checks and set-ups.
func query(tb testing.TB, schema string, fn func(tx pgx.Tx) error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := pgx.BeginFunc(ctx, admin(tb), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
		return fn(tx)
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// exec runs one statement in schema.
func exec(tb testing.TB, schema, sql string, args ...any) {
	tb.Helper()
	query(tb, schema, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), sql, args...)
		return err
	})
}
