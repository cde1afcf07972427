package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

type opKind int

const (
	opInsert opKind = iota
	opDelete
	opMarkInFlight
	opRequeue
	opFinish
	opRecover
	opResetStale
	opPurge
)

// op is one write waiting for the writer. done is nil for fire-and-forget ops.
type op struct {
	kind     opKind
	job      *domain.Job
	id       domain.JobID
	at       time.Time
	attempts int
	seq      int64
	seqs     []int64
	jobs     []*domain.Job
	finish   *ports.FinishParams
	stale    *ports.ResetStaleParams
	done     chan opResult
}

type opResult struct {
	job   *domain.Job
	fresh bool
	n     int
	jobs  []*domain.Job
	err   error
}

type writeStmts struct {
	insert, selectByKey, deleteBySeq, deleteByID, purge, resetStale *sql.Stmt
	// Row updates come in two forms: by id (an index lookup), and by seq
	// (the rowid, found directly) with the id re-checked.
	markInFlight, requeue, finish          *sql.Stmt
	markInFlightSeq, requeueSeq, finishSeq *sql.Stmt
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
	w.insert = p(`INSERT INTO jobs (id, kind, parent_id, user_id, idempotent_key, url, pool_id, method, headers, body,
		webhook_url, lane, status, attempts, created_at, updated_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (kind, user_id, idempotent_key) DO NOTHING`)
	w.selectByKey = p("SELECT " + jobColumns + " FROM jobs WHERE kind = ? AND user_id = ? AND idempotent_key = ?")
	w.deleteBySeq = p("DELETE FROM jobs WHERE seq = ?")
	w.deleteByID = p("DELETE FROM jobs WHERE id = ?")
	const (
		markSQL = `UPDATE jobs SET status = 'in_flight', dispatched_at = ?, updated_at = ?
		WHERE id = ? AND status IN ('queued', 'in_flight')`
		requeueSQL = `UPDATE jobs SET status = 'queued', attempts = ?, updated_at = ?, expires_at = ?
		WHERE id = ? AND status IN ('queued', 'in_flight')`
		finishSQL = `UPDATE jobs SET status = ?, attempts = ?, updated_at = ?, expires_at = ?, response_status = ?,
		response_body = ?, response_truncated = ?, response_content_type = ?, reason = ? WHERE id = ?`
	)
	w.markInFlight, w.requeue, w.finish = p(markSQL), p(requeueSQL), p(finishSQL)
	w.markInFlightSeq, w.requeueSeq, w.finishSeq = p(bySeq(markSQL)), p(bySeq(requeueSQL)), p(bySeq(finishSQL))
	w.purge = p("DELETE FROM jobs WHERE seq = ? AND expires_at <= ?")
	w.resetStale = p(`UPDATE jobs SET status = 'queued', updated_at = ?, expires_at = ?
		WHERE id = ? AND status = 'in_flight' AND dispatched_at < ?`)
	if err != nil {
		return fmt.Errorf("prepare sqlite statements: %w", err)
	}
	return nil
}

// bySeq turns "... WHERE id = ?" into "... WHERE seq = ? AND id = ?": the
// caller passes the seq first, then the id, as the last two arguments.
func bySeq(q string) string {
	return strings.Replace(q, "WHERE id = ?", "WHERE seq = ? AND id = ?", 1)
}

// rowArgs appends the arguments that locate a row: (seq, id) when the seq is
// known, else (id).
func rowArgs(args []any, seq int64, id domain.JobID) []any {
	if seq > 0 {
		return append(args, seq, string(id))
	}
	return append(args, string(id))
}

// pick returns the by-seq form of a statement when the seq is known.
func pick(byID, bySeq *sql.Stmt, seq int64) *sql.Stmt {
	if seq > 0 {
		return bySeq
	}
	return byID
}

// writer is the single goroutine that owns the write connection. Each loop
// takes every op waiting (up to MaxBatch), runs them in one transaction and
// commits once: one fsync for the whole group.
func (s *Store) writer() {
	defer close(s.done)
	batch := make([]*op, 0, s.opts.MaxBatch)
	for {
		var first *op
		select {
		case first = <-s.ops:
		case <-s.closing:
			// Drain what was submitted before Close, then stop.
			for {
				select {
				case o := <-s.ops:
					batch = append(batch, o)
					if len(batch) == s.opts.MaxBatch {
						s.commit(batch)
						batch = batch[:0]
					}
				default:
					if len(batch) > 0 {
						s.commit(batch)
					}
					return
				}
			}
		}
		batch = append(batch[:0], first)
	gather:
		for len(batch) < s.opts.MaxBatch {
			select {
			case o := <-s.ops:
				batch = append(batch, o)
			default:
				break gather
			}
		}
		s.commit(batch)
	}
}

// commit runs batch in one transaction. An SQL error in any op aborts the whole
// transaction (SQLite may already have rolled it back) and every op in the
// batch fails: no caller is told a write succeeded unless the commit did.
func (s *Store) commit(batch []*op) {
	ctx := context.Background()
	results := make([]opResult, len(batch))
	superseded := supersededMarks(batch)
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
	if err != nil {
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
		if n, _ := res.RowsAffected(); n == 0 {
			return opResult{err: domain.ErrNotFound}, nil
		}
		return opResult{}, nil
	case opMarkInFlight:
		_, err := tx.StmtContext(ctx, pick(s.stmts.markInFlight, s.stmts.markInFlightSeq, o.seq)).
			ExecContext(ctx, rowArgs([]any{ms(o.at), ms(o.at)}, o.seq, o.id)...)
		if err != nil {
			return opResult{}, fmt.Errorf("mark in flight: %w", err)
		}
		return opResult{}, nil
	case opRequeue:
		res, err := tx.StmtContext(ctx, pick(s.stmts.requeue, s.stmts.requeueSeq, o.seq)).
			ExecContext(ctx, rowArgs([]any{o.attempts, ms(o.at), ms(o.at.Add(domain.QueuedTTL))}, o.seq, o.id)...)
		if err != nil {
			return opResult{}, fmt.Errorf("requeue job: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return opResult{err: domain.ErrNotFound}, nil
		}
		return opResult{}, nil
	case opFinish:
		return s.finish(ctx, tx, o.finish)
	case opRecover:
		res, err := tx.ExecContext(ctx, "UPDATE jobs SET status = 'queued', updated_at = ? WHERE status = 'in_flight'", ms(o.at))
		if err != nil {
			return opResult{}, fmt.Errorf("recover in-flight jobs: %w", err)
		}
		n, _ := res.RowsAffected()
		return opResult{n: int(n)}, nil
	case opResetStale:
		return s.resetStale(ctx, tx, o.jobs, o.stale)
	case opPurge:
		n := 0
		st := tx.StmtContext(ctx, s.stmts.purge)
		for _, seq := range o.seqs {
			res, err := st.ExecContext(ctx, seq, ms(o.at))
			if err != nil {
				return opResult{}, fmt.Errorf("purge expired jobs: %w", err)
			}
			k, _ := res.RowsAffected()
			n += int(k)
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
		res, err := tx.StmtContext(ctx, s.stmts.insert).ExecContext(ctx,
			string(j.ID), string(j.Kind), string(j.ParentID), j.UserID, j.IdempotentKey, j.URL, j.PoolID, j.Method,
			headers, nullBytes(j.Body), j.WebhookURL, string(j.Lane), string(j.Status), j.Attempts,
			ms(j.CreatedAt), ms(j.UpdatedAt), ms(j.ExpiresAt))
		if err != nil {
			return nil, false, fmt.Errorf("insert job: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			seq, err := res.LastInsertId()
			if err != nil {
				return nil, false, fmt.Errorf("insert job: %w", err)
			}
			stored := *j // shallow: the caller does not mutate a job after handing it over
			stored.Seq = seq
			return &stored, true, nil
		}
		existing, err := scanJob(tx.StmtContext(ctx, s.stmts.selectByKey).QueryRowContext(ctx, string(j.Kind), j.UserID, j.IdempotentKey))
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

func (s *Store) finish(ctx context.Context, tx *sql.Tx, p *ports.FinishParams) (opResult, error) {
	r := p.Result
	if r == nil {
		r = &domain.Result{}
	}
	res, err := tx.StmtContext(ctx, pick(s.stmts.finish, s.stmts.finishSeq, p.Seq)).ExecContext(ctx,
		rowArgs([]any{string(p.Status), p.Attempts, ms(p.Now), ms(p.Now.Add(domain.TTL(p.Status))), r.ResponseStatus,
			nullBytes(r.Body), boolInt(r.BodyTruncated), r.ContentType, r.Reason}, p.Seq, p.ID)...)
	if err != nil {
		return opResult{}, fmt.Errorf("finish job: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return opResult{err: domain.ErrNotFound}, nil
	}
	if p.FollowUp == nil {
		return opResult{}, nil
	}
	j, fresh, err := s.insert(ctx, tx, p.FollowUp)
	return opResult{job: j, fresh: fresh}, err
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
