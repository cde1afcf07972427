package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func testDatabaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// postgresSchema names a fresh schema for one test (the daemon creates it)
// and drops it when the test ends. Postgres must be running: `make test`
// starts it (scripts/test-deps.sh); AQUIFER_TEST_POSTGRES=skip skips instead.
func postgresSchema(t *testing.T) string {
	t.Helper()
	if os.Getenv("AQUIFER_TEST_POSTGRES") == "skip" {
		t.Skip("AQUIFER_TEST_POSTGRES=skip")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testDatabaseURL())
	if err != nil {
		t.Fatalf("Postgres is not reachable at %s (run scripts/test-deps.sh, or set TEST_DATABASE_URL): %v", testDatabaseURL(), err)
	}
	conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "aqe2e_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, testDatabaseURL())
		if err != nil {
			t.Logf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Logf("dropping schema %s: %v", schema, err)
		}
	})
	return schema
}
