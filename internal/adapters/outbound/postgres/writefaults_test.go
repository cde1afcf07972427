package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/storetest"
)

// refuseWrites makes every write to schema's jobs table fail as a full disk
// does (SQLSTATE 53100), with a statement trigger; allowWrites drops it.
func refuseWrites(t *testing.T, schema string) {
	exec(t, schema, `CREATE OR REPLACE FUNCTION refuse_writes() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = '53100'; END $$`)
	exec(t, schema, `CREATE TRIGGER refuse_writes BEFORE INSERT OR UPDATE OR DELETE ON jobs
		FOR EACH STATEMENT EXECUTE FUNCTION refuse_writes()`)
}

func allowWrites(t *testing.T, schema string) {
	exec(t, schema, "DROP TRIGGER refuse_writes ON jobs")
}

// A commit PostgreSQL refuses shows in CheckWrites until the next one
// succeeds; reads go on; nothing acknowledged is lost.
func TestWriteFaultsContract(t *testing.T) {
	t.Parallel()
	storetest.ExerciseWriteFaults(t, func(t *testing.T) storetest.Faulty {
		schema := newSchema(t)
		s := openStore(t, schema, "o1", nil)
		return storetest.Faulty{Store: s,
			Break: func(t *testing.T) { refuseWrites(t, schema) },
			Heal:  func(t *testing.T) { allowWrites(t, schema) }}
	})
}

// With no traffic, CheckWrites probes: a database that stopped taking
// writes while the store was idle shows, and so does its recovery.
func TestIdleProbeSeesRefusedWrites(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := openStore(t, schema, "o1", func(o *Options) { o.WriteProbeAfter = 10 * time.Millisecond })
	if err := s.CheckWrites(t.Context()); err != nil {
		t.Fatalf("CheckWrites on a healthy store: %v", err)
	}
	refuseWrites(t, schema)
	time.Sleep(20 * time.Millisecond)
	err := s.CheckWrites(t.Context())
	if err == nil || !strings.Contains(err.Error(), "writes failing since") || !strings.Contains(err.Error(), "No space left on device") {
		t.Fatalf("CheckWrites on an idle store whose writes are refused: %v", err)
	}
	allowWrites(t, schema)
	time.Sleep(20 * time.Millisecond)
	if err := s.CheckWrites(t.Context()); err != nil {
		t.Fatalf("CheckWrites once writes are taken again: %v", err)
	}
}
