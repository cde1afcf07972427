package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// Options configure a Store.
type Options struct {
	// DSN is the database to use, as a URL or key=value string; required.
	DSN string
	// Schema, if set, is created when missing and put first on every
	// connection's search_path, so Aquifer's tables live in it.
	Schema string
	// Owner is this process's instance id (for example "host:port"); required.
	// It must be unique among the processes sharing the database: lane
	// leases, and the in-flight attempts a process runs, are recorded under
	// it.
	Owner string
	// Lease is how long this process counts as alive without renewing its
	// liveness lease, which it renews every Lease/3. In-flight jobs of a
	// process that stopped renewing are recovered by the next holder of
	// their lane (RecoverLane), so keep it close to the lane lease TTL the
	// app uses. Default 30s.
	Lease time.Duration
	// MaxConns caps the connection pool; default 8. Operators' listings and
	// counts (ListJobs, CountJobs) use at most a quarter of it at a time,
	// so the writer always finds a connection.
	MaxConns int32
	// MaxBatch caps how many operations share one transaction; default 1024.
	MaxBatch int
	// GatherYields is how many times the writer yields the processor to let
	// more operations join a group before committing it; default 2, negative
	// for none.
	GatherYields int
	// Timeout bounds every operation (each read, each group commit) so that
	// nothing hangs while the database is unreachable; default 10s. Opening a
	// connection is bounded by the DSN's connect_timeout, default 5s.
	Timeout time.Duration
	// NotifyInterval is how long Broadcast collects messages before sending
	// them as one batch of NOTIFYs; default 25ms.
	NotifyInterval time.Duration
	// NotifyBuffer is how many broadcast messages may wait for the next
	// batch; more are dropped (Stats.Dropped). Default 4096.
	NotifyBuffer int
	// Logger receives store errors; default no-op.
	Logger *zap.Logger
	// WriteProbeAfter is how long the store may go without trying a commit
	// before CheckWrites makes a small probe transaction to see whether
	// writes still succeed; default 10 s.
	WriteProbeAfter time.Duration
	// MigrationTimeout bounds Open's schema migration, which may rewrite
	// every stored job and build indexes over them (version 3 and 4 do);
	// default 1h. Other processes opening the database meanwhile wait for
	// it.
	MigrationTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.WriteProbeAfter <= 0 {
		o.WriteProbeAfter = 10 * time.Second
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.MigrationTimeout <= 0 {
		o.MigrationTimeout = time.Hour
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 8
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.NotifyInterval <= 0 {
		o.NotifyInterval = 25 * time.Millisecond
	}
	if o.NotifyBuffer <= 0 {
		o.NotifyBuffer = 4096
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// Store is a JobStore on PostgreSQL that several processes can share.
type Store struct {
	opts Options
	log  *zap.Logger
	pool *pgxpool.Pool
	path string // DSN without password

	w                  *storekit.Writer // the single writer; its commit is Store.commit
	storekit.JobWrites                  // Insert, Delete, MarkInFlight, Requeue, Finish, FinishDelivery, RecoverInFlight
	closeOnce          sync.Once

	storekit.OperatorWrites               // Retry, SaveOperation, RunBatch, PauseLane, ResumeLane
	reads                   chan struct{} // listings and counts in progress (see scan)

	renewOnce sync.Once
	renewStop chan struct{}
	renewDone chan struct{}

	channel    string                    // the LISTEN/NOTIFY channel of this database and schema
	outbox     chan ports.ClusterMessage // broadcast messages waiting for the notifier
	kick       chan struct{}             // wakes the notifier (capacity 1)
	notifyDone chan struct{}             // notifier stopped

	renewals                     atomic.Int64
	notified, dropped, delivered atomic.Int64
	listenPID                    atomic.Uint32 // backend of the current Listen connection (tests)
}

// Stats are cumulative counters.
type Stats struct {
	Commits   int64 // transactions the writer committed
	Ops       int64 // operations in them
	Renewals  int64 // liveness lease renewals that succeeded
	Notified  int64 // NOTIFY payloads sent
	Dropped   int64 // broadcast messages (or parts) dropped: buffer full, send failed, too large
	Delivered int64 // messages from other processes handed to Listen's callers
}

// Stats returns the store's counters: Ops/Commits is the mean group size.
func (s *Store) Stats() Stats {
	commits, ops := s.w.Stats()
	return Stats{Commits: commits, Ops: ops, Renewals: s.renewals.Load(),
		Notified: s.notified.Load(), Dropped: s.dropped.Load(), Delivered: s.delivered.Load()}
}

var (
	_ ports.JobStore    = (*Store)(nil)
	_ ports.SharedStore = (*Store)(nil)
)

// Open connects to the database, applies pending migrations, takes this
// process's liveness lease and starts the writer, the lease renewer and the
// broadcast notifier.
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	if opts.DSN == "" {
		return nil, errors.New("postgres: empty DSN")
	}
	if opts.Owner == "" {
		return nil, errors.New("postgres: empty Owner (this process's instance id)")
	}
	cfg, err := pgxpool.ParseConfig(opts.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse DSN %s: %w", redact(opts.DSN), err)
	}
	cfg.MaxConns = opts.MaxConns
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if opts.Schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{opts.Schema}.Sanitize() + ", public"
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "aquiferd"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &Store{
		opts:      opts,
		log:       opts.Logger,
		pool:      pool,
		path:      redact(opts.DSN),
		renewStop: make(chan struct{}),
		renewDone: make(chan struct{}),

		channel:    channelName(opts.Schema),
		outbox:     make(chan ports.ClusterMessage, opts.NotifyBuffer),
		kick:       make(chan struct{}, 1),
		notifyDone: make(chan struct{}),
		reads:      make(chan struct{}, max(opts.MaxConns/4, 1)),
	}
	mctx, mcancel := context.WithTimeout(ctx, opts.MigrationTimeout)
	err = s.migrate(mctx)
	mcancel()
	if err != nil {
		pool.Close()
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 2*opts.Timeout)
	defer cancel()
	if err := s.takeLease(octx); err != nil {
		pool.Close()
		return nil, err
	}
	s.w = storekit.Start(storekit.Config{MaxBatch: opts.MaxBatch, GatherYields: opts.GatherYields,
		CtxErr: func(err error) error { return unavailable("submit write", err) }}, s.commit)
	s.JobWrites = s.w.JobWrites()
	s.OperatorWrites = s.w.OperatorWrites()
	go s.renewer()
	go s.notifier()
	return s, nil
}

// takeLease records this process as alive. A lease under the same name that
// has not run out means either a restart within the lease (fine) or another
// live process configured with the same instance id (not fine: both would
// treat the other's leases and attempts as their own), so it is logged.
// Lane leases a previous run under this id still holds are freed (keeping
// their saved state): that run is over, and its lanes should not wait for
// their leases to run out.
func (s *Store) takeLease(ctx context.Context) error {
	var live bool
	err := s.pool.QueryRow(ctx, "SELECT until > now() FROM aquifer_owners WHERE owner = $1", s.opts.Owner).Scan(&live)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres %s: read the liveness lease: %w", s.path, err)
	}
	if live {
		s.log.Warn("another process may be using this instance id; instance ids must be unique among processes sharing the database",
			zap.String("owner", s.opts.Owner))
	}
	if err := s.renew(ctx); err != nil {
		return fmt.Errorf("postgres %s: take the liveness lease: %w", s.path, err)
	}
	if _, err := s.pool.Exec(ctx, sqlFreeMyLanes, s.opts.Owner); err != nil {
		return fmt.Errorf("postgres %s: free lane leases of a previous run: %w", s.path, err)
	}
	// Forget instances gone for a day (a job they left in flight still
	// counts as a dead process's: liveness is "has a live lease"), and lanes
	// nobody has held for a week (their saved state is stale by then).
	if _, err := s.pool.Exec(ctx, `DELETE FROM aquifer_owners WHERE until < now() - interval '1 day'`); err != nil {
		s.log.Warn("pruning old liveness leases failed", zap.Error(err))
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM aquifer_lanes WHERE until < now() AND updated_at < now() - interval '7 days'`); err != nil {
		s.log.Warn("pruning old lane leases failed", zap.Error(err))
	}
	return nil
}

const sqlRenew = `INSERT INTO aquifer_owners (owner, until) VALUES ($1, now() + $2 * interval '1 millisecond')
	ON CONFLICT (owner) DO UPDATE SET until = excluded.until`

func (s *Store) renew(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, sqlRenew, s.opts.Owner, s.opts.Lease.Milliseconds()); err != nil {
		return err
	}
	s.renewals.Add(1)
	return nil
}

// renewer extends this process's lease every Lease/3 until Close.
func (s *Store) renewer() {
	defer close(s.renewDone)
	t := time.NewTicker(max(s.opts.Lease/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.renewStop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(s.opts.Timeout, s.opts.Lease/3))
		err := s.renew(ctx)
		cancel()
		if err != nil {
			s.log.Warn("renewing the liveness lease failed; peers treat this process as dead if it runs out",
				zap.Duration("lease", s.opts.Lease), zap.Error(err))
		}
	}
}

// stopRenewing stops the lease renewer (Close does it too).
func (s *Store) stopRenewing() {
	s.renewOnce.Do(func() { close(s.renewStop) })
	<-s.renewDone
}

// Path returns the DSN without its password.
func (s *Store) Path() string { return s.path }

// Close commits pending operations and sends pending broadcasts, stops the
// writer, the notifier and the lease renewer, frees the lane leases this
// process still holds (keeping their saved state; the app normally releases
// them first with their latest state) and its liveness lease, so peers take
// its lanes over and recover its in-flight jobs at once instead of after the
// leases, and closes the pool. A Listen in progress returns. Safe to call
// twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.w.Close()
		<-s.notifyDone
		s.stopRenewing()
		ctx, cancel := context.WithTimeout(context.Background(), min(s.opts.Timeout, 2*time.Second))
		b := &pgx.Batch{}
		b.Queue(sqlFreeMyLanes, s.opts.Owner)
		b.Queue("UPDATE aquifer_owners SET until = now() - interval '1 millisecond' WHERE owner = $1", s.opts.Owner)
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
			s.log.Warn("releasing the leases failed; peers take over after they run out", zap.Error(err))
		}
		cancel()
		s.pool.Close()
	})
	return nil
}

func (s *Store) isClosed() bool { return s.w.Closed() }

// opCtx bounds one operation by Options.Timeout.
func (s *Store) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.Timeout)
}

// unavailable wraps a backend failure: the caller may retry later.
func unavailable(what string, err error) error {
	if err == nil {
		return nil
	}
	var de *domain.Error
	if errors.As(err, &de) && de.Code == domain.CodeUnavailable {
		return err
	}
	return domain.Unavailable("job store unavailable", fmt.Errorf("%s: %w", what, err))
}

// mineOrDead is a condition on jobs.owner that holds for this process ($me)
// and for every process without a live liveness lease (expired, released,
// or pruned from aquifer_owners): the in-flight jobs recovery may touch. The
// ARRAY(...) is evaluated once per statement (an InitPlan), on the database
// clock.
func mineOrDead(me string) string {
	return "(owner = " + me + " OR " + notLive + ")"
}

// notLive is a condition on jobs.owner that holds when the owner has no live
// liveness lease.
const notLive = "owner <> ALL (ARRAY(SELECT owner FROM aquifer_owners WHERE until > now()))"

// ResetStale implements ports.JobStore for the in-flight jobs this process
// runs and those of dead processes. Candidates are found with a read; the
// writer then resets each one only if it is still in flight since before the
// cut-off and still this process's or a dead one's.
func (s *Store) ResetStale(ctx context.Context, p *ports.ResetStaleParams) ([]*domain.Job, error) {
	if s.isClosed() {
		return nil, domain.ErrClosed
	}
	rctx, cancel := s.opCtx(ctx)
	rows, err := s.pool.Query(rctx, "SELECT "+jobColumns+` FROM jobs
		WHERE `+mineOrDead("$1")+`
		AND ready_lane <> '' AND status = 'in_flight' AND dispatched_at < $2 ORDER BY ready_seq`,
		s.opts.Owner, storekit.Millis(p.DispatchedBefore))
	var candidates []*domain.Job
	if err == nil {
		candidates, err = collect(rows)
	}
	cancel()
	if err != nil {
		return nil, unavailable("find stale jobs", err)
	}
	return s.w.ResetStale(ctx, candidates, p)
}

// Purge implements ports.JobStore. Expired rows are found by a read and
// deleted by the writer, which re-checks the expiry.
func (s *Store) Purge(ctx context.Context, p *ports.PurgeParams) (int, error) {
	if s.isClosed() {
		return 0, domain.ErrClosed
	}
	if p.Limit <= 0 {
		return 0, nil
	}
	rctx, cancel := s.opCtx(ctx)
	rows, err := s.pool.Query(rctx, "SELECT id FROM jobs WHERE expires_at <= $1 LIMIT $2", storekit.Millis(p.Now), p.Limit)
	var ids []domain.JobID
	if err == nil {
		ids, err = pgx.CollectRows(rows, pgx.RowTo[domain.JobID])
	}
	cancel()
	if err != nil {
		return 0, unavailable("find expired jobs", err)
	}
	return s.w.Sweep(ctx, &storekit.Op{Kind: storekit.OpPurge, Found: storekit.Found{IDs: ids}, At: p.Now})
}

const (
	sqlGet    = "SELECT " + jobColumns + " FROM jobs WHERE id = $1"
	sqlLookup = "SELECT " + jobColumns + " FROM jobs WHERE user_id = $1 AND idempotent_key = $2"
)

// Get implements ports.JobStore.
func (s *Store) Get(ctx context.Context, id domain.JobID) (*domain.Job, error) {
	return s.getOne(ctx, "get job", sqlGet, string(id))
}

// Lookup implements ports.JobStore.
func (s *Store) Lookup(ctx context.Context, userID, idempotentKey string) (*domain.Job, error) {
	return s.getOne(ctx, "look up job", sqlLookup, userID, idempotentKey)
}

func (s *Store) getOne(ctx context.Context, what, sql string, args ...any) (*domain.Job, error) {
	if s.isClosed() {
		return nil, domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	j, err := scanJob(s.pool.QueryRow(ctx, sql, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, domain.ErrNotFound
	}
	if err != nil {
		return nil, unavailable(what, err)
	}
	if j.Expired(time.Now()) {
		return nil, domain.ErrNotFound
	}
	return j, nil
}

// sqlPosition counts the lane's waiting jobs ahead of $2, of every
// priority: three ranges of jobs_ready (ready_lane, priority, ready_seq),
// one per priority (the jobs_priority constraint keeps priorities to those
// three).
const sqlPosition = `SELECT count(*) FROM jobs
	WHERE ready_lane = $1 AND ready_lane <> '' AND priority IN (-1, 0, 1) AND ready_seq < $2
	AND status <> 'in_flight' AND expires_at > $3`

// Position implements ports.JobStore: every waiting job of the lane counts,
// whoever inserted it, whatever its priority.
func (s *Store) Position(ctx context.Context, lane domain.QueueKey, readySeq int64) (int, error) {
	if s.isClosed() {
		return 0, domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	var n int64
	if err := s.pool.QueryRow(ctx, sqlPosition, string(lane), readySeq, storekit.Millis(time.Now())).Scan(&n); err != nil {
		return 0, unavailable("job position", err)
	}
	return int(n), nil
}

// sqlListReady pages one priority of a lane: its unexpired jobs of
// priority $5 waiting (not in flight) after the cursor, in ready_seq order,
// whoever inserted them. It walks jobs_ready (ready_lane, priority,
// ready_seq) from the cursor and stops after $4 rows. The condition that
// ready_lane is not empty, implied by the lane, is stated so that a
// generic plan of the prepared statement may use the partial index.
const sqlListReady = "SELECT " + jobColumns + ` FROM jobs
	WHERE ready_lane = $1 AND ready_lane <> '' AND priority = $5 AND ready_seq > $2 AND status <> 'in_flight' AND expires_at > $3
	ORDER BY ready_seq LIMIT $4`

// ListReady implements ports.JobStore. It claims nothing: the app reads only
// the lanes whose lease it holds (SyncLeases), and the holder dispatches
// every ready job of its lanes, whichever process inserted it.
func (s *Store) ListReady(ctx context.Context, p *ports.ListReadyParams) ([]*domain.Job, error) {
	if s.isClosed() {
		return nil, domain.ErrClosed
	}
	if p.Limit <= 0 {
		return nil, nil
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, sqlListReady, string(p.Queue), p.AfterSeq, storekit.Millis(p.Now), p.Limit, int16(p.Priority))
	if err != nil {
		return nil, unavailable("list ready jobs", err)
	}
	jobs, err := collect(rows)
	if err != nil {
		return nil, unavailable("list ready jobs", err)
	}
	return jobs, nil
}

// sqlReadyQueues lists the distinct lanes of the ready index by skipping from
// one lane to the next (a loose index scan), so the cost follows the number
// of lanes, not of waiting jobs.
const sqlReadyQueues = `WITH RECURSIVE l(lane) AS (
	(SELECT ready_lane FROM jobs WHERE ready_lane <> '' ORDER BY ready_lane LIMIT 1)
	UNION ALL
	SELECT (SELECT ready_lane FROM jobs WHERE ready_lane <> '' AND ready_lane > l.lane ORDER BY ready_lane LIMIT 1)
	FROM l WHERE l.lane IS NOT NULL
)
SELECT lane FROM l WHERE lane IS NOT NULL`

// ReadyQueues implements ports.JobStore: lanes with work waiting, whoever
// inserted it. The app asks for the leases of their upstreams.
func (s *Store) ReadyQueues(ctx context.Context) ([]domain.QueueKey, error) {
	return s.lanes(ctx, "ready lanes", sqlReadyQueues)
}

func (s *Store) lanes(ctx context.Context, what, sql string, args ...any) ([]domain.QueueKey, error) {
	if s.isClosed() {
		return nil, domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, unavailable(what, err)
	}
	lanes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.QueueKey, error) {
		var l string
		err := r.Scan(&l)
		return domain.QueueKey(l), err
	})
	if err != nil {
		return nil, unavailable(what, err)
	}
	return lanes, nil
}

var _ ports.TenantCounter = (*Store)(nil)

// CountUnfinished implements ports.TenantCounter: a range over the
// idempotency index's user_id prefix (user_id is COLLATE "C").
func (s *Store) CountUnfinished(ctx context.Context, prefix string) (int64, error) {
	if s.isClosed() {
		return 0, domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	var n int64
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			end = end[:i+1]
			break
		}
	}
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE user_id >= $1 AND user_id < $2
		AND status IN ('queued', 'in_flight') AND expires_at > $3`, prefix, string(end), storekit.Millis(time.Now())).Scan(&n)
	if err != nil {
		return 0, unavailable("count a tenant's jobs", err)
	}
	return n, nil
}

// sqlCounts counts the waiting work: the jobs in a lane's queue (jobs_ready's
// rows), and the scheduled jobs, which are queued too but in no lane, apart
// (jobs_scheduled, which includes expires_at: an index-only count).
const sqlCounts = `SELECT count(*) FILTER (WHERE status = 'queued') +
		(SELECT count(*) FROM jobs WHERE ` + scheduledRow + ` AND expires_at > $1),
	count(*) FILTER (WHERE status = 'in_flight'), count(*) FILTER (WHERE delivery_status = 'pending')
	FROM jobs WHERE ready_lane <> '' AND expires_at > $1`

// Counts implements ports.JobStore, store-wide (every owner's work),
// scheduled jobs among the queued.
func (s *Store) Counts(ctx context.Context) (ports.Counts, error) {
	var c ports.Counts
	if s.isClosed() {
		return c, domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	err := s.pool.QueryRow(ctx, sqlCounts, storekit.Millis(time.Now())).Scan(&c.Queued, &c.InFlight, &c.Deliveries)
	if err != nil {
		return ports.Counts{}, unavailable("count jobs", err)
	}
	return c, nil
}

// Ping implements ports.JobStore.
func (s *Store) Ping(ctx context.Context) error {
	if s.isClosed() {
		return domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		return unavailable("ping postgres", err)
	}
	return nil
}

// SizeBytes implements ports.JobStore: the space Aquifer's tables take,
// indexes and TOAST included.
func (s *Store) SizeBytes(ctx context.Context) (int64, error) {
	if s.isClosed() {
		return 0, domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT pg_total_relation_size('jobs') + pg_total_relation_size('aquifer_schema_migrations')
		+ pg_total_relation_size('aquifer_owners') + pg_total_relation_size('aquifer_lanes')
		+ pg_total_relation_size('aquifer_pool_members') + pg_total_relation_size('aquifer_operations')
		+ pg_total_relation_size('aquifer_lane_pauses')`).Scan(&n); err != nil {
		return 0, unavailable("postgres size", err)
	}
	return n, nil
}

var passwordKV = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redact returns dsn without its password.
func redact(dsn string) string {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "(unparsable DSN)"
		}
		if u.User != nil {
			u.User = url.User(u.User.Username())
		}
		if q := u.Query(); q.Has("password") {
			q.Del("password")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return passwordKV.ReplaceAllString(dsn, "${1}xxxxx")
}
