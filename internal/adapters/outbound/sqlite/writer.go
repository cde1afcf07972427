package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// Update statements come in two forms: by id (an index lookup), and by seq
// (the rowid, found directly) with the id re-checked.
type rowStmt struct{ byID, bySeq *wstmt }

func (r rowStmt) exec(ctx context.Context, w *wconn, seq int64, id domain.JobID, args ...any) (int64, error) {
	st := r.byID
	if seq > 0 {
		st = r.bySeq
	}
	if err := st.bind(args); err != nil {
		return 0, err
	}
	if seq > 0 {
		st.add(seq)
	}
	st.add(string(id)) // bound after args without copying them: no slice grows per row
	return w.run(ctx, st)
}

type writeStmts struct {
	insert, putBody, selectByKey, deleteBySeq, deleteByID, purge, deleteFinished, resetStale, statusOf, seqOf *wstmt
	markInFlight, requeue, requeueDelivery, finish, finishDelivery                                            rowStmt
	recover, probe                                                                                            *wstmt

	// PromoteDue's: the due scheduled jobs, and making one ready.
	selectDue, promote *wstmt

	// The operator's writes (operator_writer.go).
	selectJob                          rowQuery
	retry, cancel                      rowStmt
	processedOf, saveOp, pause, resume *wstmt
}

// prepare prepares the writer's statements on its connection, once: they
// live as long as the store.
func (w *writeStmts) prepare(ctx context.Context, wc *wconn) error {
	var err error
	p := func(q string) *wstmt {
		if err != nil {
			return nil
		}
		var st *wstmt
		st, err = wc.prepare(ctx, q)
		return st
	}
	// row prepares "... WHERE <cond> AND id = ?" both with and without a
	// leading "seq = ?" test.
	row := func(q string) rowStmt {
		return rowStmt{byID: p(q + " AND id = ?"), bySeq: p(q + " AND seq = ? AND id = ?")}
	}
	w.insert = p(`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, pool_id, method, headers, body,
		webhook_url, lane, status, attempts, created_at, updated_at, expires_at, ready_lane, ready_seq,
		history, upstream, tenant, url_path, not_before, deadline, priority, options, apart)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (user_id, idempotent_key) DO NOTHING`)
	w.putBody = p("INSERT OR REPLACE INTO job_bodies (key, data) VALUES (?, ?)")
	w.selectByKey = p("SELECT " + jobColumns + " FROM jobs WHERE user_id = ? AND idempotent_key = ?")
	w.deleteBySeq = p("DELETE FROM jobs WHERE seq = ?")
	w.deleteByID = p("DELETE FROM jobs WHERE id = ?")
	w.statusOf = p("SELECT status FROM jobs WHERE id = ?")
	w.seqOf = p("SELECT seq FROM jobs WHERE id = ?")
	w.purge = p("DELETE FROM jobs WHERE seq = ? AND expires_at <= ?")
	w.deleteFinished = p("DELETE FROM jobs WHERE seq = ? AND status IN ('completed', 'failed') AND ready_lane = ''")
	w.resetStale = p(`UPDATE jobs SET status = 'queued', updated_at = ?, expires_at = ?
		WHERE id = ? AND status = 'in_flight' AND dispatched_at < ?`)
	w.markInFlight = row(`UPDATE jobs SET status = 'in_flight', dispatched_at = ?, updated_at = ?
		WHERE status IN ('queued', 'in_flight')`)
	w.requeue = row(`UPDATE jobs SET status = 'queued', attempts = ?, deferrals = ?, updated_at = ?, expires_at = ?,
		history = coalesce(?, history) WHERE status IN ('queued', 'in_flight')`)
	w.requeueDelivery = row(`UPDATE jobs SET delivery_attempts = ?, deferrals = ?, delivery_response = ?, delivery_reason = ?,
		updated_at = ? WHERE delivery_status = 'pending'`)
	w.finish = row(`UPDATE jobs SET status = ?, attempts = ?, updated_at = ?, expires_at = ?, response_status = ?,
		response_body = ?, apart = (apart & ` + keepRequestApart + `) | ?, response_truncated = ?, response_content_type = ?, reason = ?,
		ready_lane = ?, ready_seq = ?, delivery_status = ?, deferrals = 0, history = coalesce(?, history)
		WHERE status IN ('queued', 'in_flight')`)
	w.finishDelivery = row(`UPDATE jobs SET delivery_status = ?, delivery_attempts = ?, delivery_response = ?,
		delivery_reason = ?, updated_at = ?, ready_lane = '',
		expires_at = ? + CASE status WHEN 'completed' THEN ? ELSE ? END
		WHERE delivery_status = 'pending'`)
	w.recover = p("UPDATE jobs SET status = 'queued', updated_at = ? WHERE ready_lane != '' AND status = 'in_flight'")
	// Rewriting the schema version dirties the database header: the
	// commit writes a WAL frame and syncs it, as a real write would.
	w.probe = p(fmt.Sprintf("PRAGMA user_version = %d", schemaVersion))
	w.selectDue = p(promoteSQL)
	// The conditions are jobs_scheduled's: a job that is no longer
	// scheduled is left alone.
	w.promote = p(`UPDATE jobs SET ready_lane = lane, ready_seq = ?
		WHERE seq = ? AND ready_lane = '' AND status = 'queued' AND not_before > 0`)
	w.prepareOperator(p, row, func(q string) rowQuery {
		return rowQuery{byID: p(q + " WHERE id = ?"), bySeq: p(q + " WHERE seq = ? AND id = ?")}
	})
	if err != nil {
		return fmt.Errorf("prepare sqlite statements: %w", err)
	}
	return nil
}

// commit runs group in one transaction, on the writer goroutine (see
// internal/groupcommit): one fsync per group. An SQL error in any op aborts
// the whole transaction (SQLite may already have rolled it back) and every
// op in the group fails: no caller is told a write succeeded unless the
// commit did.
func (s *Store) commit(group []*storekit.Op) {
	ctx := context.Background()
	results := make([]storekit.Result, len(group))
	superseded := storekit.Superseded(group)
	seqBefore := s.seq
	err := s.wc.tx(ctx, func() error {
		for i, o := range group {
			if superseded[i] {
				continue
			}
			r, err := s.apply(ctx, s.wc, o)
			if err != nil {
				return err
			}
			results[i] = r
		}
		return nil
	})
	if err == nil {
		s.w.Committed(len(group))
	}
	s.w.Health.Record(err, time.Now())
	if err != nil {
		s.seq = seqBefore // nothing of the group exists
		s.log.Error("sqlite batch failed", zap.Int("ops", len(group)), zap.Error(err))
		err = domain.Unavailable("job store write failed", err)
	}
	storekit.Answer(group, results, err)
}

// notFound turns "no row changed" into ErrNotFound for the caller.
func notFound(n int64, err error) (storekit.Result, error) {
	if err != nil {
		return storekit.Result{}, err
	}
	if n == 0 {
		return storekit.Result{Err: domain.ErrNotFound}, nil
	}
	return storekit.Result{}, nil
}

// apply runs one op in w's transaction. Outcomes that belong to the caller (not found)
// are returned in the result; only SQL failures are returned as error.
func (s *Store) apply(ctx context.Context, w *wconn, o *storekit.Op) (storekit.Result, error) {
	switch o.Kind {
	case storekit.OpInsert:
		e, err := encoded(o)
		if err != nil {
			return storekit.Result{Err: err}, nil
		}
		j, fresh, err := s.insert(ctx, w, o.Job, &e.job)
		return storekit.Result{Job: j, Fresh: fresh}, err
	case storekit.OpInsertBatch:
		e, err := encoded(o)
		if err != nil {
			return storekit.Result{Err: err}, nil
		}
		// In order, in this transaction: the unique index sees the
		// batch's earlier rows, so a later duplicate is answered with
		// the earlier job.
		out := make([]ports.InsertOutcome, len(o.Inserts))
		for i, job := range o.Inserts {
			j, fresh, err := s.insert(ctx, w, job, &e.batch[i])
			if err != nil {
				return storekit.Result{}, err
			}
			out[i] = ports.InsertOutcome{Job: j, Fresh: fresh}
		}
		return storekit.Result{Batch: out}, nil
	case storekit.OpPromote:
		jobs, err := s.promoteDue(ctx, w, o.At, o.Limit)
		return storekit.Result{Jobs: jobs}, err
	case storekit.OpDelete:
		n, err := w.exec(ctx, s.stmts.deleteByID, string(o.ID))
		if err != nil {
			return storekit.Result{}, fmt.Errorf("delete job: %w", err)
		}
		return notFound(n, nil)
	case storekit.OpMarkInFlight:
		_, err := s.stmts.markInFlight.exec(ctx, w, o.Seq, o.ID, storekit.Millis(o.At), storekit.Millis(o.At))
		if err != nil {
			return storekit.Result{}, fmt.Errorf("mark in flight: %w", err)
		}
		return storekit.Result{}, nil
	case storekit.OpRequeue:
		p := o.Requeue
		var n int64
		var err error
		switch p.Phase {
		case domain.PhaseDeliver:
			n, err = s.stmts.requeueDelivery.exec(ctx, w, o.Seq, o.ID, p.Attempts, p.Deferrals, p.Response, p.Reason, storekit.Millis(p.Now))
		case domain.PhaseDispatch:
			e, eerr := encoded(o)
			if eerr != nil {
				return storekit.Result{Err: eerr}, nil
			}
			n, err = s.stmts.requeue.exec(ctx, w, o.Seq, o.ID, p.Attempts, p.Deferrals, storekit.Millis(p.Now),
				storekit.Millis(p.Now.Add(domain.QueuedTTL)), e.history)
		}
		if err != nil {
			return storekit.Result{}, fmt.Errorf("requeue job: %w", err)
		}
		return notFound(n, nil)
	case storekit.OpFinish:
		e, err := encoded(o)
		if err != nil {
			return storekit.Result{Err: err}, nil
		}
		return s.applyFinish(ctx, w, o.Finish, e.history)
	case storekit.OpFinishDelivery:
		p := o.Delivery
		status := domain.DeliveryDelivered
		if !p.Delivered {
			status = domain.DeliveryFailed
		}
		n, err := s.stmts.finishDelivery.exec(ctx, w, o.Seq, o.ID, string(status), p.Attempts, p.Response, p.Reason,
			storekit.Millis(p.Now), storekit.Millis(p.Now), domain.RetentionTTL(domain.StatusCompleted, p.Retention).Milliseconds(),
			domain.RetentionTTL(domain.StatusFailed, p.Retention).Milliseconds())
		if err != nil {
			return storekit.Result{}, fmt.Errorf("finish delivery: %w", err)
		}
		return notFound(n, nil)
	case storekit.OpRecover:
		n, err := w.exec(ctx, s.stmts.recover, storekit.Millis(o.At))
		if err != nil {
			return storekit.Result{}, fmt.Errorf("recover in-flight jobs: %w", err)
		}
		return storekit.Result{N: n}, nil
	case storekit.OpResetStale:
		return s.resetStale(ctx, w, o.Jobs, o.Stale)
	case storekit.OpPurge:
		var n int64
		for _, seq := range o.Seqs {
			k, err := w.exec(ctx, s.stmts.purge, seq, storekit.Millis(o.At))
			if err != nil {
				return storekit.Result{}, fmt.Errorf("purge expired jobs: %w", err)
			}
			n += k
		}
		return storekit.Result{N: n}, nil
	case storekit.OpProbe:
		if _, err := w.exec(ctx, s.stmts.probe); err != nil {
			return storekit.Result{}, fmt.Errorf("write probe: %w", err)
		}
		return storekit.Result{}, nil
	case storekit.OpRetry:
		return s.applyRetry(ctx, w, o.Retry)
	case storekit.OpRunBatch:
		return s.applyRunBatch(ctx, w, o.Batch)
	case storekit.OpSaveOperation:
		return storekit.Result{}, s.saveOperation(ctx, w, o.Operation)
	case storekit.OpPauseLane:
		_, err := w.exec(ctx, s.stmts.pause, string(o.Pause.Upstream), storekit.Millis(o.Pause.At), o.Pause.Reason)
		if err != nil {
			return storekit.Result{}, fmt.Errorf("pause lane: %w", err)
		}
		return storekit.Result{}, nil
	case storekit.OpResumeLane:
		if _, err := w.exec(ctx, s.stmts.resume, string(o.Upstream)); err != nil {
			return storekit.Result{}, fmt.Errorf("resume lane: %w", err)
		}
		return storekit.Result{}, nil
	case storekit.OpDeleteFinished:
		var n int64
		for _, seq := range o.Seqs {
			k, err := w.exec(ctx, s.stmts.deleteFinished, seq)
			if err != nil {
				return storekit.Result{}, fmt.Errorf("delete finished jobs: %w", err)
			}
			n += k
		}
		return storekit.Result{N: n}, nil
	}
	return storekit.Result{}, fmt.Errorf("unknown op %d", o.Kind)
}

// insert is the atomic insert-if-absent. The unique index decides; when it
// reports a conflict the existing row is returned, unless it has expired, in
// which case it is replaced (an expired row must not block its key). A job
// in no ready queue (a scheduled one) gets no ready_seq: PromoteDue gives
// it one when it is due.
func (s *Store) insert(ctx context.Context, w *wconn, j *domain.Job, e *encodedJob) (*domain.Job, bool, error) {
	// Position reads the three priorities' ranges of jobs_ready, and lanes
	// list only them: a priority outside them is stored as the nearest.
	priority := domain.Priorities[j.Priority.Class()]
	for range 2 {
		seq := s.seq + 1
		readySeq := seq
		if j.ReadyQueue == "" {
			readySeq = 0
		}
		body, apart := nullBytes(j.Body), 0
		if len(j.Body) >= sideBodyMin {
			body, apart = nil, apartRequest|apartRows
		}
		n, err := w.exec(ctx, s.stmts.insert,
			seq, string(j.ID), j.UserID, j.IdempotentKey, j.URL, j.PoolID, j.Method, e.headers, body,
			j.WebhookURL, string(j.Queue), string(j.Status), j.Attempts, storekit.Millis(j.CreatedAt), storekit.Millis(j.UpdatedAt),
			storekit.Millis(j.ExpiresAt), string(j.ReadyQueue), readySeq, e.history, e.upstream, e.tenant, e.urlPath,
			storekit.Millis(j.NotBefore), storekit.Millis(j.Deadline), int(priority), e.options, apart)
		if err != nil {
			return nil, false, fmt.Errorf("insert job: %w", err)
		}
		if n == 1 {
			if apart != 0 {
				if _, err := w.exec(ctx, s.stmts.putBody, bodyKey(seq, false), j.Body); err != nil {
					return nil, false, fmt.Errorf("insert job body: %w", err)
				}
			}
			s.seq = seq
			stored := *j // shallow: the caller does not mutate a job after handing it over
			stored.Seq, stored.ReadySeq, stored.Priority = seq, readySeq, priority
			return &stored, true, nil
		}
		existing, err := scanJob(w.queryRow(ctx, s.stmts.selectByKey, j.UserID, j.IdempotentKey))
		if err != nil {
			return nil, false, fmt.Errorf("read existing job: %w", err)
		}
		if !existing.Expired(j.CreatedAt) {
			return existing, false, nil
		}
		if _, err := w.exec(ctx, s.stmts.deleteBySeq, existing.Seq); err != nil {
			return nil, false, fmt.Errorf("replace expired job: %w", err)
		}
	}
	return nil, false, errors.New("insert job: conflict persisted after replacing expired row")
}

// promoteDue makes up to limit scheduled jobs due at now ready in their
// queues, in (not_before, seq) order, each with the next ready_seq. The due
// rows are read whole before the first update (an update must not move
// rows under an open scan of the index it changes), and each update
// re-checks that its job is still scheduled, so none is promoted twice.
func (s *Store) promoteDue(ctx context.Context, w *wconn, now time.Time, limit int) ([]*domain.Job, error) {
	rows, err := w.query(ctx, s.stmts.selectDue, storekit.Millis(now), limit)
	if err != nil {
		return nil, fmt.Errorf("find due jobs: %w", err)
	}
	due, err := collect(rows)
	if err != nil {
		return nil, fmt.Errorf("find due jobs: %w", err)
	}
	out := due[:0]
	for _, j := range due {
		readySeq := s.seq + 1
		n, err := w.exec(ctx, s.stmts.promote, readySeq, j.Seq)
		if err != nil {
			return nil, fmt.Errorf("promote due job: %w", err)
		}
		if n == 1 {
			s.seq = readySeq
			j.ReadyQueue, j.ReadySeq = j.Queue, readySeq
			out = append(out, j)
		}
	}
	return out, nil
}

// applyFinish records the terminal status and, for a job with a webhook,
// makes its delivery due in p.DeliverIn with a fresh ready_seq. A job that is
// already terminal is left alone (no second delivery). history is
// historyArg of p.History (encode).
func (s *Store) applyFinish(ctx context.Context, w *wconn, p *ports.FinishParams, history any) (storekit.Result, error) {
	r := p.Result
	if r == nil {
		r = &domain.Result{}
	}
	readySeq, delivery, expiresAt := s.deliveryDue(p.DeliverIn, p.Now, domain.RetentionTTL(p.Status, p.Retention))
	body, apart := nullBytes(r.Body), 0
	if len(r.Body) >= sideBodyMin {
		body, apart = nil, apartResponse|apartRows
	}
	n, err := s.stmts.finish.exec(ctx, w, p.Seq, p.ID,
		string(p.Status), p.Attempts, storekit.Millis(p.Now), storekit.Millis(expiresAt), r.ResponseStatus, body, apart,
		boolInt(r.BodyTruncated), r.ContentType, r.Reason, string(p.DeliverIn), readySeq, delivery, history)
	if err != nil {
		return storekit.Result{}, fmt.Errorf("finish job: %w", err)
	}
	if n == 1 {
		if apart != 0 {
			if err := s.putResponseBody(ctx, w, p, r.Body); err != nil {
				return storekit.Result{}, err
			}
		}
		s.seq = max(s.seq, readySeq)
		return storekit.Result{N: readySeq}, nil
	}
	var status string
	switch err := w.queryRow(ctx, s.stmts.statusOf, string(p.ID)).Scan(&status); {
	case errors.Is(err, sql.ErrNoRows):
		return storekit.Result{Err: domain.ErrNotFound}, nil
	case err != nil:
		return storekit.Result{}, fmt.Errorf("finish job: %w", err)
	}
	return storekit.Result{}, nil // already terminal
}

// putResponseBody writes a finished job's response body apart, under the
// job's seq, which the caller may not know (p.Seq 0): then it is read from
// the row the finish just changed.
func (s *Store) putResponseBody(ctx context.Context, w *wconn, p *ports.FinishParams, body []byte) error {
	seq := p.Seq
	if seq <= 0 {
		if err := w.queryRow(ctx, s.stmts.seqOf, string(p.ID)).Scan(&seq); err != nil {
			return fmt.Errorf("finish job: find its row: %w", err)
		}
	}
	if _, err := w.exec(ctx, s.stmts.putBody, bodyKey(seq, true), body); err != nil {
		return fmt.Errorf("finish job: response body: %w", err)
	}
	return nil
}

// deliveryDue is what finishing a job sets besides its result: for a job
// whose result goes to a webhook receiver's lane (deliverIn), the next
// ready_seq (taken from the counter only once the update succeeds), a
// pending delivery and time to deliver it; for any other job, nothing left
// to do and the retention ttl of its status.
func (s *Store) deliveryDue(deliverIn domain.QueueKey, now time.Time, ttl time.Duration) (readySeq int64, delivery string, expiresAt time.Time) {
	if deliverIn == "" {
		return 0, "", now.Add(ttl)
	}
	return s.seq + 1, string(domain.DeliveryPending), now.Add(max(ttl, domain.QueuedTTL))
}

func (s *Store) resetStale(ctx context.Context, w *wconn, candidates []*domain.Job, p *ports.ResetStaleParams) (storekit.Result, error) {
	var reset []*domain.Job
	for _, j := range candidates {
		n, err := w.exec(ctx, s.stmts.resetStale, storekit.Millis(p.Now), storekit.Millis(p.Now.Add(domain.QueuedTTL)), string(j.ID), storekit.Millis(p.DispatchedBefore))
		if err != nil {
			return storekit.Result{}, fmt.Errorf("reset stale job: %w", err)
		}
		if n == 1 {
			j.Status = domain.StatusQueued
			reset = append(reset, j)
		}
	}
	return storekit.Result{Jobs: reset}, nil
}

// CheckWrites implements ports.WriteChecker: nil while commits succeed, the
// failure (and since when) otherwise. If the writer has tried no commit for
// Options.WriteProbeAfter, a probe commit runs first. SQLite needs no
// reopening after a failed commit (a full disk fails the transaction, which
// is rolled back); the next commit that finds room succeeds.
func (s *Store) CheckWrites(ctx context.Context) error {
	return s.w.CheckWrites(ctx, s.opts.WriteProbeAfter)
}
