package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// Sync is the SQLite synchronous level.
type Sync string

const (
	// SyncFull fsyncs the WAL on every commit: a commit that returned survives
	// power loss. The default.
	SyncFull Sync = "full"
	// SyncNormal fsyncs only at checkpoints: still crash-safe for the process
	// (kill -9), but the last commits can be lost on power loss or an OS crash.
	SyncNormal Sync = "normal"
)

// Options configure a Store.
type Options struct {
	// Path is the database file; its directory must exist.
	Path string
	// Sync is the durability level; default SyncFull.
	Sync Sync
	// MaxBatch caps how many operations share one transaction; default 1024.
	MaxBatch int
	// ReadConns is the size of the read pool; default 4.
	ReadConns int
	// GatherYields is how many times the writer yields the processor to let
	// more operations join a group before committing it; default 2, negative
	// for none.
	GatherYields int
	// Logger receives store errors; default no-op.
	Logger *zap.Logger
	// WriteProbeAfter is how long the store may go without trying a commit
	// before CheckWrites makes a small probe commit to see whether writes
	// still succeed; default 10 s.
	WriteProbeAfter time.Duration
}

func (o Options) withDefaults() Options {
	if o.Sync == "" {
		o.Sync = SyncFull
	}
	if o.ReadConns <= 0 {
		o.ReadConns = 4
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.WriteProbeAfter <= 0 {
		o.WriteProbeAfter = 10 * time.Second
	}
	return o
}

// Store is a JobStore on SQLite.
type Store struct {
	opts  Options
	log   *zap.Logger
	wdb   *sql.DB // one connection, the writer's (wc)
	wc    *wconn  // the writer goroutine's, below database/sql
	rdb   *sql.DB // read pool
	stmts writeStmts
	reads readStmts

	closeOnce sync.Once // closes wc, once the writer has stopped
	closeErr  error

	// seq is the writer's counter for seq and ready_seq. Only the writer
	// goroutine touches it.
	seq int64

	w                       *storekit.Writer // the single writer; its commit is Store.commit
	storekit.JobWrites                       // Insert, Delete, MarkInFlight, Requeue, Finish, FinishDelivery, RecoverInFlight
	storekit.OperatorWrites                  // Retry, SaveOperation, RunBatch, PauseLane, ResumeLane
}

// Stats are cumulative writer counters.
type Stats struct {
	Commits int64 // transactions committed (one WAL fsync each under SyncFull)
	Ops     int64 // operations in them
	// Pages are the database pages those commits wrote to the WAL (each
	// one a frame of the page size plus a 24-byte header): Pages/Ops is
	// the write amplification of an operation.
	Pages int64
}

// Stats returns the writer counters: Ops/Commits is the mean group size.
func (s *Store) Stats() Stats {
	commits, ops := s.w.Stats()
	return Stats{Commits: commits, Ops: ops, Pages: s.wc.pages.Load()}
}

var _ ports.JobStore = (*Store)(nil)

// Open opens (creating if needed) the database at opts.Path and starts the
// writer.
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	if opts.Path == "" {
		return nil, errors.New("sqlite: empty path")
	}
	if opts.Sync != SyncFull && opts.Sync != SyncNormal {
		return nil, fmt.Errorf("sqlite: unknown sync level %q (want full or normal)", opts.Sync)
	}
	wdb, err := sql.Open("sqlite", dsn(opts.Path, opts.Sync, false))
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", opts.Path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	s := &Store{opts: opts, log: opts.Logger, wdb: wdb}
	if err := s.migrate(ctx); err != nil {
		wdb.Close()
		return nil, err
	}
	if s.rdb, err = sql.Open("sqlite", dsn(opts.Path, opts.Sync, true)); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open sqlite %s for reading: %w", opts.Path, err)
	}
	s.rdb.SetMaxOpenConns(opts.ReadConns)
	s.rdb.SetMaxIdleConns(opts.ReadConns)
	if s.wc, err = openWconn(ctx, wdb); err != nil {
		wdb.Close()
		s.rdb.Close()
		return nil, err
	}
	err = s.stmts.prepare(ctx, s.wc)
	if err == nil {
		err = s.reads.prepare(ctx, s.rdb)
	}
	if err != nil {
		err = errors.Join(err, s.wc.close())
		wdb.Close()
		s.rdb.Close()
		return nil, err
	}
	s.w = storekit.Start(storekit.Config{MaxBatch: opts.MaxBatch, GatherYields: opts.GatherYields, Encode: encode}, s.commit)
	s.JobWrites, s.OperatorWrites = s.w.JobWrites(), s.w.OperatorWrites()
	return s, nil
}

func dsn(path string, sync Sync, readOnly bool) string {
	var b strings.Builder
	b.WriteString("file:" + path + "?_txlock=immediate")
	b.WriteString("&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	b.WriteString("&_pragma=synchronous(" + strings.ToUpper(string(sync)) + ")")
	b.WriteString("&_pragma=journal_size_limit(67108864)&_pragma=temp_store(MEMORY)")
	// 8 MiB of page cache per connection, the writer's included. The
	// writer's working set is the right edge of the table and its indexes
	// plus the head of each lane, a few hundred pages even at a million
	// queued jobs, and a page it lacks is one pread from the OS page cache.
	// A larger cache costs it CPU at commits: when a B-tree rebalance
	// renumbers pages, SQLite parks one under the lock-byte page's number
	// (page 262,145 with 4 KiB pages) for a moment, the page cache's
	// highest key stays there, and the commit's truncation of the cache
	// above the database's size then walks every cached page (a 32 MiB
	// writer cache spent 2.8 % of the daemon's CPU there under the e2e
	// bench, 8 MiB about 1 %; docs/BENCHMARKS.md, a thirteenth look).
	b.WriteString("&_pragma=cache_size(-8192)")
	if readOnly {
		b.WriteString("&_pragma=query_only(1)")
	}
	return b.String()
}

// Path returns the database file.
func (s *Store) Path() string { return s.opts.Path }

// Close commits pending operations, stops the writer and closes the database.
func (s *Store) Close() error {
	s.w.Close()
	s.closeOnce.Do(func() { s.closeErr = s.wc.close() })
	// Closing twice is harmless for database/sql.
	return errors.Join(s.closeErr, s.wdb.Close(), s.rdb.Close())
}

// ResetStale implements ports.JobStore. Candidates are found on a read
// connection; the writer then resets each one only if it is still in flight
// since before the cut-off.
func (s *Store) ResetStale(ctx context.Context, p *ports.ResetStaleParams) ([]*domain.Job, error) {
	rows, err := s.rdb.QueryContext(ctx, "SELECT "+jobColumns+
		" FROM jobs WHERE ready_lane != '' AND status = 'in_flight' AND dispatched_at < ? ORDER BY ready_seq",
		storekit.Millis(p.DispatchedBefore))
	if err != nil {
		return nil, fmt.Errorf("find stale jobs: %w", err)
	}
	candidates, err := collect(rows)
	if err != nil {
		return nil, err
	}
	return s.w.ResetStale(ctx, candidates, p)
}

// Purge implements ports.JobStore. Expired rows are found by a scan on a read
// connection and deleted by the writer, which re-checks the expiry.
func (s *Store) Purge(ctx context.Context, p *ports.PurgeParams) (int, error) {
	seqs, err := s.seqs(ctx, "find expired jobs", "SELECT seq FROM jobs WHERE expires_at <= ? LIMIT ?", storekit.Millis(p.Now), p.Limit)
	if err != nil {
		return 0, err
	}
	return s.w.Sweep(ctx, &storekit.Op{Kind: storekit.OpPurge, Found: storekit.Found{Seqs: seqs}, At: p.Now})
}

// seqs reads the seq column of a query's rows, on a read connection.
func (s *Store) seqs(ctx context.Context, what, query string, args ...any) ([]int64, error) {
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var seqs []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return seqs, nil
}

var (
	_ ports.LedgerStore   = (*Store)(nil)
	_ ports.TenantCounter = (*Store)(nil)
)

// countUnfinishedSQL reads a range of user_ids. The unary plus keeps SQLite
// from reading jobs_status instead: that would visit every unfinished job of
// every tenant, where the range visits one tenant's jobs (TestQueryPlans).
const countUnfinishedSQL = `SELECT count(*) FROM jobs WHERE user_id >= ? AND user_id < ?
	AND +status IN ('queued', 'in_flight') AND (expires_at = 0 OR expires_at > ?)`

// CountUnfinished implements ports.TenantCounter: a range over the user_id
// prefix in jobs_user.
func (s *Store) CountUnfinished(ctx context.Context, prefix string) (int64, error) {
	var n int64
	err := s.rdb.QueryRowContext(ctx, countUnfinishedSQL, prefix, prefixEnd(prefix), storekit.Millis(time.Now())).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count a tenant's jobs: %w", err)
	}
	return n, nil
}

// prefixEnd returns the least string greater than every string starting
// with p ("\xff…" prefixes aside, which scoped names never are).
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return p + "\xff"
}

// Ledger implements ports.LedgerStore.
func (s *Store) Ledger(ctx context.Context, p *ports.LedgerParams) ([]ports.LedgerEntry, error) {
	after, err := seqCursor(p.After)
	if err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT seq, id, user_id, idempotent_key, status FROM jobs
		WHERE seq > ? AND (expires_at = 0 OR expires_at > ?) ORDER BY seq LIMIT ?`, after, storekit.Millis(p.Now), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	defer rows.Close()
	var out []ports.LedgerEntry
	for rows.Next() {
		var e ports.LedgerEntry
		var id, status string
		if err := rows.Scan(&e.Seq, &id, &e.UserID, &e.IdempotentKey, &status); err != nil {
			return nil, fmt.Errorf("read ledger: %w", err)
		}
		e.ID, e.Status, e.Cursor = domain.JobID(id), domain.Status(status), strconv.FormatInt(e.Seq, 10)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	return out, nil
}

// seqCursor reads a ledger cursor (a seq).
func seqCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(c, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad ledger cursor %q", c)
	}
	return n, nil
}

// DeleteFinished implements ports.LedgerStore. Candidates are found on a
// read connection; the writer deletes them re-checking that each is still
// finished.
func (s *Store) DeleteFinished(ctx context.Context, throughSeq int64, limit int) (int, error) {
	seqs, err := s.seqs(ctx, "find finished jobs", `SELECT seq FROM jobs WHERE seq <= ? AND status IN ('completed', 'failed')
		AND ready_lane = '' LIMIT ?`, throughSeq, limit)
	if err != nil {
		return 0, err
	}
	return s.w.Sweep(ctx, &storekit.Op{Kind: storekit.OpDeleteFinished, Found: storekit.Found{Seqs: seqs}, Seq: throughSeq})
}

// Get implements ports.JobStore.
func (s *Store) Get(ctx context.Context, id domain.JobID) (*domain.Job, error) {
	j, err := scanJob(s.reads.get.QueryRowContext(ctx, string(id)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, domain.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get job: %w", err)
	}
	if j.Expired(time.Now()) {
		return nil, domain.ErrNotFound
	}
	return j, nil
}

// Lookup implements ports.JobStore.
func (s *Store) Lookup(ctx context.Context, userID, idempotentKey string) (*domain.Job, error) {
	j, err := scanJob(s.reads.lookup.QueryRowContext(ctx, userID, idempotentKey))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, domain.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("look up job: %w", err)
	}
	if j.Expired(time.Now()) {
		return nil, domain.ErrNotFound
	}
	return j, nil
}

// Position implements ports.JobStore.
func (s *Store) Position(ctx context.Context, lane domain.QueueKey, readySeq int64) (int, error) {
	var n int
	if err := s.reads.position.QueryRowContext(ctx, string(lane), readySeq, storekit.Millis(time.Now())).Scan(&n); err != nil {
		return 0, fmt.Errorf("job position: %w", err)
	}
	return n, nil
}

// ListReady implements ports.JobStore.
func (s *Store) ListReady(ctx context.Context, p *ports.ListReadyParams) ([]*domain.Job, error) {
	rows, err := s.reads.listReady.QueryContext(ctx, string(p.Queue), int(p.Priority), p.AfterSeq, storekit.Millis(p.Now), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list ready jobs: %w", err)
	}
	return collect(rows)
}

// readyQueuesSQL lists the lanes with a job in jobs_ready (scheduled jobs
// are in none).
const readyQueuesSQL = "SELECT DISTINCT ready_lane FROM jobs WHERE ready_lane != ''"

// ReadyQueues implements ports.JobStore.
func (s *Store) ReadyQueues(ctx context.Context) ([]domain.QueueKey, error) {
	rows, err := s.rdb.QueryContext(ctx, readyQueuesSQL)
	if err != nil {
		return nil, fmt.Errorf("ready lanes: %w", err)
	}
	defer rows.Close()
	var lanes []domain.QueueKey
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return nil, fmt.Errorf("ready lanes: %w", err)
		}
		lanes = append(lanes, domain.QueueKey(l))
	}
	return lanes, rows.Err()
}

// countsSQL counts the jobs in lanes from jobs_ready alone (it carries
// status and expires_at) and, as queued too, the scheduled ones from
// jobs_scheduled and their rows (few; TestQueryPlans; INDEXED BY as in the
// scheduler's reads). A job in a lane with a finished status is one whose
// delivery is pending: finishing a job puts it in the receiver's lane only
// with its delivery pending (deliveryDue), and the end of the delivery
// takes it out of the lane.
const countsSQL = `SELECT
	coalesce(sum(status = 'queued'), 0) + (SELECT count(*) FROM jobs INDEXED BY jobs_scheduled
		WHERE ready_lane = '' AND status = 'queued' AND not_before > 0 AND expires_at > ?1),
	coalesce(sum(status = 'in_flight'), 0), coalesce(sum(status NOT IN ('queued', 'in_flight')), 0)
	FROM jobs INDEXED BY jobs_ready WHERE ready_lane != '' AND expires_at > ?1`

// Counts implements ports.JobStore. Scheduled jobs count as queued.
func (s *Store) Counts(ctx context.Context) (ports.Counts, error) {
	var c ports.Counts
	err := s.rdb.QueryRowContext(ctx, countsSQL, storekit.Millis(time.Now())).Scan(&c.Queued, &c.InFlight, &c.Deliveries)
	if err != nil {
		return c, fmt.Errorf("count jobs: %w", err)
	}
	return c, nil
}

// Ping implements ports.JobStore.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.rdb.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("ping sqlite: %w", err)
	}
	if s.w.Closed() {
		return domain.ErrClosed
	}
	return nil
}

// SizeBytes implements ports.JobStore: the bytes of pages in use (freed pages
// do not count, so the figure shrinks when jobs are purged) plus the WAL.
func (s *Store) SizeBytes(ctx context.Context) (int64, error) {
	var pages, free, size int64
	if err := s.rdb.QueryRowContext(ctx,
		"SELECT (SELECT page_count FROM pragma_page_count), (SELECT freelist_count FROM pragma_freelist_count), (SELECT page_size FROM pragma_page_size)").
		Scan(&pages, &free, &size); err != nil {
		return 0, fmt.Errorf("sqlite size: %w", err)
	}
	total := (pages - free) * size
	if fi, err := os.Stat(s.opts.Path + "-wal"); err == nil {
		total += fi.Size()
	}
	return total, nil
}

// The lanes' reads of their queues. SQLite uses the partial index
// jobs_ready only for a query that states the index's condition (a
// ready_lane that is not empty) word for word: "ready_lane = ?" alone does
// not prove it, and the plan would scan the table (TestQueryPlans).
// ListReady reads one priority's range of the lane; Position counts the
// jobs ahead in all three ranges (the IN list makes it three range reads,
// where leaving priority out would read the lane's whole queue), which is
// why Insert stores no priority but the three.
const (
	positionSQL = `SELECT count(*) FROM jobs WHERE ready_lane = ? AND ready_lane != '' AND priority IN (1, 0, -1)
		AND ready_seq < ? AND status != 'in_flight' AND expires_at > ?`
	listReadySQL = "SELECT " + jobColumns + ` FROM jobs WHERE ready_lane = ? AND ready_lane != '' AND priority = ?
		AND ready_seq > ? AND status != 'in_flight' AND expires_at > ? ORDER BY ready_seq LIMIT ?`
)

// The scheduler's reads. Each repeats its partial index's condition word
// for word, as the lanes' reads do, so that SQLite knows the index holds
// every row asked for, and names the index: without statistics SQLite
// prefers the equality on status and would read every queued job through
// jobs_status, then sort them (INDEXED BY also makes a query that cannot
// use its index fail to prepare, at Open, instead of scanning). promoteSQL
// runs in the writer's transaction (PromoteDue); nextDueSQL reads
// jobs_scheduled alone (TestQueryPlans).
const (
	nextDueSQL = `SELECT not_before FROM jobs INDEXED BY jobs_scheduled
		WHERE ready_lane = '' AND status = 'queued' AND not_before > 0 ORDER BY not_before LIMIT 1`
	promoteSQL = "SELECT " + jobColumns + ` FROM jobs INDEXED BY jobs_scheduled
		WHERE ready_lane = '' AND status = 'queued' AND not_before > 0 AND not_before <= ?
		ORDER BY not_before, seq LIMIT ?`
	overdueSQL = "SELECT " + jobColumns + ` FROM jobs INDEXED BY jobs_deadline
		WHERE deadline > 0 AND status = 'queued' AND deadline <= ? AND (expires_at = 0 OR expires_at > ?)
		ORDER BY deadline, seq LIMIT ?`
)

// NextDue implements ports.ScheduleStore: the first entry of
// jobs_scheduled, or the zero time when it is empty.
func (s *Store) NextDue(ctx context.Context) (time.Time, error) {
	var next int64
	switch err := s.reads.nextDue.QueryRowContext(ctx).Scan(&next); {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("next due job: %w", err)
	}
	return storekit.FromMillis(next), nil
}

// Overdue implements ports.ScheduleStore: the start of jobs_deadline, up to
// p.Now. It only reads; the caller fails the jobs it finds through Finish,
// which re-checks that each is still queued.
func (s *Store) Overdue(ctx context.Context, p *ports.OverdueParams) ([]*domain.Job, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	now := storekit.Millis(p.Now)
	rows, err := s.reads.overdue.QueryContext(ctx, now, now, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list overdue jobs: %w", err)
	}
	return collect(rows)
}

// readStmts are prepared once; database/sql re-prepares them lazily on each
// pooled connection, so reads never re-parse SQL.
type readStmts struct {
	get, lookup, listReady, position, nextDue, overdue *sql.Stmt
}

func (r *readStmts) prepare(ctx context.Context, db *sql.DB) error {
	var err error
	if r.get, err = db.PrepareContext(ctx, "SELECT "+jobColumns+" FROM jobs WHERE id = ?"); err != nil {
		return fmt.Errorf("prepare sqlite reads: %w", err)
	}
	if r.lookup, err = db.PrepareContext(ctx, "SELECT "+jobColumns+" FROM jobs WHERE user_id = ? AND idempotent_key = ?"); err != nil {
		return fmt.Errorf("prepare sqlite reads: %w", err)
	}
	if r.position, err = db.PrepareContext(ctx, positionSQL); err != nil {
		return fmt.Errorf("prepare sqlite reads: %w", err)
	}
	if r.listReady, err = db.PrepareContext(ctx, listReadySQL); err != nil {
		return fmt.Errorf("prepare sqlite reads: %w", err)
	}
	if r.nextDue, err = db.PrepareContext(ctx, nextDueSQL); err != nil {
		return fmt.Errorf("prepare sqlite reads: %w", err)
	}
	if r.overdue, err = db.PrepareContext(ctx, overdueSQL); err != nil {
		return fmt.Errorf("prepare sqlite reads: %w", err)
	}
	return nil
}
