package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/groupcommit"
	"github.com/aquiferhq/aquifer/internal/ports"
)

type opKind int

const (
	opInsert opKind = iota
	opDelete
	opMarkInFlight
	opRequeue
	opFinish
	opFinishDelivery
	opRecover
	opResetStale
	opPurge
	opDeleteFinished
	opProbe // a small write to see whether commits succeed (CheckWrites)
)

// op is one write waiting for the writer. done is nil for fire-and-forget ops.
type op struct {
	kind     opKind
	job      *domain.Job
	id       domain.JobID
	seq      int64 // the job's row, when the caller knows it
	at       time.Time
	seqs     []int64
	jobs     []*domain.Job
	requeue  *ports.RequeueParams
	finish   *ports.FinishParams
	delivery *ports.FinishDeliveryParams
	stale    *ports.ResetStaleParams
	done     chan opResult
}

type opResult struct {
	job   *domain.Job
	fresh bool
	n     int64
	jobs  []*domain.Job
	err   error
}

// Update statements come in two forms: by id (an index lookup), and by seq
// (the rowid, found directly) with the id re-checked.
type rowStmt struct{ byID, bySeq *sql.Stmt }

func (r rowStmt) exec(ctx context.Context, tx *sql.Tx, seq int64, id domain.JobID, args ...any) (int64, error) {
	st := r.byID
	if seq > 0 {
		st, args = r.bySeq, append(args, seq)
	}
	res, err := tx.StmtContext(ctx, st).ExecContext(ctx, append(args, string(id))...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

type writeStmts struct {
	insert, selectByKey, deleteBySeq, deleteByID, purge, deleteFinished, resetStale, statusOf *sql.Stmt
	markInFlight, requeue, requeueDelivery, finish, finishDelivery                            rowStmt
}

func (w *writeStmts) prepare(ctx context.Context, db *sql.DB) error {
	var err error
	p := func(q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		st, err = db.PrepareContext(ctx, q)
		return st
	}
	// row prepares "... WHERE <cond> AND id = ?" both with and without a
	// leading "seq = ?" test.
	row := func(q string) rowStmt {
		return rowStmt{byID: p(q + " AND id = ?"), bySeq: p(q + " AND seq = ? AND id = ?")}
	}
	w.insert = p(`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, pool_id, method, headers, body,
		webhook_url, lane, status, attempts, created_at, updated_at, expires_at, ready_lane, ready_seq)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (user_id, idempotent_key) DO NOTHING`)
	w.selectByKey = p("SELECT " + jobColumns + " FROM jobs WHERE user_id = ? AND idempotent_key = ?")
	w.deleteBySeq = p("DELETE FROM jobs WHERE seq = ?")
	w.deleteByID = p("DELETE FROM jobs WHERE id = ?")
	w.statusOf = p("SELECT status FROM jobs WHERE id = ?")
	w.purge = p("DELETE FROM jobs WHERE seq = ? AND expires_at <= ?")
	w.deleteFinished = p("DELETE FROM jobs WHERE seq = ? AND status IN ('completed', 'failed') AND ready_lane = ''")
	w.resetStale = p(`UPDATE jobs SET status = 'queued', updated_at = ?, expires_at = ?
		WHERE id = ? AND status = 'in_flight' AND dispatched_at < ?`)
	w.markInFlight = row(`UPDATE jobs SET status = 'in_flight', dispatched_at = ?, updated_at = ?
		WHERE status IN ('queued', 'in_flight')`)
	w.requeue = row(`UPDATE jobs SET status = 'queued', attempts = ?, deferrals = ?, updated_at = ?, expires_at = ?
		WHERE status IN ('queued', 'in_flight')`)
	w.requeueDelivery = row(`UPDATE jobs SET delivery_attempts = ?, deferrals = ?, delivery_response = ?, delivery_reason = ?,
		updated_at = ? WHERE delivery_status = 'pending'`)
	w.finish = row(`UPDATE jobs SET status = ?, attempts = ?, updated_at = ?, expires_at = ?, response_status = ?,
		response_body = ?, response_truncated = ?, response_content_type = ?, reason = ?,
		ready_lane = ?, ready_seq = ?, delivery_status = ?, deferrals = 0
		WHERE status IN ('queued', 'in_flight')`)
	w.finishDelivery = row(`UPDATE jobs SET delivery_status = ?, delivery_attempts = ?, delivery_response = ?,
		delivery_reason = ?, updated_at = ?, ready_lane = '',
		expires_at = ? + CASE status WHEN 'completed' THEN ? ELSE ? END
		WHERE delivery_status = 'pending'`)
	if err != nil {
		return fmt.Errorf("prepare sqlite statements: %w", err)
	}
	return nil
}

// writer is the single goroutine that owns the write connection: it commits
// the ops waiting, up to MaxBatch at a time, in one transaction each (one
// fsync per group; see internal/groupcommit).
func (s *Store) writer() {
	defer close(s.done)
	groupcommit.Run(s.ops, s.closing, groupcommit.Options{MaxBatch: s.opts.MaxBatch, GatherYields: s.opts.GatherYields},
		s.commit)
}

// commit runs batch in one transaction. An SQL error in any op aborts the whole
// transaction (SQLite may already have rolled it back) and every op in the
// batch fails: no caller is told a write succeeded unless the commit did.
func (s *Store) commit(batch []*op) {
	ctx := context.Background()
	results := make([]opResult, len(batch))
	superseded := supersededMarks(batch)
	seqBefore := s.seq
	err := func() error {
		tx, err := s.wdb.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		for i, o := range batch {
			if superseded[i] {
				continue
			}
			r, err := s.apply(ctx, tx, o)
			if err != nil {
				_ = tx.Rollback()
				return err
			}
			results[i] = r
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		s.commits.Add(1)
		s.committedOps.Add(int64(len(batch)))
		return nil
	}()
	s.health.Record(err, time.Now())
	if err != nil {
		s.seq = seqBefore // nothing of the batch exists
		s.log.Error("sqlite batch failed", zap.Int("ops", len(batch)), zap.Error(err))
		err = domain.Unavailable("job store write failed", err)
	}
	for i, o := range batch {
		if o.done == nil {
			continue
		}
		if err != nil {
			o.done <- opResult{err: err}
		} else {
			o.done <- results[i]
		}
	}
}

// supersededMarks finds MarkInFlight ops whose job is finished later in the
// same batch: the in-flight state would never be visible, so writing it is
// wasted work.
func supersededMarks(batch []*op) map[int]bool {
	var marks map[domain.JobID]int
	var out map[int]bool
	for i, o := range batch {
		switch o.kind {
		case opMarkInFlight:
			if marks == nil {
				marks = make(map[domain.JobID]int)
			}
			marks[o.id] = i
		case opFinish:
			if j, ok := marks[o.id]; ok {
				if out == nil {
					out = make(map[int]bool)
				}
				out[j] = true
			}
		}
	}
	return out
}

// notFound turns "no row changed" into ErrNotFound for the caller.
func notFound(n int64, err error) (opResult, error) {
	if err != nil {
		return opResult{}, err
	}
	if n == 0 {
		return opResult{err: domain.ErrNotFound}, nil
	}
	return opResult{}, nil
}

// apply runs one op inside tx. Outcomes that belong to the caller (not found)
// are returned in the result; only SQL failures are returned as error.
func (s *Store) apply(ctx context.Context, tx *sql.Tx, o *op) (opResult, error) {
	switch o.kind {
	case opInsert:
		j, fresh, err := s.insert(ctx, tx, o.job)
		return opResult{job: j, fresh: fresh}, err
	case opDelete:
		res, err := tx.StmtContext(ctx, s.stmts.deleteByID).ExecContext(ctx, string(o.id))
		if err != nil {
			return opResult{}, fmt.Errorf("delete job: %w", err)
		}
		n, _ := res.RowsAffected()
		return notFound(n, nil)
	case opMarkInFlight:
		_, err := s.stmts.markInFlight.exec(ctx, tx, o.seq, o.id, ms(o.at), ms(o.at))
		if err != nil {
			return opResult{}, fmt.Errorf("mark in flight: %w", err)
		}
		return opResult{}, nil
	case opRequeue:
		p := o.requeue
		var n int64
		var err error
		switch p.Phase {
		case domain.PhaseDeliver:
			n, err = s.stmts.requeueDelivery.exec(ctx, tx, o.seq, o.id, p.Attempts, p.Deferrals, p.Response, p.Reason, ms(p.Now))
		case domain.PhaseDispatch:
			n, err = s.stmts.requeue.exec(ctx, tx, o.seq, o.id, p.Attempts, p.Deferrals, ms(p.Now), ms(p.Now.Add(domain.QueuedTTL)))
		}
		if err != nil {
			return opResult{}, fmt.Errorf("requeue job: %w", err)
		}
		return notFound(n, nil)
	case opFinish:
		return s.applyFinish(ctx, tx, o.finish)
	case opFinishDelivery:
		p := o.delivery
		status := domain.DeliveryDelivered
		if !p.Delivered {
			status = domain.DeliveryFailed
		}
		n, err := s.stmts.finishDelivery.exec(ctx, tx, o.seq, o.id, string(status), p.Attempts, p.Response, p.Reason,
			ms(p.Now), ms(p.Now), domain.CompletedTTL.Milliseconds(), domain.FailedTTL.Milliseconds())
		if err != nil {
			return opResult{}, fmt.Errorf("finish delivery: %w", err)
		}
		return notFound(n, nil)
	case opRecover:
		res, err := tx.ExecContext(ctx, "UPDATE jobs SET status = 'queued', updated_at = ? WHERE ready_lane != '' AND status = 'in_flight'", ms(o.at))
		if err != nil {
			return opResult{}, fmt.Errorf("recover in-flight jobs: %w", err)
		}
		n, _ := res.RowsAffected()
		return opResult{n: n}, nil
	case opResetStale:
		return s.resetStale(ctx, tx, o.jobs, o.stale)
	case opPurge:
		var n int64
		st := tx.StmtContext(ctx, s.stmts.purge)
		for _, seq := range o.seqs {
			res, err := st.ExecContext(ctx, seq, ms(o.at))
			if err != nil {
				return opResult{}, fmt.Errorf("purge expired jobs: %w", err)
			}
			k, _ := res.RowsAffected()
			n += k
		}
		return opResult{n: n}, nil
	case opProbe:
		// Rewriting the schema version dirties the database header: the
		// commit writes a WAL frame and syncs it, as a real write would.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
			return opResult{}, fmt.Errorf("write probe: %w", err)
		}
		return opResult{}, nil
	case opDeleteFinished:
		var n int64
		st := tx.StmtContext(ctx, s.stmts.deleteFinished)
		for _, seq := range o.seqs {
			res, err := st.ExecContext(ctx, seq)
			if err != nil {
				return opResult{}, fmt.Errorf("delete finished jobs: %w", err)
			}
			k, _ := res.RowsAffected()
			n += k
		}
		return opResult{n: n}, nil
	}
	return opResult{}, fmt.Errorf("unknown op %d", o.kind)
}

// insert is the atomic insert-if-absent. The unique index decides; when it
// reports a conflict the existing row is returned, unless it has expired, in
// which case it is replaced (an expired row must not block its key).
func (s *Store) insert(ctx context.Context, tx *sql.Tx, j *domain.Job) (*domain.Job, bool, error) {
	headers, err := encodeHeaders(j.Headers)
	if err != nil {
		return nil, false, err
	}
	for range 2 {
		seq := s.seq + 1
		res, err := tx.StmtContext(ctx, s.stmts.insert).ExecContext(ctx,
			seq, string(j.ID), j.UserID, j.IdempotentKey, j.URL, j.PoolID, j.Method, headers, nullBytes(j.Body),
			j.WebhookURL, string(j.Queue), string(j.Status), j.Attempts, ms(j.CreatedAt), ms(j.UpdatedAt),
			ms(j.ExpiresAt), string(j.ReadyQueue), seq)
		if err != nil {
			return nil, false, fmt.Errorf("insert job: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			s.seq = seq
			stored := *j // shallow: the caller does not mutate a job after handing it over
			stored.Seq, stored.ReadySeq = seq, seq
			return &stored, true, nil
		}
		existing, err := scanJob(tx.StmtContext(ctx, s.stmts.selectByKey).QueryRowContext(ctx, j.UserID, j.IdempotentKey))
		if err != nil {
			return nil, false, fmt.Errorf("read existing job: %w", err)
		}
		if !existing.Expired(j.CreatedAt) {
			return existing, false, nil
		}
		if _, err := tx.StmtContext(ctx, s.stmts.deleteBySeq).ExecContext(ctx, existing.Seq); err != nil {
			return nil, false, fmt.Errorf("replace expired job: %w", err)
		}
	}
	return nil, false, errors.New("insert job: conflict persisted after replacing expired row")
}

// applyFinish records the terminal status and, for a job with a webhook,
// makes its delivery due in p.DeliverIn with a fresh ready_seq. A job that is
// already terminal is left alone (no second delivery).
func (s *Store) applyFinish(ctx context.Context, tx *sql.Tx, p *ports.FinishParams) (opResult, error) {
	r := p.Result
	if r == nil {
		r = &domain.Result{}
	}
	var (
		readySeq  int64
		delivery  string
		expiresAt = p.Now.Add(domain.TTL(p.Status))
	)
	if p.DeliverIn != "" {
		readySeq = s.seq + 1
		delivery = string(domain.DeliveryPending)
		expiresAt = p.Now.Add(max(domain.TTL(p.Status), domain.QueuedTTL)) // time to deliver
	}
	n, err := s.stmts.finish.exec(ctx, tx, p.Seq, p.ID,
		string(p.Status), p.Attempts, ms(p.Now), ms(expiresAt), r.ResponseStatus, nullBytes(r.Body),
		boolInt(r.BodyTruncated), r.ContentType, r.Reason, string(p.DeliverIn), readySeq, delivery)
	if err != nil {
		return opResult{}, fmt.Errorf("finish job: %w", err)
	}
	if n == 1 {
		s.seq = max(s.seq, readySeq)
		return opResult{n: readySeq}, nil
	}
	var status string
	switch err := tx.StmtContext(ctx, s.stmts.statusOf).QueryRowContext(ctx, string(p.ID)).Scan(&status); {
	case errors.Is(err, sql.ErrNoRows):
		return opResult{err: domain.ErrNotFound}, nil
	case err != nil:
		return opResult{}, fmt.Errorf("finish job: %w", err)
	}
	return opResult{}, nil // already terminal
}

func (s *Store) resetStale(ctx context.Context, tx *sql.Tx, candidates []*domain.Job, p *ports.ResetStaleParams) (opResult, error) {
	var reset []*domain.Job
	st := tx.StmtContext(ctx, s.stmts.resetStale)
	for _, j := range candidates {
		res, err := st.ExecContext(ctx, ms(p.Now), ms(p.Now.Add(domain.QueuedTTL)), string(j.ID), ms(p.DispatchedBefore))
		if err != nil {
			return opResult{}, fmt.Errorf("reset stale job: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			j.Status = domain.StatusQueued
			reset = append(reset, j)
		}
	}
	return opResult{jobs: reset}, nil
}

// CheckWrites implements ports.WriteChecker: nil while commits succeed, the
// failure (and since when) otherwise. If the writer has tried no commit for
// Options.WriteProbeAfter, a probe commit runs first. SQLite needs no
// reopening after a failed commit (a full disk fails the transaction, which
// is rolled back); the next commit that finds room succeeds.
func (s *Store) CheckWrites(ctx context.Context) error {
	if s.health.Idle(time.Now(), s.opts.WriteProbeAfter) {
		if r := s.submit(ctx, &op{kind: opProbe, done: wait()}); errors.Is(r.err, domain.ErrClosed) {
			return r.err
		}
	}
	return s.health.Err()
}
