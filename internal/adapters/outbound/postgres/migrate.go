package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockKey is the pg_advisory_xact_lock key every Open takes while it
// migrates, so processes starting at once apply each migration exactly once
// ("aquifer" in ASCII). The lock is per database, so Opens of different
// schemas in one database queue behind each other for the few milliseconds a
// migration check takes.
const migrationLockKey int64 = 0x61717569666572

type migration struct {
	version int
	name    string
	sql     string
}

// backfills are Go steps that run right after their version's SQL, in the
// same transaction, for derived columns that only the domain's functions
// compute exactly (version 3: tenant, upstream and url_path of the jobs
// already stored).
var backfills = map[int]func(ctx context.Context, tx pgx.Tx) (int64, error){
	3: backfillOperatorColumns,
}

// loadMigrations returns the embedded migrations in version order. Files are
// named NNNN_description.sql; versions start at 1 and have no gaps.
func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		prefix, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version number and '_'", name)
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", name))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %d", m.name, i+1)
		}
	}
	return out, nil
}

// migrate brings the database (s.opts.Schema, if set) to the newest schema
// version in one transaction that holds the migration advisory lock: a
// concurrent Open waits for it and then finds nothing left to do. A database
// at a version newer than this binary knows is refused.
func (s *Store) migrate(ctx context.Context) error {
	return s.migrateTo(ctx, 0)
}

// migrateTo is migrate up to version target (0: the newest), so that tests
// can make a database of an earlier version.
func (s *Store) migrateTo(ctx context.Context, target int) error {
	ms, err := loadMigrations()
	if err != nil {
		return fmt.Errorf("postgres migrations: %w", err)
	}
	if len(ms) == 0 {
		return errors.New("postgres migrations: none embedded")
	}
	if target > 0 && target < len(ms) {
		ms = ms[:target]
	}
	latest := ms[len(ms)-1].version
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres %s: begin migration: %w", s.Path(), err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLockKey); err != nil {
		return fmt.Errorf("postgres %s: take the migration lock: %w", s.Path(), err)
	}
	if s.opts.Schema != "" {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{s.opts.Schema}.Sanitize()); err != nil {
			return fmt.Errorf("postgres %s: create schema %q: %w", s.Path(), s.opts.Schema, err)
		}
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS aquifer_schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("postgres %s: create the migrations table: %w", s.Path(), err)
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM aquifer_schema_migrations").Scan(&current); err != nil {
		return fmt.Errorf("postgres %s: read the schema version: %w", s.Path(), err)
	}
	if current > latest {
		return fmt.Errorf("postgres %s%s has schema version %d; this aquiferd understands up to %d (downgrades are not supported)",
			s.Path(), s.schemaNote(), current, latest)
	}
	if current == latest {
		return tx.Commit(ctx)
	}
	for _, m := range ms[current:] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("postgres %s: apply migration %s: %w", s.Path(), m.name, err)
		}
		if fill := backfills[m.version]; fill != nil {
			n, err := fill(ctx, tx)
			if err != nil {
				return fmt.Errorf("postgres %s: fill the columns of migration %s: %w", s.Path(), m.name, err)
			}
			s.log.Info("filled the new columns of the stored jobs", zap.String("migration", m.name), zap.Int64("jobs", n))
		}
		if _, err := tx.Exec(ctx, "INSERT INTO aquifer_schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
			return fmt.Errorf("postgres %s: record migration %s: %w", s.Path(), m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres %s: commit migrations: %w", s.Path(), err)
	}
	s.log.Info("migrated the job store schema", zap.String("schema", s.opts.Schema),
		zap.Int("from", current), zap.Int("to", latest))
	return nil
}

func (s *Store) schemaNote() string {
	if s.opts.Schema == "" {
		return ""
	}
	return " (schema " + s.opts.Schema + ")"
}

// backfillChunk is how many jobs backfillOperatorColumns reads and updates
// per statement.
const backfillChunk = 5000

// backfillOperatorColumns fills the columns version 3 derives from each
// stored job (tenant, upstream, url_path), walking the table in primary
// key order one chunk at a time so memory stays bounded. It returns how
// many jobs it updated.
func backfillOperatorColumns(ctx context.Context, tx pgx.Tx) (int64, error) {
	var total int64
	after := ""
	for {
		rows, err := tx.Query(ctx, `SELECT id, user_id, lane, url FROM jobs WHERE id > $1 ORDER BY id LIMIT $2`, after, backfillChunk)
		if err != nil {
			return total, err
		}
		var ids, tenants, upstreams, paths []string
		for rows.Next() {
			var id, user, lane, url string
			if err := rows.Scan(&id, &user, &lane, &url); err != nil {
				rows.Close()
				return total, err
			}
			d := derive(user, domain.QueueKey(lane), url)
			ids, tenants, upstreams, paths = append(ids, id), append(tenants, d.tenant), append(upstreams, d.upstream), append(paths, d.urlPath)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return total, err
		}
		if len(ids) == 0 {
			return total, nil
		}
		if _, err := tx.Exec(ctx, `UPDATE jobs j SET tenant = v.tenant, upstream = v.upstream, url_path = v.url_path
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS v(id, tenant, upstream, url_path)
			WHERE j.id = v.id`, ids, tenants, upstreams, paths); err != nil {
			return total, err
		}
		total += int64(len(ids))
		after = ids[len(ids)-1]
	}
}
