package pebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// commit applies group to one indexed batch and commits it with a WAL sync,
// on the writer goroutine (see internal/groupcommit), then answers the
// callers. An op's own outcome (not found, a record it cannot read) goes to
// its caller alone; a failed commit fails every op: no caller is told a
// write succeeded unless the commit did. After a failed commit the database
// takes no more writes; the next group first tries to reopen it (reopen).
func (s *Store) commit(group []*storekit.Op) {
	results := make([]storekit.Result, len(group))
	err := s.failure()
	if err != nil {
		err = s.reopen()
	}
	wrote := false
	if err == nil {
		seqBefore := s.seq
		if wrote, err = s.apply(group, results); err != nil {
			s.seq = seqBefore // nothing of the group exists
		}
	}
	if err != nil || wrote {
		s.w.Health.Record(err, time.Now())
	}
	if err != nil && s.failed.Load() != nil && !s.readOnly {
		s.demote()
	}
	if err != nil {
		s.log.Error("pebble batch failed", zap.Int("ops", len(group)), zap.Error(err))
		err = domain.Unavailable("job store write failed", err)
	} else {
		s.w.Committed(len(group))
	}
	storekit.Answer(group, results, err)
}

// failure returns the error that broke the database, if any.
func (s *Store) failure() error {
	if f := s.failed.Load(); f != nil {
		return *f
	}
	return nil
}

// fail records that a commit failed: Pebble's commit pipeline (and WAL)
// cannot take more writes after that, so neither can this database.
func (s *Store) fail(err error) { s.failed.CompareAndSwap(nil, &err) }

// reopenEvery is the least time between two tries at reopening a database
// whose commit failed: groups that arrive sooner fail at once.
const reopenEvery = 250 * time.Millisecond

// probeBytes is the size of the file written to see whether the disk takes
// writes again.
const probeBytes = 1 << 20

// reopen brings a database whose commit failed back into service, on the
// writer's goroutine, and reports the failure if it cannot yet. Pebble
// cannot take writes after a failed commit (its WAL writer keeps the
// error), and the failed group may sit in its memtable, visible to reads
// though it is durable nowhere. So once a probe file can be written and
// synced in the directory — the disk has room again — the database is
// closed and opened again from disk: every acknowledged write is in the
// WAL (each commit synced it), and nothing unacknowledged is kept except
// what reached the disk anyway. Readers are held off (dbMu) while the
// database is swapped; operations waiting for the writer just wait.
func (s *Store) reopen() error {
	failed := s.failure()
	now := time.Now()
	if now.Sub(s.lastReopen) < reopenEvery {
		return failed
	}
	s.lastReopen = now
	if err := s.probeDisk(); err != nil {
		s.log.Debug("pebble directory still refuses writes", zap.Error(err))
		return failed
	}
	s.dbMu.Lock()
	defer s.dbMu.Unlock()
	if s.db != nil {
		if err := closeBroken(s.db); err != nil {
			s.log.Warn("closing the read-only pebble database", zap.Error(err))
		}
		s.db = nil
	}
	// back serves reads again when the reopen for writing fails.
	back := func(err error) error {
		s.log.Error("reopening the pebble store failed; retrying", zap.Error(err))
		if db, rerr := s.openDB(true); rerr == nil {
			s.db = db
		}
		return fmt.Errorf("%w (reopening failed: %v)", failed, err)
	}
	db, err := s.openDB(false)
	if err != nil {
		return back(err)
	}
	seq := s.seq
	s.db = db
	if err := s.init(); err != nil {
		_ = closeBroken(db)
		s.db = nil
		return back(err)
	}
	s.seq = max(s.seq, seq)
	s.readOnly = false
	s.failed.Store(nil)
	s.log.Warn("pebble store reopened after failed writes; writes resume", zap.NamedError("failure", failed))
	return nil
}

// demote replaces a database whose commit failed by the same directory
// opened read-only, on the writer's goroutine. The failed group may sit in
// the broken database's memtable, readable though it is durable nowhere (a
// caller told "failed" could find its job there, or a retry be answered
// "duplicate" by it); the read-only database holds exactly what is on disk,
// so reads go on from durable state while writes wait for reopen.
func (s *Store) demote() {
	s.dbMu.Lock()
	defer s.dbMu.Unlock()
	if err := closeBroken(s.db); err != nil {
		s.log.Warn("closing the failed pebble database", zap.Error(err))
	}
	s.db, s.readOnly = nil, true
	db, err := s.openDB(true)
	if err != nil {
		s.log.Error("opening the pebble store read-only after a failed write; reads fail until it reopens", zap.Error(err))
		return
	}
	s.db = db
}

// probeDisk writes, syncs and removes a file in the store's directory.
func (s *Store) probeDisk() error {
	fs := s.opts.fs
	name := fs.PathJoin(s.opts.Dir, "aquifer-write-probe")
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, probeBytes))
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close(), fs.Remove(name))
}

// closeBroken closes a database whose commit failed. Pebble may panic
// closing a database in that state; the panic is returned as an error.
func closeBroken(db *pebble.DB) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pebble: %v", r)
		}
	}()
	return db.Close()
}

// CheckWrites implements ports.WriteChecker: nil while commits succeed, the
// failure (and since when) otherwise. If the writer has tried no commit for
// Options.WriteProbeAfter, a probe commit runs first — which also reopens
// a failed database once the disk takes writes again.
func (s *Store) CheckWrites(ctx context.Context) error {
	return s.w.CheckWrites(ctx, s.opts.WriteProbeAfter)
}

// apply runs the ops in one indexed batch and commits it with pebble.Sync.
// It reports whether there was anything to commit.
func (s *Store) apply(group []*storekit.Op, results []storekit.Result) (wrote bool, err error) {
	b := s.db.NewIndexedBatch()
	committing := false
	defer func() {
		if r := recover(); r != nil {
			if fe, ok := r.(fatalError); ok {
				err = fe
			} else {
				err = fmt.Errorf("pebble: %v", r)
			}
			if committing {
				s.fail(err) // the commit pipeline cannot be trusted after this, nor the batch
				return
			}
		}
		_ = b.Close()
	}()
	superseded := storekit.Superseded(group)
	seqBefore := s.seq
	w := &wbatch{b: b, s: s}
	for i, o := range group {
		if superseded[i] {
			continue
		}
		results[i] = s.applyOne(w, o)
		if w.err != nil {
			return false, w.err
		}
	}
	if w.flushCounts(); w.err != nil {
		return false, w.err
	}
	if b.Empty() {
		return false, nil // only duplicates and not-founds: nothing to make durable
	}
	if s.seq != seqBefore {
		w.set(keySeq, seqValue(s.seq))
		if w.err != nil {
			return false, w.err
		}
	}
	committing = true
	if err := b.Commit(pebble.Sync); err != nil {
		s.fail(err)
		return false, err
	}
	return true, nil
}

// wbatch is the group's batch with the writer's scratch buffers. Its first
// write error sticks and fails the group.
type wbatch struct {
	b      *pebble.Batch
	s      *Store
	err    error
	counts map[counter]int64 // the group's count changes (count)
}

func (w *wbatch) set(k, v []byte) {
	if err := w.b.Set(k, v, nil); err != nil && w.err == nil {
		w.err = err
	}
}

func (w *wbatch) del(k []byte) {
	if err := w.b.Delete(k, nil); err != nil && w.err == nil {
		w.err = err
	}
}

// sdel single-deletes k, a key written once since it was last deleted (the
// x/ and i/ entries): when the delete meets that write in a flush or
// compaction both vanish, leaving no tombstone for listings to step over.
// Any key that may have been written twice is deleted with del.
func (w *wbatch) sdel(k []byte) {
	if err := w.b.SingleDelete(k, nil); err != nil && w.err == nil {
		w.err = err
	}
}

// fail fails the group: for errors after an op has begun writing.
func (w *wbatch) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// load reads the job's record as the group sees it, and where its request
// body is; nil if there is none. A body under b/ is not read: a rewrite
// keeps it where it is (update), and only the ops that return the job read
// it (withBody). The key is built in the writer's scratch: most ops load
// one record.
func (w *wbatch) load(id domain.JobID) (*domain.Job, bodyRef, error) {
	w.s.lbuf = jobKey(w.s.lbuf[:0], id)
	return loadRecord(w.b, w.s.lbuf, id)
}

// withBody reads into j, a job that load read with ref, its body under
// b/, as the group sees it, for an op that returns the job.
func (w *wbatch) withBody(j *domain.Job, ref bodyRef) error {
	if !ref.apart() {
		return nil
	}
	body, err := get(w.b, bodyKey(w.s.kbuf[:0], j.ID))
	switch {
	case err != nil:
		return fmt.Errorf("job %s: read body: %w", j.ID, err)
	case body == nil:
		return fmt.Errorf("job %s: %w", j.ID, errMissingBody)
	case len(body) != ref.n:
		return fmt.Errorf("job %s: body of %d bytes, its record says %d: %w", j.ID, len(body), ref.n, errCorrupt)
	}
	j.Body = body
	return nil
}

// put writes j's record, encoded as rec, and every index entry that differs
// from old's (old is nil for a new job). Callers encode first, so an encoding
// error leaves the batch untouched.
func (w *wbatch) put(old, j *domain.Job, rec []byte) {
	s := w.s
	s.kbuf = jobKey(s.kbuf[:0], j.ID)
	w.set(s.kbuf, rec)
	if old == nil {
		s.kbuf = idemKey(s.kbuf[:0], j.UserID, j.IdempotentKey)
		w.set(s.kbuf, []byte(j.ID))
	}
	var oldExp int64
	oldReady := old != nil && old.ReadyQueue != ""
	if old != nil {
		oldExp = storekit.Millis(old.ExpiresAt)
	}
	newExp := storekit.Millis(j.ExpiresAt)
	if oldReady && (j.ReadyQueue != old.ReadyQueue || j.ReadySeq != old.ReadySeq || j.Priority != old.Priority) {
		s.kbuf = readyKey(s.kbuf[:0], old.ReadyQueue, old.Priority, old.ReadySeq)
		w.del(s.kbuf)
		oldReady = false
	}
	if j.ReadyQueue != "" && (!oldReady || readyState(j) != readyState(old) || newExp != oldExp) {
		s.kbuf = readyKey(s.kbuf[:0], j.ReadyQueue, j.Priority, j.ReadySeq)
		s.rbuf = readyValue(s.rbuf[:0], j)
		w.set(s.kbuf, s.rbuf)
	}
	// The expiry entry moves when the expiry does, and between w/ and e/
	// when the job stops (or starts) waiting.
	var oldKey []byte
	if old != nil {
		if k := jobExpiryKey(s.kbuf[:0], old); k != nil {
			s.kbuf, oldKey = k, k
		}
	}
	s.ebuf = jobExpiryKey(s.ebuf[:0], j)
	if !bytes.Equal(oldKey, s.ebuf) {
		if oldKey != nil {
			w.del(oldKey)
		}
		if s.ebuf != nil {
			w.set(s.ebuf, nil)
		}
	}
	if (old != nil && (old.Scheduled() || waitsWithDeadline(old))) || j.Scheduled() || waitsWithDeadline(j) {
		w.putSchedule(old, j)
	}
	w.countDelivery(old, j)
	w.putIndexes(old, j)
}

// putSchedule keeps j's s/ and d/ entries, as put does the others: an s/
// entry while j is scheduled, a d/ entry while it waits with a deadline.
// Both keys are written once and then single-deleted; an s/ entry whose
// expiry changes in place is deleted first (as x/ entries are), so that
// stays true. A plain job never gets here.
func (w *wbatch) putSchedule(old, j *domain.Job) {
	s := w.s
	oldSched := old != nil && old.Scheduled()
	if oldSched && (!j.Scheduled() || !j.NotBefore.Equal(old.NotBefore)) {
		w.sdel(schedKey(s.kbuf[:0], storekit.Millis(old.NotBefore), old.Seq))
		oldSched = false
	}
	if j.Scheduled() && (!oldSched || !j.ExpiresAt.Equal(old.ExpiresAt)) {
		s.kbuf = schedKey(s.kbuf[:0], storekit.Millis(j.NotBefore), j.Seq)
		if oldSched {
			w.del(s.kbuf) // rewritten in place: a plain delete keeps it one write since a delete
		}
		w.set(s.kbuf, schedValue(s.rbuf[:0], j))
	}
	oldDue := old != nil && waitsWithDeadline(old)
	if oldDue && (!waitsWithDeadline(j) || !j.Deadline.Equal(old.Deadline)) {
		w.sdel(dueKey(s.kbuf[:0], storekit.Millis(old.Deadline), old.Seq))
		oldDue = false
	}
	if waitsWithDeadline(j) && !oldDue {
		w.set(dueKey(s.kbuf[:0], storekit.Millis(j.Deadline), j.Seq), []byte(j.ID))
	}
}

// update encodes and writes upd, a changed copy of old, which load read
// with ref. The request body stays where it is: under b/, not written
// again, or in the record (at most maxInlineBody bytes). A longer body
// held inline by an older record (version 3 and before, which load
// decoded into old) moves out to b/ now, as the record becomes version 4 —
// written once, like a new job's.
func (w *wbatch) update(old *domain.Job, ref bodyRef, upd *domain.Job) error {
	moving := ref.inline && ref.n > maxInlineBody
	if moving {
		ref.inline = false
	}
	var err error
	if w.s.vbuf, err = encodeJob(w.s.vbuf[:0], upd, ref); err != nil {
		return err
	}
	w.put(old, upd, w.s.vbuf)
	if moving {
		w.set(bodyKey(w.s.kbuf[:0], old.ID), old.Body)
	}
	return nil
}

// remove deletes j's record (which load read with ref), its body and index
// entries. The key entry is deleted only if it names j. It may follow other
// writes of the same op, so a failed read fails the group.
func (w *wbatch) remove(j *domain.Job, ref bodyRef) {
	kk := idemKey(nil, j.UserID, j.IdempotentKey)
	holder, err := get(w.b, kk)
	if err != nil {
		w.fail(err)
		return
	}
	w.del(jobKey(w.s.kbuf[:0], j.ID))
	if ref.apart() {
		w.sdel(bodyKey(w.s.kbuf[:0], j.ID)) // written once, by the insert or the move out of an older record
	}
	if string(holder) == string(j.ID) {
		w.del(kk)
	}
	if j.ReadyQueue != "" {
		w.del(readyKey(w.s.kbuf[:0], j.ReadyQueue, j.Priority, j.ReadySeq))
	}
	if k := jobExpiryKey(w.s.kbuf[:0], j); k != nil {
		w.del(k)
	}
	if j.Scheduled() {
		w.sdel(schedKey(w.s.kbuf[:0], storekit.Millis(j.NotBefore), j.Seq))
	}
	if waitsWithDeadline(j) {
		w.sdel(dueKey(w.s.kbuf[:0], storekit.Millis(j.Deadline), j.Seq))
	}
	if delivering(j) {
		w.add(deliveries, -1)
	}
	w.removeIndexes(j)
}

// loaded is a job as load read it, with where its body is.
type loaded struct {
	job *domain.Job
	ref bodyRef
}

// applyOne runs one op against the group's batch. Outcomes that belong to
// the caller (not found, a failed read) are returned in the result and leave
// the batch untouched; a failed write is left in w.err and fails the group.
func (s *Store) applyOne(w *wbatch, o *storekit.Op) storekit.Result {
	r, err := s.applyOp(w, o)
	if err != nil {
		s.log.Error("pebble store operation failed", zap.Int("op", int(o.Kind)), zap.Error(err))
		r = storekit.Result{Err: domain.Unavailable("job store write failed", err)}
	}
	return r
}

var notFound = storekit.Result{Err: domain.ErrNotFound}

func (s *Store) applyOp(w *wbatch, o *storekit.Op) (storekit.Result, error) {
	switch o.Kind {
	case storekit.OpInsert:
		return s.insert(w, o.Job)
	case storekit.OpInsertBatch:
		return s.insertBatch(w, o.Inserts)
	case storekit.OpPromote:
		return s.promote(w, o.At, o.Limit)
	case storekit.OpDelete:
		j, ref, err := w.load(o.ID)
		if err != nil || j == nil {
			return notFound, err
		}
		w.remove(j, ref)
		return storekit.Result{}, nil
	case storekit.OpMarkInFlight:
		j, ref, err := w.load(o.ID)
		if err != nil || j == nil || j.Status.Terminal() {
			return storekit.Result{}, err
		}
		upd := *j
		upd.Status, upd.DispatchedAt, upd.UpdatedAt = domain.StatusInFlight, o.At, o.At
		return storekit.Result{}, w.update(j, ref, &upd)
	case storekit.OpRequeue:
		p := o.Requeue
		j, ref, err := w.load(o.ID)
		if err != nil || j == nil || j.Phase() != p.Phase {
			return notFound, err
		}
		upd := *j
		switch p.Phase {
		case domain.PhaseDispatch:
			upd.Status, upd.Attempts, upd.Deferrals = domain.StatusQueued, p.Attempts, p.Deferrals
			upd.UpdatedAt, upd.ExpiresAt = p.Now, p.Now.Add(domain.QueuedTTL)
			if p.History != nil {
				upd.History = p.History
			}
		case domain.PhaseDeliver:
			d := *j.Delivery
			d.Attempts, d.ResponseStatus, d.Reason = p.Attempts, p.Response, p.Reason
			upd.Delivery, upd.Deferrals, upd.UpdatedAt = &d, p.Deferrals, p.Now
		default:
			return notFound, nil
		}
		return storekit.Result{}, w.update(j, ref, &upd)
	case storekit.OpFinish:
		return s.finish(w, o.Finish)
	case storekit.OpFinishDelivery:
		p := o.Delivery
		j, ref, err := w.load(o.ID)
		if err != nil || j == nil || j.Phase() != domain.PhaseDeliver {
			return notFound, err
		}
		status := domain.DeliveryDelivered
		if !p.Delivered {
			status = domain.DeliveryFailed
		}
		upd := *j
		upd.Delivery = &domain.Delivery{Status: status, Attempts: p.Attempts, ResponseStatus: p.Response, Reason: p.Reason}
		upd.ReadyQueue, upd.UpdatedAt, upd.ExpiresAt = "", p.Now, p.Now.Add(domain.RetentionTTL(j.Status, p.Retention))
		return storekit.Result{}, w.update(j, ref, &upd)
	case storekit.OpProbe:
		w.set(keyProbe, binary.BigEndian.AppendUint64(nil, uint64(o.At.UnixMilli())))
		return storekit.Result{}, nil
	case storekit.OpRecover:
		return s.recoverInFlight(w, o.At)
	case storekit.OpResetStale:
		return s.resetStale(w, o.Jobs, o.Stale)
	case storekit.OpPurge:
		return s.purge(w, o.Keys, o.At)
	case storekit.OpRetry:
		return s.retry(w, o.Retry)
	case storekit.OpRunBatch:
		return s.runBatch(w, o.Batch)
	case storekit.OpSaveOperation:
		rec, err := encodeOperation(o.Operation)
		if err != nil {
			return storekit.Result{}, err
		}
		w.set(opKey(o.Operation.ID), rec)
		return storekit.Result{}, nil
	case storekit.OpPauseLane:
		w.set(pauseKey(o.Pause.Upstream), pauseValue(o.Pause))
		return storekit.Result{}, nil
	case storekit.OpResumeLane:
		w.del(pauseKey(o.Upstream))
		return storekit.Result{}, nil
	case storekit.OpDeleteFinished:
		var n int64
		for _, id := range o.IDs {
			j, ref, err := w.load(id)
			if err != nil {
				return storekit.Result{}, err
			}
			// Re-check: only what is still finished with nothing left to do.
			if j != nil && j.Seq <= o.Seq && j.Status.Terminal() && j.ReadyQueue == "" {
				w.remove(j, ref)
				n++
			}
		}
		return storekit.Result{N: n}, nil
	}
	return storekit.Result{}, fmt.Errorf("unknown op %d", o.Kind)
}

// insert is the atomic insert-if-absent. A live job holding the key is
// returned as it is; an expired one is deleted and the key taken.
func (s *Store) insert(w *wbatch, j *domain.Job) (storekit.Result, error) {
	s.kbuf = idemKey(s.kbuf[:0], j.UserID, j.IdempotentKey)
	holder, err := get(w.b, s.kbuf)
	if err != nil {
		return storekit.Result{}, err
	}
	var expired *domain.Job
	var expiredRef bodyRef
	if holder != nil {
		existing, ref, err := w.load(domain.JobID(holder))
		if err != nil {
			return storekit.Result{}, err
		}
		if existing != nil && !existing.Expired(j.CreatedAt) {
			if err := w.withBody(existing, ref); err != nil {
				return storekit.Result{}, err
			}
			return storekit.Result{Job: existing}, nil
		}
		expired, expiredRef = existing, ref
	}
	// Job ids are not checked for collisions: domain.IDGenerator makes them
	// unique (time-ordered, strictly increasing, 80 random bits).
	stored := *j // shallow: the caller does not mutate a job after handing it over
	stored.Seq, stored.ReadySeq = s.seq+1, s.seq+1
	// A priority outside the three (the app never makes one) is stored as
	// the nearest, so that no job waits in a range nothing reads; the
	// sqlite and postgres stores do the same.
	stored.Priority = domain.Priorities[stored.Priority.Class()]
	if stored.ReadyQueue == "" {
		stored.ReadySeq = 0 // scheduled: in no lane until PromoteDue makes it ready
	}
	ref := refOf(stored.Body)
	if s.vbuf, err = encodeJob(s.vbuf[:0], &stored, ref); err != nil {
		return storekit.Result{}, err
	}
	if expired != nil {
		w.remove(expired, expiredRef)
	}
	s.seq++
	w.put(nil, &stored, s.vbuf)
	if ref.apart() {
		w.set(bodyKey(s.kbuf[:0], stored.ID), stored.Body) // the only write of the body
	}
	return storekit.Result{Job: &stored, Fresh: true}, nil
}

// insertBatch inserts jobs in order, each as insert does, into the group's
// batch: they commit together, and a job finds the keys that stored jobs
// and earlier jobs of the batch hold (the indexed batch sees its own
// writes). Every job is checked for what encoding refuses before any is
// written, so a bad job fails the batch alone and writes nothing; a write
// failing part way fails the group, never half a batch.
func (s *Store) insertBatch(w *wbatch, jobs []*domain.Job) (storekit.Result, error) {
	for _, j := range jobs {
		if err := encodable(j); err != nil {
			return storekit.Result{}, err
		}
	}
	out := make([]ports.InsertOutcome, len(jobs))
	for i, j := range jobs {
		r, err := s.insert(w, j)
		if err != nil {
			w.fail(err) // earlier jobs of the batch are written
			return storekit.Result{}, nil
		}
		out[i] = ports.InsertOutcome{Job: r.Job, Fresh: r.Fresh}
	}
	return storekit.Result{Batch: out}, nil
}

// promote makes up to limit scheduled jobs due at or before at ready in
// their queue, reading the s/ index from its start (the earliest
// NotBefore) through the group's batch: a job promoted earlier in the
// group has left it, so none is promoted twice. Each gets a fresh
// ReadySeq, in (NotBefore, Seq) order. An entry whose record is no longer
// that scheduled job (it cannot be, as every write keeps s/, but a record
// is the truth) is dropped and not counted.
func (s *Store) promote(w *wbatch, at time.Time, limit int) (storekit.Result, error) {
	it, err := w.b.NewIter(&pebble.IterOptions{LowerBound: prefixSched,
		UpperBound: schedKey(nil, storekit.Millis(at)+1, 0)}) // not_before <= at
	if err != nil {
		return storekit.Result{}, err
	}
	var due []loaded
	var stale [][]byte
	for ok := it.First(); ok && len(due) < limit; ok = it.Next() {
		nb, seq, okKey := parseTimeSeqKey(it.Key())
		_, id, okVal := parseSched(it.Value())
		if !okKey || !okVal {
			return storekit.Result{}, errors.Join(errCorruptIndex, it.Close())
		}
		j, ref, err := w.load(domain.JobID(id))
		if err != nil {
			return storekit.Result{}, errors.Join(err, it.Close())
		}
		if j == nil || !j.Scheduled() || j.Seq != seq || storekit.Millis(j.NotBefore) != nb {
			stale = append(stale, append([]byte(nil), it.Key()...))
			continue
		}
		due = append(due, loaded{j, ref})
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return storekit.Result{}, err
	}
	for _, k := range stale {
		w.del(k)
	}
	out := make([]*domain.Job, 0, len(due))
	for _, d := range due {
		upd := *d.job
		upd.ReadyQueue, upd.ReadySeq = d.job.Queue, s.seq+1
		if err := w.update(d.job, d.ref, &upd); err != nil {
			w.fail(err) // not reachable: the record decoded, so it encodes
			return storekit.Result{}, nil
		}
		s.seq++
		// The dispatcher is offered the promoted job: it needs the body.
		if err := w.withBody(&upd, d.ref); err != nil {
			w.fail(err) // the group wrote part of the promotions
			return storekit.Result{}, nil
		}
		out = append(out, &upd)
	}
	return storekit.Result{Jobs: out}, nil
}

// finish records the terminal status and, for a job with a webhook, makes its
// delivery due in p.DeliverIn with a fresh ReadySeq. A job that is already
// terminal is left alone: no second delivery.
func (s *Store) finish(w *wbatch, p *ports.FinishParams) (storekit.Result, error) {
	j, ref, err := w.load(p.ID)
	if err != nil || j == nil {
		return notFound, err
	}
	if j.Status.Terminal() {
		return storekit.Result{}, nil
	}
	upd := *j
	upd.Status, upd.Attempts, upd.UpdatedAt, upd.Deferrals = p.Status, p.Attempts, p.Now, 0
	r := domain.Result{}
	if p.Result != nil {
		r = *p.Result
	}
	upd.Result = &r
	if p.History != nil {
		upd.History = p.History
	}
	ttl := domain.RetentionTTL(p.Status, p.Retention)
	if p.DeliverIn == "" {
		upd.ReadyQueue, upd.ExpiresAt = "", p.Now.Add(ttl)
		return storekit.Result{}, w.update(j, ref, &upd)
	}
	upd.ReadyQueue, upd.ReadySeq = p.DeliverIn, s.seq+1
	upd.Delivery = &domain.Delivery{Status: domain.DeliveryPending}
	upd.ExpiresAt = p.Now.Add(max(ttl, domain.QueuedTTL)) // time to deliver
	if err := w.update(j, ref, &upd); err != nil {
		return storekit.Result{}, err
	}
	s.seq++
	return storekit.Result{N: upd.ReadySeq}, nil
}

func (s *Store) recoverInFlight(w *wbatch, now time.Time) (storekit.Result, error) {
	ids, err := inFlight(w.b)
	if err != nil {
		return storekit.Result{}, err
	}
	// Read every record before writing any, so a failed read changes nothing.
	var jobs []loaded
	for _, id := range ids {
		j, ref, err := w.load(id)
		if err != nil {
			return storekit.Result{}, err
		}
		if j != nil && j.Status == domain.StatusInFlight {
			jobs = append(jobs, loaded{j, ref})
		}
	}
	for _, l := range jobs {
		upd := *l.job
		upd.Status, upd.UpdatedAt = domain.StatusQueued, now
		if err := w.update(l.job, l.ref, &upd); err != nil {
			w.fail(err) // not reachable: the record decoded, so it encodes
		}
	}
	return storekit.Result{N: int64(len(jobs))}, nil
}

func (s *Store) resetStale(w *wbatch, candidates []*domain.Job, p *ports.ResetStaleParams) (storekit.Result, error) {
	var jobs []loaded
	for _, c := range candidates {
		j, ref, err := w.load(c.ID)
		if err != nil {
			return storekit.Result{}, err
		}
		if j != nil && j.Status == domain.StatusInFlight && j.DispatchedAt.Before(p.DispatchedBefore) && !p.Exclude[j.ID] {
			jobs = append(jobs, loaded{j, ref})
		}
	}
	reset := make([]*domain.Job, 0, len(jobs))
	for _, l := range jobs {
		upd := *l.job
		upd.Status, upd.UpdatedAt, upd.ExpiresAt = domain.StatusQueued, p.Now, p.Now.Add(domain.QueuedTTL)
		if err := w.update(l.job, l.ref, &upd); err != nil {
			w.fail(err) // not reachable: the record decoded, so it encodes
		}
		// Returned as the contract says, the body with it.
		if err := w.withBody(&upd, l.ref); err != nil {
			w.fail(err)
			return storekit.Result{}, nil
		}
		reset = append(reset, &upd)
	}
	sortByReadySeq(reset)
	return storekit.Result{Jobs: reset}, nil
}

// purge deletes the jobs behind the given expiry-index keys that are still
// expired at now. Entries that no longer match their job are dropped.
func (s *Store) purge(w *wbatch, keys [][]byte, now time.Time) (storekit.Result, error) {
	type due struct {
		key []byte
		job *domain.Job // nil: the entry is stale
		ref bodyRef
	}
	var todo []due
	taken := make(map[domain.JobID]bool, len(keys))
	for _, k := range keys {
		exp, id, ok := parseExpiryKey(k)
		if !ok {
			continue
		}
		j, ref, err := w.load(id)
		if err != nil {
			return storekit.Result{}, err
		}
		switch {
		case j != nil && j.Expired(now) && !taken[id]:
			taken[id] = true
			todo = append(todo, due{k, j, ref})
		case j == nil || storekit.Millis(j.ExpiresAt) != exp:
			todo = append(todo, due{k, nil, bodyRef{}})
		}
	}
	var n int64
	for _, d := range todo {
		if d.job == nil {
			w.del(d.key)
			continue
		}
		w.remove(d.job, d.ref)
		w.del(d.key) // the job's own entry, or a stale one
		n++
	}
	return storekit.Result{N: n}, nil
}
