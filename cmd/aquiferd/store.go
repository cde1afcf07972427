package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/pebble"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/postgres"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/config"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// openStore opens the configured job store.
func openStore(ctx context.Context, cfg *config.Config, log *zap.Logger) (ports.JobStore, error) {
	switch cfg.StoreBackend {
	case "pebble":
		if err := os.MkdirAll(cfg.DBPath, 0o750); err != nil {
			return nil, fmt.Errorf("create pebble directory: %w", err)
		}
		return pebble.Open(ctx, pebble.Options{Dir: cfg.DBPath, WALMinSyncInterval: cfg.PebbleWALSyncInterval,
			Logger: log.Named("pebble")})
	case "postgres":
		return postgres.Open(ctx, postgres.Options{DSN: cfg.PostgresDSN, Schema: cfg.PostgresSchema,
			Owner: cfg.InstanceID, Logger: log.Named("postgres"),
			// The process's liveness lease: a crashed instance's in-flight
			// work goes back to the queue once it lapses, so keep it close to
			// the lane leases (3 s) instead of the store's 30 s default.
			Lease: 4 * time.Second})
	default:
		if dir := filepath.Dir(cfg.DBPath); dir != "" {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, fmt.Errorf("create data directory: %w", err)
			}
		}
		return sqlite.Open(ctx, sqlite.Options{Path: cfg.DBPath, Sync: sqlite.Sync(cfg.SQLiteSync), Logger: log.Named("sqlite")})
	}
}

// storeStats describes a store's group commit for the shutdown log.
func storeStats(s ports.JobStore) []zap.Field {
	switch s := s.(type) {
	case *sqlite.Store:
		st := s.Stats()
		return []zap.Field{zap.Int64("commits", st.Commits), zap.Int64("ops", st.Ops)}
	case *pebble.Store:
		return []zap.Field{zap.Any("stats", s.Stats())}
	case *postgres.Store:
		return []zap.Field{zap.Any("stats", s.Stats())}
	}
	return nil
}
