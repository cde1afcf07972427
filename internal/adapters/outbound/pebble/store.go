package pebble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// Options configure a Store.
type Options struct {
	// Dir is the Pebble directory; created if missing. Required.
	Dir string
	// WALMinSyncInterval is the least time between two WAL fsyncs (Pebble's
	// own group commit): a commit that asks for a sync sooner waits for the
	// rest of the interval. 0 = no wait, which is what this store wants: its
	// writer already groups every waiting op into one commit and has only
	// one commit in flight, so there is nothing for Pebble to add to a
	// delayed fsync and an interval only adds latency (5 ms made inserts
	// about 6 times slower in BenchmarkInsertParallel).
	WALMinSyncInterval time.Duration
	// MaxBatch caps how many operations share one commit; default 1024.
	MaxBatch int
	// GatherYields is how many times the writer yields the processor to let
	// more operations join a group before committing it; default 2, negative
	// for none.
	GatherYields int
	// CacheBytes is the size of Pebble's block cache; default 32 MiB. Pebble
	// charges its memtables to the same cache, so the store adds room for
	// them (2 × 16 MiB) on top.
	CacheBytes int64
	// Logger receives the store's and Pebble's own messages; default no-op.
	Logger *zap.Logger
	// WriteProbeAfter is how long the store may go without trying a commit
	// before CheckWrites makes a small probe commit to see whether writes
	// still succeed; default 10 s.
	WriteProbeAfter time.Duration

	fs vfs.FS // the filesystem; vfs.Default unless a test injects faults
	// migrateChunk is how many records one batch of a migration indexes;
	// default 4096.
	migrateChunk int
	// migrateHook, if set, is called after each chunk a migration commits
	// (done: records indexed so far); an error stops the migration, as a
	// crash would (tests).
	migrateHook func(done int) error
}

func (o Options) withDefaults() Options {
	if o.CacheBytes <= 0 {
		o.CacheBytes = 32 << 20
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.WriteProbeAfter <= 0 {
		o.WriteProbeAfter = 10 * time.Second
	}
	if o.fs == nil {
		o.fs = vfs.Default
	}
	if o.migrateChunk <= 0 {
		o.migrateChunk = 4096
	}
	return o
}

// memTableSize is the size of Pebble's memtables. 4 MiB (Pebble's default)
// measured slower under sustained writes; 64 MiB barely faster than 16.
const memTableSize = 16 << 20

// Store is a JobStore on Pebble.
type Store struct {
	opts Options
	log  *zap.Logger
	// db is the open database. Only the writer replaces it (reopening it
	// after a failed commit), under dbMu; readers hold dbMu (read) while
	// they use it. nil while a reopen has not succeeded.
	db   *pebble.DB
	dbMu sync.RWMutex

	// Owned by the writer goroutine.
	seq        int64     // the counter for seq and ready_seq: the highest assigned
	kbuf       []byte    // scratch for keys
	lbuf       []byte    // scratch for the record keys of loads (wbatch.load)
	ebuf       []byte    // scratch for expiry keys
	vbuf       []byte    // scratch for records
	rbuf       []byte    // scratch for ready-index values
	sbuf       []byte    // scratch for x/ and i/ values
	lastReopen time.Time // the latest try at reopening a failed database
	readOnly   bool      // db is the read-only stand-in for a database whose commit failed (demote)

	failed atomic.Pointer[error] // set when a commit failed: this DB cannot take more writes; cleared by a reopen

	// w is the single writer; its commit is Store.commit. Every use of db
	// is between w.Enter and w.Exit, so none overlaps Close.
	w                       *storekit.Writer
	storekit.JobWrites      // Insert, Delete, MarkInFlight, Requeue, Finish, FinishDelivery, RecoverInFlight
	storekit.OperatorWrites // Retry, SaveOperation, RunBatch, PauseLane, ResumeLane
	closeOnce               sync.Once
	closeErr                error
}

// Stats are cumulative writer counters.
type Stats struct {
	Commits int64 `json:"commits"` // groups committed (one batch and WAL fsync each, unless it wrote nothing)
	Ops     int64 `json:"ops"`     // operations in them
}

// Stats returns the writer counters: Ops/Commits is the mean group size.
func (s *Store) Stats() Stats {
	commits, ops := s.w.Stats()
	return Stats{Commits: commits, Ops: ops}
}

var _ ports.JobStore = (*Store)(nil)

// Open opens (creating if needed) the store in o.Dir and starts the writer.
func Open(ctx context.Context, o Options) (*Store, error) {
	o = o.withDefaults()
	if o.Dir == "" {
		return nil, errors.New("pebble: empty directory")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := o.fs.MkdirAll(o.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("create pebble directory %s: %w", o.Dir, err)
	}
	s := &Store{opts: o, log: o.Logger}
	db, err := s.openDB(false)
	if err != nil {
		return nil, fmt.Errorf("open pebble store %s: %w", o.Dir, err)
	}
	s.db = db
	if err := s.init(); err != nil {
		_ = db.Close()
		return nil, err
	}
	s.w = storekit.Start(storekit.Config{MaxBatch: o.MaxBatch, GatherYields: o.GatherYields}, s.commit)
	s.JobWrites = s.w.JobWrites()
	s.OperatorWrites = s.w.OperatorWrites()
	return s, nil
}

// openDB opens the Pebble database in the store's directory, for reads
// only if readOnly (which writes nothing to the disk).
func (s *Store) openDB(readOnly bool) (*pebble.DB, error) {
	o := s.opts
	// Pebble charges its memtables (up to MemTableStopWritesThreshold of
	// them) to the block cache, so the cache is made that much larger.
	const memTables = 2
	cache := pebble.NewCache(o.CacheBytes + memTables*memTableSize)
	defer cache.Unref() // the DB holds its own reference
	popts := &pebble.Options{
		Cache:                       cache,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      zapLogger{o.Logger.WithOptions(zap.AddCallerSkip(1))},
		MemTableSize:                memTableSize,
		MemTableStopWritesThreshold: memTables,
		FS:                          o.fs,
		ReadOnly:                    readOnly,
		// The x/ and i/ entries are single-deleted (wbatch.sdel): Pebble
		// reports a delete that did not meet exactly one write, which
		// would mean an index entry could come back.
		EventListener: &pebble.EventListener{PossibleAPIMisuse: func(info pebble.PossibleAPIMisuseInfo) {
			o.Logger.Error("pebble reports a possible misuse of single deletes", zap.Stringer("info", info))
		}},
	}
	// Tables that span little: each holds one key prefix (prefixSpans), and
	// a flush ends a table where it would overlap more than ten L0 targets
	// (2.5 MiB) of the base level (Pebble widens that when the base level
	// is so large that it would make too many tables). Without both, one
	// flushed table covers every index's new entries and, with a backlog
	// draining beside new work, each index's oldest ones too: every
	// compaction of it rewrote the backlog's entries between them (see
	// "Flushes and compactions" in the package documentation). The deeper
	// levels keep Pebble's default sizes, which TargetFileSizes would
	// otherwise derive from L0's.
	popts.Experimental.SpanPolicyFunc = prefixSpans
	popts.Experimental.ValueSeparationPolicy = bodySeparation
	popts.TargetFileSizes[0] = l0TargetFileSize
	for i := 1; i < len(popts.TargetFileSizes); i++ {
		popts.TargetFileSizes[i] = 2 << 20 << i
	}
	// L0 is compacted into the base level at four sublevels, not two
	// (l0CompactionSublevels; "Flushes and compactions" in the package
	// documentation).
	popts.L0CompactionThreshold = 2 * l0CompactionSublevels
	popts.L0StopWritesThreshold = l0StopWritesThreshold
	if d := o.WALMinSyncInterval; d > 0 {
		popts.WALMinSyncInterval = func() time.Duration { return d }
	}
	// Bloom filters spare point lookups (mostly of idempotency keys that
	// are not there) from reading blocks of every level.
	for i := range popts.Levels {
		popts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	return pebble.Open(o.Dir, popts)
}

// init checks the layout version (writing it into a new store) and loads the
// writer's counter.
func (s *Store) init() error {
	v, err := get(s.db, keyFormat)
	if err != nil {
		return fmt.Errorf("read layout version of %s: %w", s.opts.Dir, err)
	}
	switch {
	case v == nil:
		empty, err := s.empty()
		if err != nil {
			return err
		}
		if !empty {
			return fmt.Errorf("%s holds a Pebble database that is not an aquifer job store", s.opts.Dir)
		}
		if err := s.db.Set(keyFormat, []byte{layoutVersion}, pebble.Sync); err != nil {
			return fmt.Errorf("initialise %s: %w", s.opts.Dir, err)
		}
	case len(v) == 1 && v[0] >= layoutVersionV2 && v[0] <= layoutVersionV5:
		if v[0] == layoutVersionV2 {
			if err := s.migrate(); err != nil {
				return fmt.Errorf("migrate %s from job store layout %d to %d: %w", s.opts.Dir, layoutVersionV2, layoutVersionV3, err)
			}
		}
		if v[0] <= layoutVersionV3 {
			if err := s.migrate3(); err != nil {
				return fmt.Errorf("migrate %s from job store layout %d to %d: %w", s.opts.Dir, layoutVersionV3, layoutVersionV4, err)
			}
		}
		if v[0] <= layoutVersionV4 {
			if err := s.migrate4(); err != nil {
				return fmt.Errorf("migrate %s from job store layout %d to %d: %w", s.opts.Dir, layoutVersionV4, layoutVersionV5, err)
			}
		}
		if err := s.migrate5(); err != nil {
			return fmt.Errorf("migrate %s from job store layout %d to %d: %w", s.opts.Dir, layoutVersionV5, layoutVersion, err)
		}
	case len(v) != 1 || v[0] != layoutVersion:
		return fmt.Errorf("%s has job store layout %v; this aquiferd understands %d and migrates %d to %d (downgrades are not supported)",
			s.opts.Dir, v, layoutVersion, layoutVersionV2, layoutVersionV5)
	}
	if v, err = get(s.db, keySeq); err != nil {
		return fmt.Errorf("read sequence of %s: %w", s.opts.Dir, err)
	}
	if v != nil {
		seq, ok := parseSeq(v)
		if !ok {
			return fmt.Errorf("read sequence of %s: %w", s.opts.Dir, errCorrupt)
		}
		s.seq = seq
	}
	return nil
}

func (s *Store) empty() (bool, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return false, err
	}
	has := it.First()
	return !has, errors.Join(it.Error(), it.Close())
}

// Path returns the store's directory.
func (s *Store) Path() string { return s.opts.Dir }

// Close commits pending operations, stops the writer and closes the
// database. Later calls return the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.w.Close() // no new reads or submissions; none running; everything submitted committed
		if s.db == nil {
			return // a reopen after failed writes did not succeed: nothing is open
		}
		if s.readOnly {
			s.closeErr = closeBroken(s.db)
			return
		}
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("close pebble store %s: %w", s.opts.Dir, err)
		}
	})
	return s.closeErr
}

// ResetStale implements ports.JobStore. Candidates are found by a read of the
// status index's in-flight range (inFlight); the writer then resets each one
// only if it is still in flight since before the cut-off.
func (s *Store) ResetStale(ctx context.Context, p *ports.ResetStaleParams) ([]*domain.Job, error) {
	var candidates []*domain.Job
	err := s.read(func() error {
		flying, err := inFlight(s.db)
		if err != nil {
			return err
		}
		for _, id := range flying {
			if p.Exclude[id] {
				continue
			}
			j, err := loadMeta(s.db, jobKey(nil, id))
			if err != nil {
				return err
			}
			if j != nil && j.Status == domain.StatusInFlight && j.DispatchedAt.Before(p.DispatchedBefore) {
				candidates = append(candidates, j)
			}
		}
		return nil
	})
	if err != nil {
		return nil, wrapRead("find stale jobs", err)
	}
	return s.w.ResetStale(ctx, candidates, p)
}

// Purge implements ports.JobStore. Expired jobs are found in the expiry
// indexes (finished jobs first, then waiting ones) and deleted by the
// writer, which re-checks each one's expiry.
func (s *Store) Purge(ctx context.Context, p *ports.PurgeParams) (int, error) {
	if p.Limit <= 0 {
		return 0, nil
	}
	var keys [][]byte
	err := s.read(func() error {
		for _, prefix := range [][]byte{prefixExpiry, prefixWait} {
			upper := expiryKeyIn(nil, prefix, storekit.Millis(p.Now)+1, "") // expires_at <= now
			it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
			if err != nil {
				return err
			}
			for ok := it.First(); ok && len(keys) < p.Limit; ok = it.Next() {
				keys = append(keys, append([]byte(nil), it.Key()...))
			}
			if err := errors.Join(it.Error(), it.Close()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, wrapRead("find expired jobs", err)
	}
	return s.w.Sweep(ctx, &storekit.Op{Kind: storekit.OpPurge, Found: storekit.Found{Keys: keys}, At: p.Now})
}

var _ ports.LedgerStore = (*Store)(nil)

// Ledger implements ports.LedgerStore: jobs in id order (ids are
// time-ordered); the cursor is the job id.
func (s *Store) Ledger(_ context.Context, p *ports.LedgerParams) ([]ports.LedgerEntry, error) {
	var out []ports.LedgerEntry
	err := s.read(func() error {
		lower := prefixJob
		if p.After != "" {
			lower = append(jobKey(nil, domain.JobID(p.After)), 0) // just past the cursor's record
		}
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefixJob)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok && len(out) < p.Limit; ok = it.Next() {
			j, err := decodeMeta(it.Value())
			if err != nil {
				return errors.Join(err, it.Close())
			}
			if j.Expired(p.Now) {
				continue
			}
			out = append(out, ports.LedgerEntry{Cursor: string(j.ID), Seq: j.Seq, ID: j.ID, UserID: j.UserID,
				IdempotentKey: j.IdempotentKey, Status: j.Status})
		}
		return errors.Join(it.Error(), it.Close())
	})
	if err != nil {
		return nil, wrapRead("read ledger", err)
	}
	return out, nil
}

// DeleteFinished implements ports.LedgerStore. Candidates are found by a
// scan of the records; the writer deletes them, re-checking each.
func (s *Store) DeleteFinished(ctx context.Context, throughSeq int64, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var ids []domain.JobID
	err := s.read(func() error {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefixJob, UpperBound: prefixEnd(prefixJob)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok && len(ids) < limit; ok = it.Next() {
			j, err := decodeMeta(it.Value())
			if err != nil {
				return errors.Join(err, it.Close())
			}
			if j.Seq <= throughSeq && j.Status.Terminal() && j.ReadyQueue == "" {
				ids = append(ids, j.ID)
			}
		}
		return errors.Join(it.Error(), it.Close())
	})
	if err != nil {
		return 0, wrapRead("find finished jobs", err)
	}
	return s.w.Sweep(ctx, &storekit.Op{Kind: storekit.OpDeleteFinished, Found: storekit.Found{IDs: ids}, Seq: throughSeq})
}

// errReopening is what reads get while the database is closed for a
// reopen that has not succeeded yet.
var errReopening = errors.New("pebble store is closed after failed writes; reopening once the disk takes writes again")

// read runs fn while the database is open.
func (s *Store) read(fn func() error) error {
	if err := s.w.Enter(); err != nil {
		return err
	}
	defer s.w.Exit()
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	if s.db == nil {
		return errReopening
	}
	return fn()
}

// Get implements ports.JobStore.
func (s *Store) Get(_ context.Context, id domain.JobID) (*domain.Job, error) {
	var j *domain.Job
	err := s.read(func() error {
		var err error
		j, err = loadJob(s.db, id)
		return err
	})
	return live(j, err, "get job")
}

// Lookup implements ports.JobStore.
func (s *Store) Lookup(_ context.Context, userID, idempotentKey string) (*domain.Job, error) {
	var j *domain.Job
	err := s.read(func() error {
		id, err := get(s.db, idemKey(nil, userID, idempotentKey))
		if err != nil || id == nil {
			return err
		}
		j, err = loadJob(s.db, domain.JobID(id))
		return err
	})
	return live(j, err, "look up job")
}

// live turns a read's outcome into Get's answer: ErrNotFound for a job that
// is missing or expired.
func live(j *domain.Job, err error, what string) (*domain.Job, error) {
	switch {
	case errors.Is(err, domain.ErrClosed):
		return nil, err
	case err != nil:
		return nil, domain.Unavailable(what+" failed", err)
	case j == nil || j.Expired(time.Now()):
		return nil, domain.ErrNotFound
	}
	return j, nil
}

// Position implements ports.JobStore: it counts ready-index entries of the
// lane before readySeq that are waiting and unexpired, in each priority's
// range, reading no record.
func (s *Store) Position(_ context.Context, lane domain.QueueKey, readySeq int64) (int, error) {
	n := 0
	err := s.read(func() error {
		now := storekit.Millis(time.Now())
		for _, p := range domain.Priorities {
			it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: priorityPrefix(nil, lane, p),
				UpperBound: readyKey(nil, lane, p, max(readySeq, 0))})
			if err != nil {
				return err
			}
			for ok := it.First(); ok; ok = it.Next() {
				if state, exp, _, ok := parseReady(it.Value()); ok && state != stInFlight && liveAt(exp, now) {
					n++
				}
			}
			if err := errors.Join(it.Error(), it.Close()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, wrapRead("job position", err)
	}
	return n, nil
}

func wrapRead(what string, err error) error {
	if errors.Is(err, domain.ErrClosed) {
		return err
	}
	return domain.Unavailable(what+" failed", err)
}

// ListReady implements ports.JobStore: one priority's range of the lane in
// the ready index, from just after p.AfterSeq, in one snapshot. The
// entries' records are read through one iterator over j/, and their bodies
// under b/ through another (bodyReader): a lane's jobs are ready in about
// the order they were inserted, which is their ids' order, so each seek
// moves forward from the last.
func (s *Store) ListReady(_ context.Context, p *ports.ListReadyParams) ([]*domain.Job, error) {
	if p.Limit <= 0 || !p.Priority.Valid() {
		return nil, nil
	}
	var out []*domain.Job
	err := s.read(func() error {
		snap := s.db.NewSnapshot()
		defer snap.Close()
		lower := readyKey(nil, p.Queue, p.Priority, max(p.AfterSeq, 0)+1)
		it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(priorityPrefix(nil, p.Queue, p.Priority))})
		if err != nil {
			return err
		}
		recs, err := snap.NewIter(&pebble.IterOptions{LowerBound: prefixJob, UpperBound: prefixEnd(prefixJob)})
		if err != nil {
			return errors.Join(err, it.Close())
		}
		bodies := bodyReader{r: snap}
		closeAll := func(err error) error { return errors.Join(err, it.Error(), bodies.close(), recs.Close(), it.Close()) }
		var key []byte
		now := storekit.Millis(p.Now)
		for ok := it.First(); ok && len(out) < p.Limit; ok = it.Next() {
			state, exp, id, ok := parseReady(it.Value())
			if !ok || state == stInFlight || !liveAt(exp, now) {
				continue
			}
			_, _, readySeq, _ := parseReadyKey(it.Key())
			key = jobKeyBytes(key[:0], id)
			if !recs.SeekGE(key) || !bytes.Equal(recs.Key(), key) {
				if err := recs.Error(); err != nil {
					return closeAll(err)
				}
				continue // no record: the entry is stale (every write keeps them together)
			}
			j, ref, err := decodeJob(recs.Value())
			if err == nil && string(j.ID) != string(id) {
				err = errCorrupt
			}
			if err != nil {
				return closeAll(fmt.Errorf("job %s: %w", id, err))
			}
			// A record the index does not describe is skipped, as a
			// record is the truth.
			if j.ReadyQueue != p.Queue || j.ReadySeq != readySeq || j.Priority != p.Priority ||
				j.Status == domain.StatusInFlight || j.Expired(p.Now) {
				continue
			}
			if err := bodies.read(j, ref); err != nil {
				return closeAll(err)
			}
			out = append(out, j)
		}
		return closeAll(nil)
	})
	if err != nil {
		return nil, wrapRead("list ready jobs", err)
	}
	return out, nil
}

// ReadyQueues implements ports.JobStore. It visits one ready-index entry per
// lane, seeking past the rest of the lane after each.
func (s *Store) ReadyQueues(context.Context) ([]domain.QueueKey, error) {
	var lanes []domain.QueueKey
	err := s.read(func() error {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefixReady, UpperBound: prefixEnd(prefixReady)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; {
			lane, _, _, valid := parseReadyKey(it.Key())
			if !valid {
				ok = it.Next()
				continue
			}
			lanes = append(lanes, domain.QueueKey(lane))
			next := prefixEnd(lanePrefix(nil, domain.QueueKey(lane)))
			if next == nil {
				break
			}
			ok = it.SeekGE(next)
		}
		return errors.Join(it.Error(), it.Close())
	})
	if err != nil {
		return nil, wrapRead("ready lanes", err)
	}
	return lanes, nil
}

// Counts implements ports.JobStore from the counters, in one snapshot:
// the stored jobs queued (scheduled ones among them) and in flight (c/
// overall, by status) and the results waiting for delivery (the deliveries
// counter), less the jobs among them that have expired but are not purged
// yet. Those are found in the w/ range up to now — the expiry index of
// waiting jobs only, so the finished jobs expiring by the thousand between
// two purge sweeps are not stepped over — and their records read without
// bodies. A waiting job expires after a day of waiting, so that range is
// nearly always empty: Counts costs a few point reads however many jobs
// wait, where counting the ready index cost a step per waiting job.
func (s *Store) Counts(context.Context) (ports.Counts, error) {
	var c ports.Counts
	err := s.read(func() error {
		snap := s.db.NewSnapshot()
		defer snap.Close()
		all, err := readCounts(snap, dimRef{dimAll, ""})
		if err != nil {
			return err
		}
		k := countKey(nil, deliveries.dim, deliveries.value, deliveries.st)
		v, err := get(snap, k)
		if err != nil {
			return err
		}
		n, ok := parseCount(v)
		if !ok {
			return errCorruptCount
		}
		c = ports.Counts{Queued: all[statusSlot(stQueued)], InFlight: all[statusSlot(stInFlight)], Deliveries: n}
		return expired(snap, time.Now(), [][]byte{prefixWait}, func(j *domain.Job) {
			switch {
			case j.Status == domain.StatusQueued:
				c.Queued--
			case j.Status == domain.StatusInFlight:
				c.InFlight--
			case delivering(j):
				c.Deliveries--
			}
		})
	})
	if err != nil {
		return ports.Counts{}, wrapRead("count jobs", err)
	}
	return c, nil
}

// NextDue implements ports.ScheduleStore: the first s/ key, whose time is
// the earliest NotBefore.
func (s *Store) NextDue(context.Context) (time.Time, error) {
	var next time.Time
	err := s.read(func() error {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefixSched, UpperBound: prefixEnd(prefixSched)})
		if err != nil {
			return err
		}
		if it.First() {
			nb, _, ok := parseTimeSeqKey(it.Key())
			if !ok {
				return errors.Join(errCorruptIndex, it.Close())
			}
			next = storekit.FromMillis(nb)
		}
		return errors.Join(it.Error(), it.Close())
	})
	if err != nil {
		return time.Time{}, wrapRead("next due job", err)
	}
	return next, nil
}

// Overdue implements ports.ScheduleStore: the d/ range up to p.Now,
// earliest deadline first. d/ holds only unfinished jobs with a deadline;
// each entry's record is read, and jobs in flight or expired (not purged
// yet) are stepped over, so it reads at most the in-flight jobs past their
// deadline more than it returns.
func (s *Store) Overdue(_ context.Context, p *ports.OverdueParams) ([]*domain.Job, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	var out []*domain.Job
	err := s.read(func() error {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefixDue,
			UpperBound: dueKey(nil, storekit.Millis(p.Now)+1, 0)}) // deadline <= now
		if err != nil {
			return err
		}
		for ok := it.First(); ok && len(out) < p.Limit; ok = it.Next() {
			dl, seq, ok := parseTimeSeqKey(it.Key())
			if !ok {
				return errors.Join(errCorruptIndex, it.Close())
			}
			j, err := loadJob(s.db, domain.JobID(it.Value()))
			if err != nil {
				return errors.Join(err, it.Close())
			}
			// The record may have moved on since the iterator's view.
			if j == nil || j.Seq != seq || storekit.Millis(j.Deadline) != dl || j.Status != domain.StatusQueued || j.Expired(p.Now) {
				continue
			}
			out = append(out, j)
		}
		return errors.Join(it.Error(), it.Close())
	})
	if err != nil {
		return nil, wrapRead("find overdue jobs", err)
	}
	return out, nil
}

// Ping implements ports.JobStore.
func (s *Store) Ping(context.Context) error {
	err := s.read(func() error {
		_, err := get(s.db, keyFormat)
		return err
	})
	if err != nil {
		return wrapRead("ping pebble", err)
	}
	return nil
}

// SizeBytes implements ports.JobStore: Pebble's own figure for the disk space
// it uses (tables, WAL, manifest), which shrinks as compactions drop purged
// jobs.
func (s *Store) SizeBytes(context.Context) (int64, error) {
	var n int64
	err := s.read(func() error {
		n = int64(s.db.Metrics().DiskSpaceUsage())
		return nil
	})
	return n, err
}

// getter is what both the database and an indexed batch offer for point reads.
type getter interface {
	Get(key []byte) ([]byte, io.Closer, error)
}

// reader is what both offer for reading.
type reader interface {
	getter
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

// get returns a copy of the value of key, or nil if there is none.
func get(g getter, key []byte) ([]byte, error) {
	v, closer, err := g.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := append(make([]byte, 0, len(v)), v...)
	return out, closer.Close()
}

// loadJob reads the job, its request body included; nil if there is none.
// A body under b/ is a second point read after the record's. The two need
// no snapshot to agree: a body never changes while its record lives and
// its key outlives no record, so a body missing after a version 4 record
// was read means the job was deleted in between — unless the record is
// still there, which is a corrupt store.
func loadJob(g getter, id domain.JobID) (*domain.Job, error) {
	key := jobKey(nil, id)
	j, ref, err := loadRecord(g, key, id)
	if err != nil || j == nil || !ref.apart() {
		return j, err
	}
	body, err := get(g, bodyKey(nil, id))
	switch {
	case err != nil:
		return nil, fmt.Errorf("job %s: read body: %w", id, err)
	case body == nil:
		if still, err := get(g, key); err != nil || still == nil {
			return nil, err // deleted since its record was read
		}
		return nil, fmt.Errorf("job %s: %w", id, errMissingBody)
	case len(body) != ref.n:
		return nil, fmt.Errorf("job %s: body of %d bytes, its record says %d: %w", id, len(body), ref.n, errCorrupt)
	}
	j.Body = body
	return j, nil
}

// errMissingBody is a version 4 record whose body key is missing.
var errMissingBody = errors.New("job record's request body is missing")

// bodyReader reads the bodies under b/ of jobs whose records were read
// from the same snapshot (r), through one iterator opened at the first
// body. Jobs read in id order — a page of ListJobs sorted by record key, a
// lane's ready jobs, which were mostly inserted in their ready order —
// make each seek move forward from the last, which Pebble turns into a few
// steps, where a point read per body would look up every level.
type bodyReader struct {
	r  reader
	it *pebble.Iterator
}

// read sets j.Body to its body under b/ if ref says it is there.
func (b *bodyReader) read(j *domain.Job, ref bodyRef) error {
	if !ref.apart() {
		return nil
	}
	if b.it == nil {
		it, err := b.r.NewIter(&pebble.IterOptions{LowerBound: prefixBody, UpperBound: prefixEnd(prefixBody)})
		if err != nil {
			return err
		}
		b.it = it
	}
	k := bodyKey(nil, j.ID)
	switch {
	case !b.it.SeekGE(k) || !bytes.Equal(b.it.Key(), k):
		return errors.Join(b.it.Error(), fmt.Errorf("job %s: %w", j.ID, errMissingBody))
	case len(b.it.Value()) != ref.n:
		return fmt.Errorf("job %s: body of %d bytes, its record says %d: %w", j.ID, len(b.it.Value()), ref.n, errCorrupt)
	}
	j.Body = append(make([]byte, 0, ref.n), b.it.Value()...)
	return nil
}

// close closes the iterator, if one was opened.
func (b *bodyReader) close() error {
	if b.it == nil {
		return nil
	}
	err := errors.Join(b.it.Error(), b.it.Close())
	b.it = nil
	return err
}

// loadRecord reads the job's record at key (jobKey of id) and where its
// body is, without reading a body under b/ (decodeJob); nil if there is
// none.
func loadRecord(g getter, key []byte, id domain.JobID) (*domain.Job, bodyRef, error) {
	v, closer, err := g.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, bodyRef{}, nil
	}
	if err != nil {
		return nil, bodyRef{}, err
	}
	j, ref, err := decodeJob(v)
	if err == nil && j.ID != id {
		err = errCorrupt
	}
	if err != nil {
		j, err = nil, fmt.Errorf("job %s: %w", id, err)
	}
	return j, ref, errors.Join(err, closer.Close())
}

// inFlight returns the ids of the jobs in flight, from the x/ range of
// that status: as many entries as jobs in flight (a lane's concurrency),
// where the ready index holds every waiting job too. Callers read each
// record and check its status.
func inFlight(r reader) ([]domain.JobID, error) {
	p := statusPrefix(nil, stInFlight)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, err
	}
	var ids []domain.JobID
	var sum summary
	for ok := it.First(); ok; ok = it.Next() {
		if !sum.parse(it.Value()) {
			return nil, errors.Join(errCorruptIndex, it.Close())
		}
		ids = append(ids, domain.JobID(sum.id))
	}
	return ids, errors.Join(it.Error(), it.Close())
}

// sortByReadySeq orders jobs by ReadySeq, then Seq.
func sortByReadySeq(jobs []*domain.Job) {
	sort.Slice(jobs, func(a, b int) bool {
		if jobs[a].ReadySeq != jobs[b].ReadySeq {
			return jobs[a].ReadySeq < jobs[b].ReadySeq
		}
		return jobs[a].Seq < jobs[b].Seq
	})
}

// zapLogger routes Pebble's log lines into zap.
type zapLogger struct{ l *zap.Logger }

func (z zapLogger) Infof(format string, args ...any) { z.l.Info(fmt.Sprintf(format, args...)) }

func (z zapLogger) Errorf(format string, args ...any) { z.l.Error(fmt.Sprintf(format, args...)) }

// Fatalf logs and panics: Pebble calls it for states it cannot continue from
// and does not expect it to return (Pebble's own logger exits the process).
// A failed commit — the WAL write or sync failing, as on a full disk — calls
// it on the writer's goroutine: the writer recovers the panic, fails the
// group and reopens the database once the disk takes writes again (see
// reopen). Called anywhere else (a MANIFEST write failing during a
// background flush or compaction), the panic ends the process, after the
// message went to zap: that database cannot be closed and reopened in this
// process, and a restart recovers it from its WAL.
func (z zapLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	z.l.Error(msg, zap.Bool("fatal", true))
	panic(fatalError(msg))
}

// fatalError is the panic value of Fatalf.
type fatalError string

func (e fatalError) Error() string { return string(e) }

// l0TargetFileSize is the target size of the tables flushes write. Pebble's
// default is 2 MiB; the smaller target is what makes a flush split its
// output at a quarter of the base-level overlap (10× the target).
const l0TargetFileSize = 256 << 10

// L0's thresholds, in sublevels (flushes whose keys overlap). Pebble
// compacts L0 into the base level once it holds L0CompactionThreshold/2
// sublevels (its score is twice the sublevels over the threshold), two
// with its default of 4; here four. Each such compaction rewrites every
// base-level table its input overlaps, and beside a backlog those are whole
// tables at the ends of its indexes, for a few new keys each: waiting for
// twice as many flushes halves how often they are rewritten. Beside a
// million queued jobs, compactions wrote about half the bytes per job
// (BENCHMARKS.md, "An eighth look"). Writes stop at 32 sublevels (Pebble's
// default stop is 12), so a burst of flushes has room while the compaction
// runs.
const (
	l0CompactionSublevels = 4
	l0StopWritesThreshold = 8 * l0CompactionSublevels
)

// prefixSpans ends every table a flush or compaction writes at the end of a
// key prefix ("j/", "x/", ...), so that no table holds keys of two
// prefixes. Only request bodies (b/) may have their values written to blob
// files (bodySeparation); every other prefix keeps its values in its
// tables.
func prefixSpans(start []byte) (pebble.SpanPolicy, []byte, error) {
	inPlace := pebble.SpanPolicy{ValueStoragePolicy: pebble.ValueStorageLowReadLatency}
	switch {
	case len(start) < 2 || start[1] != '/':
		return inPlace, nil, nil
	case start[0] == prefixBody[0]:
		return pebble.SpanPolicy{}, []byte{start[0], '/' + 1}, nil
	}
	return inPlace, []byte{start[0], '/' + 1}, nil
}

// bodySeparation is the store's value separation: a flush writes each
// request body of at least minSeparatedBody bytes once, to a blob file, and
// the table keeps a reference to it. Compactions then move the references
// down the levels, not the bodies: a body is written once, not once per
// level (with 1 KiB bodies beside a backlog, the bodies were most of the
// bytes compactions wrote). prefixSpans keeps every other value in its table:
// records and index entries are rewritten as a job moves and are read on
// every lookup.
//
// A blob file's bodies stay on disk until the file is rewritten or every
// body in it is deleted. Pebble rewrites a file older than
// blobRewriteMinAge once more than blobGarbageRatio of it is deleted
// bodies, so the space a finished backlog held comes back.
func bodySeparation() pebble.ValueSeparationPolicy {
	return pebble.ValueSeparationPolicy{
		Enabled:               true,
		MinimumSize:           minSeparatedBody,
		MaxBlobReferenceDepth: blobReferenceDepth,
		RewriteMinimumAge:     blobRewriteMinAge,
		TargetGarbageRatio:    blobGarbageRatio,
	}
}

// Value separation's settings (bodySeparation).
const (
	// minSeparatedBody: smaller bodies stay in their tables, where one
	// reference would save little.
	minSeparatedBody = 256
	// blobReferenceDepth bounds how many blob files a table's references
	// may reach into (beyond it a compaction rewrites the bodies, so a
	// range of jobs' bodies is read from few files).
	blobReferenceDepth = 10
	blobRewriteMinAge  = 5 * time.Minute
	blobGarbageRatio   = 0.2
)
