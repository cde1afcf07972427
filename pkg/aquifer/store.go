package aquifer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/pebble"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/postgres"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Store is durable job storage, and the queue itself. Use one of the
// built-in stores (OpenSQLite, OpenPebble, OpenPostgres, NewMemoryStore) or
// implement it yourself; every method documents its contract, and
// pkg/aquifer/storetest runs the conformance suite the built-in stores pass.
//
// A store may also implement LedgerStore (needed for drain mode),
// TenantCounter (faster tenant quotas) and OperatorStore (listing,
// retrying and pausing: Aquifer.ListJobs and the calls beside it). Only
// the built-in Postgres store can be shared by several processes.
type Store = ports.JobStore

// OperatorStore is implemented by stores that list and count jobs by
// filter, re-queue finished jobs, run bulk operations in durable batches
// and keep lane pauses; every built-in store does. Without it the operator
// calls (ListJobs, Retry, RetryJobs, PauseLane, …) fail with
// CodeUnavailable.
type OperatorStore = ports.OperatorStore

// LedgerStore is implemented by stores one process owns entirely; drain
// mode needs it. storetest.RunLedger checks it.
type LedgerStore = ports.LedgerStore

// TenantCounter is implemented by stores that count one tenant's unfinished
// jobs cheaply; without it Aquifer counts them itself.
type TenantCounter = ports.TenantCounter

// WriteChecker is implemented by stores that can tell whether their writes
// commit (a full disk leaves reads working); GET /health reports the store
// degraded while CheckWrites fails.
type WriteChecker = ports.WriteChecker

// Arguments and results of Store methods, for implementers.
type (
	MarkInFlightParams   = ports.MarkInFlightParams
	RequeueParams        = ports.RequeueParams
	FinishParams         = ports.FinishParams
	FinishDeliveryParams = ports.FinishDeliveryParams
	ListReadyParams      = ports.ListReadyParams
	ResetStaleParams     = ports.ResetStaleParams
	PurgeParams          = ports.PurgeParams
	Counts               = ports.Counts
	LedgerParams         = ports.LedgerParams
	LedgerEntry          = ports.LedgerEntry
	ListJobsParams       = ports.ListJobsParams
	CountJobsParams      = ports.CountJobsParams
	RetryParams          = ports.RetryParams
	BatchItem            = ports.BatchItem
	RunBatchParams       = ports.RunBatchParams
)

// QueueKey names the queue a job waits in (Job.Queue, Job.ReadyQueue): a
// destination's scheme://host:port or pool, optionally split per tenant.
// Stores treat it as an opaque string.
type QueueKey = domain.QueueKey

// Phase is what a job's next action is (Job.Phase): dispatch its request,
// deliver its result, or nothing.
type Phase = domain.Phase

// Job phases.
const (
	PhaseNone     = domain.PhaseNone     // nothing left to do
	PhaseDispatch = domain.PhaseDispatch // send the request to its destination
	PhaseDeliver  = domain.PhaseDeliver  // POST the result to the webhook
)

// TTL returns how long a job's row lives after it enters status s (24 h
// queued or in flight, 30 min completed, 2 h failed), for stores that set
// Job.ExpiresAt themselves (Finish).
func TTL(s Status) time.Duration { return domain.TTL(s) }

// NewMemoryStore returns an empty in-memory store: nothing survives the
// process. It passes the same conformance suite as the durable stores and
// suits tests, examples, and embedding where durability is not wanted.
func NewMemoryStore() Store { return memory.New(nil) }

// SQLiteOptions configure OpenSQLite.
type SQLiteOptions struct {
	// Path is the database file; it and its directory are created if
	// missing. Required.
	Path string
	// SyncNormal fsyncs only at checkpoints instead of on every commit:
	// still safe if the process crashes, but the last commits can be lost
	// if the machine does. Default false (every acknowledged job survives
	// power loss).
	SyncNormal bool
	// Logger receives the store's errors, named "sqlite"; default none.
	Logger *zap.Logger
}

// OpenSQLite opens (creating if needed) a SQLite store: one file, one
// process, every write group-committed and fsynced. The caller owns it:
// close it after Stop, or set Options.CloseStore.
func OpenSQLite(ctx context.Context, o SQLiteOptions) (Store, error) {
	if o.Path == "" {
		return nil, errors.New("aquifer: SQLiteOptions.Path is required")
	}
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o750); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	sync := sqlite.SyncFull
	if o.SyncNormal {
		sync = sqlite.SyncNormal
	}
	return opened(sqlite.Open(ctx, sqlite.Options{Path: o.Path, Sync: sync, Logger: named(o.Logger, "sqlite")}))
}

// PebbleOptions configure OpenPebble.
type PebbleOptions struct {
	// Dir is the Pebble directory; created if missing. Required.
	Dir string
	// WALMinSyncInterval is the least time between two WAL fsyncs. Default
	// 0, which suits the store's own group commit best.
	WALMinSyncInterval time.Duration
	// Logger receives the store's and Pebble's messages, named "pebble";
	// default none.
	Logger *zap.Logger
}

// OpenPebble opens (creating if needed) a Pebble store: one directory, one
// process, the highest single-instance throughput. The caller owns it.
func OpenPebble(ctx context.Context, o PebbleOptions) (Store, error) {
	if o.Dir == "" {
		return nil, errors.New("aquifer: PebbleOptions.Dir is required")
	}
	if err := os.MkdirAll(o.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("create pebble directory: %w", err)
	}
	return opened(pebble.Open(ctx, pebble.Options{Dir: o.Dir, WALMinSyncInterval: o.WALMinSyncInterval,
		Logger: named(o.Logger, "pebble")}))
}

// PostgresOptions configure OpenPostgres.
type PostgresOptions struct {
	// DSN is the database, as a URL or key=value string. Required.
	DSN string
	// Schema, if set, holds Aquifer's tables (created when missing).
	Schema string
	// InstanceID names this process among those sharing the database
	// (for example "host:port"); it must be unique among them. Required.
	InstanceID string
	// Lease is how long this process counts as alive without renewing its
	// liveness lease; a crashed process's in-flight jobs go back to the
	// queue once it lapses. Default 4s, close to the lane leases (3s).
	Lease time.Duration
	// Logger receives the store's errors, named "postgres"; default none.
	Logger *zap.Logger
}

// OpenPostgres connects to Postgres, applies pending migrations and returns
// a store several Aquifer processes can share: with Options.Cluster.Peers
// set to PostgresPeers(store) (New requires it), each destination's pace is
// kept across all of them. The caller owns it.
func OpenPostgres(ctx context.Context, o PostgresOptions) (Store, error) {
	lease := o.Lease
	if lease <= 0 {
		lease = 4 * time.Second
	}
	return opened(postgres.Open(ctx, postgres.Options{DSN: o.DSN, Schema: o.Schema, Owner: o.InstanceID,
		Lease: lease, Logger: named(o.Logger, "postgres")}))
}

// ClusterPeers are the roles a store shared by several processes plays for
// them: lane leases (one process dispatches each destination, so its pace
// is global), messages between the processes, and shared pool membership.
// Setting Options.Cluster.Peers turns cluster mode on; PostgresPeers gives
// the built-in Postgres store's.
type ClusterPeers = ports.Cluster

// PostgresPeers returns the cluster roles of a store OpenPostgres opened,
// for Options.Cluster.Peers.
func PostgresPeers(s Store) (ClusterPeers, error) {
	pg, ok := s.(*postgres.Store)
	if !ok {
		return ClusterPeers{}, fmt.Errorf("aquifer: PostgresPeers needs a store from OpenPostgres, not %T", s)
	}
	return ports.ClusterOf(pg), nil
}

// opened returns a built-in store as a Store, and a nil Store (not a nil
// pointer in a non-nil interface) with an error.
func opened[S Store](s S, err error) (Store, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

func named(log *zap.Logger, name string) *zap.Logger {
	if log == nil {
		return nil
	}
	return log.Named(name)
}
