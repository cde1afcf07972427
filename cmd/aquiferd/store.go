package main

import (
	"context"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/pebble"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/postgres"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/config"
	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// openStore opens the configured job store.
func openStore(ctx context.Context, cfg *config.Config, log *zap.Logger) (aquifer.Store, error) {
	switch cfg.StoreBackend {
	case "pebble":
		return aquifer.OpenPebble(ctx, aquifer.PebbleOptions{Dir: cfg.DBPath, WALMinSyncInterval: cfg.PebbleWALSyncInterval,
			Logger: log})
	case "postgres":
		// The default liveness lease (4 s) keeps a crashed instance's
		// in-flight work out of the queue only a little longer than the
		// lane leases (3 s).
		return aquifer.OpenPostgres(ctx, aquifer.PostgresOptions{DSN: cfg.PostgresDSN, Schema: cfg.PostgresSchema,
			InstanceID: cfg.InstanceID, Logger: log})
	default:
		return aquifer.OpenSQLite(ctx, aquifer.SQLiteOptions{Path: cfg.DBPath, SyncNormal: cfg.SQLiteSync == "normal",
			Logger: log})
	}
}

// storeFields are the settings of the selected store backend for the
// start-up log: only those that apply to it.
func storeFields(cfg *config.Config) []zap.Field {
	switch cfg.StoreBackend {
	case "pebble":
		return []zap.Field{zap.String("db_path", cfg.DBPath),
			zap.Duration("pebble_wal_sync_interval", cfg.PebbleWALSyncInterval)}
	case "postgres":
		// Not the DSN: it may hold a password.
		schema := cfg.PostgresSchema
		if schema == "" {
			schema = "(search_path)"
		}
		return []zap.Field{zap.String("postgres_schema", schema), zap.String("instance_id", cfg.InstanceID)}
	default:
		return []zap.Field{zap.String("db_path", cfg.DBPath), zap.String("sqlite_sync", cfg.SQLiteSync)}
	}
}

// storeStats describes a store's group commit for the shutdown log.
func storeStats(s aquifer.Store) []zap.Field {
	switch s := s.(type) {
	case *sqlite.Store:
		st := s.Stats()
		return []zap.Field{zap.Int64("commits", st.Commits), zap.Int64("ops", st.Ops), zap.Int64("wal_pages", st.Pages)}
	case *pebble.Store:
		return []zap.Field{zap.Any("stats", s.Stats())}
	case *postgres.Store:
		return []zap.Field{zap.Any("stats", s.Stats())}
	}
	return nil
}
