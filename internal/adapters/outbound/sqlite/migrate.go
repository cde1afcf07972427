package sqlite

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
)

//go:embed schema.sql
var schema string

// schemaVersion is the PRAGMA user_version schema.sql sets.
const schemaVersion = 6

// migrations[v] upgrades a version-v database to v+1 inside tx, the
// transaction of that one step, and sets the new user_version.
var migrations = map[int]func(ctx context.Context, tx *sql.Tx) error{
	1: execStep(`ALTER TABLE jobs ADD COLUMN deferrals INTEGER NOT NULL DEFAULT 0; PRAGMA user_version = 2;`),
	2: migrateTo3,
	3: execStep(version4),
	4: execStep(version5),
	5: execStep(version6),
}

func execStep(ddl string) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, ddl)
		return err
	}
}

// version3 is what schema version 3 adds to version 2; schema.sql holds the
// same definitions, and the migration test checks that the two agree.
const version3 = `
ALTER TABLE jobs ADD COLUMN history  TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN upstream TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN tenant   TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN url_path TEXT NOT NULL DEFAULT '';
CREATE TABLE operations (
    id         TEXT    PRIMARY KEY,
    kind       TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    filter     TEXT    NOT NULL DEFAULT '{}',
    cursor_seq INTEGER NOT NULL DEFAULT 0,
    total      INTEGER NOT NULL DEFAULT 0,
    processed  INTEGER NOT NULL DEFAULT 0,
    changed    INTEGER NOT NULL DEFAULT 0,
    skipped    INTEGER NOT NULL DEFAULT 0,
    error      TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE lane_pauses (
    upstream TEXT    PRIMARY KEY,
    at       INTEGER NOT NULL,
    reason   TEXT    NOT NULL DEFAULT ''
) WITHOUT ROWID;
`

// version3Indexes are built after the new columns are filled in, so each
// index is written once, in order, instead of entry by entry.
const version3Indexes = `
CREATE INDEX jobs_status   ON jobs (status, seq, expires_at);
CREATE INDEX jobs_upstream ON jobs (upstream, seq);
CREATE INDEX jobs_user     ON jobs (user_id, seq);
CREATE INDEX jobs_tenant   ON jobs (tenant, seq) WHERE tenant != '';
PRAGMA user_version = 3;
`

// version4 is what schema version 4 adds to version 3: the job options'
// columns and the indexes that read them. Existing rows get the columns'
// defaults (no schedule, no deadline, normal priority, no options), which
// ADD COLUMN writes into no row. jobs_ready is rebuilt with priority in
// its key, from the waiting jobs alone (it is partial); jobs_scheduled and
// jobs_deadline start empty, as no existing row matches their conditions,
// though building each reads the table once.
const version4 = `
ALTER TABLE jobs ADD COLUMN not_before INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN deadline   INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN priority   INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN options    TEXT    NOT NULL DEFAULT '';
DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (ready_lane, priority, ready_seq) WHERE ready_lane != '';
CREATE INDEX jobs_scheduled ON jobs (not_before, seq)
    WHERE ready_lane = '' AND status = 'queued' AND not_before > 0;
CREATE INDEX jobs_deadline ON jobs (deadline, seq) WHERE deadline > 0 AND status = 'queued';
PRAGMA user_version = 4;
`

// version5 widens jobs_ready with status and expires_at, so that Counts
// and Position read the index alone. The index is rebuilt from the jobs in
// lanes (it is partial), which reads the table once.
const version5 = `
DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (ready_lane, priority, ready_seq, status, expires_at) WHERE ready_lane != '';
PRAGMA user_version = 5;
`

// version6 keeps large bodies apart from their rows (job_bodies). Existing
// rows keep theirs inline (apart = 0), so nothing is copied; new jobs and
// new results put a body of sideBodyMin bytes or more apart.
const version6 = `
ALTER TABLE jobs ADD COLUMN apart INTEGER NOT NULL DEFAULT 0;
CREATE TABLE job_bodies (
    key  INTEGER PRIMARY KEY,
    data BLOB    NOT NULL
);
CREATE TRIGGER job_bodies_follow AFTER DELETE ON jobs WHEN old.apart != 0 BEGIN
    DELETE FROM job_bodies WHERE key BETWEEN old.seq * 2 AND old.seq * 2 + 1;
END;
PRAGMA user_version = 6;
`

// migrateTo3 adds the attempt history, the columns the operator's filters
// read (derived from each existing row as Insert derives them for a new
// one), their indexes, and the tables of bulk operations and lane pauses.
// The existing rows are filled in a page at a time by seq; on a large
// database this is the one slow start-up.
func migrateTo3(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, version3); err != nil {
		return err
	}
	update, err := tx.PrepareContext(ctx, "UPDATE jobs SET upstream = ?, tenant = ?, url_path = ? WHERE seq = ?")
	if err != nil {
		return err
	}
	defer update.Close()
	type row struct {
		seq                  int64
		lane, userID, rawURL string
	}
	var page []row
	for after := int64(-1 << 63); ; {
		page = page[:0]
		rows, err := tx.QueryContext(ctx, "SELECT seq, lane, user_id, url FROM jobs WHERE seq > ? ORDER BY seq LIMIT 1000", after)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.seq, &r.lane, &r.userID, &r.rawURL); err != nil {
				rows.Close()
				return err
			}
			page = append(page, r)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			d := derive(domain.QueueKey(r.lane), r.userID, r.rawURL)
			if _, err := update.ExecContext(ctx, d.upstream, d.tenant, d.urlPath, r.seq); err != nil {
				return err
			}
		}
		after = page[len(page)-1].seq
	}
	_, err = tx.ExecContext(ctx, version3Indexes)
	return err
}

// derived are the columns a job's row keeps for the operator's filters,
// computed once at insert from values that never change.
type derived struct{ upstream, tenant, urlPath string }

func derive(queue domain.QueueKey, userID, rawURL string) derived {
	tenant, _ := domain.Unscope(userID)
	return derived{upstream: string(queue.Upstream()), tenant: tenant, urlPath: domain.URLPath(rawURL)}
}

// migrate applies the schema to a new database, checks the version of an
// existing one and upgrades it, and loads the writer's counter.
func (s *Store) migrate(ctx context.Context) error {
	var version int
	if err := s.wdb.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("read schema version of %s: %w", s.opts.Path, err)
	}
	switch version {
	case 0:
		var tables int
		if err := s.wdb.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'jobs'").Scan(&tables); err != nil {
			return fmt.Errorf("inspect %s: %w", s.opts.Path, err)
		}
		if tables > 0 {
			return fmt.Errorf("%s holds a jobs table from a pre-release development build; move it away to start fresh", s.opts.Path)
		}
		if _, err := s.wdb.ExecContext(ctx, schema); err != nil {
			return fmt.Errorf("apply sqlite schema to %s: %w", s.opts.Path, err)
		}
	case schemaVersion:
	default:
		if version > schemaVersion {
			return fmt.Errorf("%s has schema version %d; this aquiferd understands up to %d (downgrades are not supported)",
				s.opts.Path, version, schemaVersion)
		}
		for v := version; v < schemaVersion; v++ {
			if err := s.migrateStep(ctx, v); err != nil {
				return err
			}
		}
	}
	if err := s.wdb.QueryRowContext(ctx, "SELECT coalesce(max(max(seq), max(ready_seq)), 0) FROM jobs").Scan(&s.seq); err != nil {
		return fmt.Errorf("read sequence of %s: %w", s.opts.Path, err)
	}
	return nil
}

func (s *Store) migrateStep(ctx context.Context, from int) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate %s from version %d: %w", s.opts.Path, from, err)
	}
	if err := migrations[from](ctx, tx); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("migrate %s from version %d: %w", s.opts.Path, from, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate %s from version %d: %w", s.opts.Path, from, err)
	}
	s.log.Info("migrated the job store schema", zap.Int("from", from), zap.Int("to", from+1))
	return nil
}
