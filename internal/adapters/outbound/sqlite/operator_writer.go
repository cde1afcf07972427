package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// rowQuery reads one job's row, by id or, when the caller knows it, by seq
// with the id re-checked (like rowStmt).
type rowQuery struct{ byID, bySeq *wstmt }

func (r rowQuery) queryRow(ctx context.Context, w *wconn, seq int64, id domain.JobID) wrow {
	if seq > 0 {
		return w.queryRow(ctx, r.bySeq, seq, string(id))
	}
	return w.queryRow(ctx, r.byID, string(id))
}

// prepareOperator prepares the statements of the operator's writes with
// the helpers of writeStmts.prepare.
func (w *writeStmts) prepareOperator(p func(string) *wstmt, row func(string) rowStmt, query func(string) rowQuery) {
	w.selectJob = query("SELECT " + jobColumns + " FROM jobs")
	// A retry starts a new attempt cycle: only the request, the seq, the
	// history and the options but the schedule and the deadline are kept
	// (an operator's retry runs now). The conditions are domain.Job.Retryable and "not
	// expired", so that a bulk retry needs no read before it.
	w.retry = row(`UPDATE jobs SET status = 'queued', attempts = 0, deferrals = 0, response_status = 0,
		response_body = NULL, apart = apart & ` + keepRequestApart + `, response_truncated = 0, response_content_type = '', reason = '',
		ready_lane = lane, ready_seq = ?, delivery_status = '', delivery_attempts = 0, delivery_response = 0,
		delivery_reason = '', updated_at = ?, expires_at = ?, not_before = 0, deadline = 0
		WHERE status IN ('completed', 'failed') AND delivery_status != 'pending' AND (expires_at = 0 OR expires_at > ?)`)
	// A cancel is a Finish as failed of a job still queued, keeping its
	// attempts and history.
	w.cancel = row(`UPDATE jobs SET status = 'failed', updated_at = ?, expires_at = ?, response_status = 0,
		response_body = NULL, apart = apart & ` + keepRequestApart + `, response_truncated = 0, response_content_type = '', reason = ?,
		ready_lane = ?, ready_seq = ?, delivery_status = ?, deferrals = 0
		WHERE status = 'queued' AND (expires_at = 0 OR expires_at > ?)`)
	w.processedOf = p("SELECT processed FROM operations WHERE id = ?")
	w.saveOp = p(`INSERT INTO operations (id, kind, state, filter, cursor_seq, total, processed, changed, skipped, error,
		created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, state = excluded.state, filter = excluded.filter,
		cursor_seq = excluded.cursor_seq, total = excluded.total, processed = excluded.processed,
		changed = excluded.changed, skipped = excluded.skipped, error = excluded.error,
		created_at = excluded.created_at, updated_at = excluded.updated_at`)
	w.pause = p(`INSERT INTO lane_pauses (upstream, at, reason) VALUES (?, ?, ?)
		ON CONFLICT (upstream) DO UPDATE SET at = excluded.at, reason = excluded.reason`)
	w.resume = p("DELETE FROM lane_pauses WHERE upstream = ?")
}

// applyRetry re-queues one finished job. The row is read first so that the
// caller learns why a job cannot be retried, and gets the job as stored.
func (s *Store) applyRetry(ctx context.Context, w *wconn, p *ports.RetryParams) (storekit.Result, error) {
	j, err := scanJob(s.stmts.selectJob.queryRow(ctx, w, p.Seq, p.ID))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return storekit.Result{Err: domain.ErrNotFound}, nil
	case err != nil:
		return storekit.Result{}, fmt.Errorf("read job to retry: %w", err)
	case j.Expired(p.Now):
		return storekit.Result{Err: domain.ErrNotFound}, nil
	case !j.Retryable():
		return storekit.Result{Err: domain.ErrNotFinished}, nil
	}
	ok, err := s.retryJob(ctx, w, j.Seq, j.ID, p.Now)
	if err != nil {
		return storekit.Result{}, err
	}
	if !ok { // the row was read in this transaction, by the only writer
		return storekit.Result{}, fmt.Errorf("retry job %s: its row did not change", j.ID)
	}
	now := storekit.FromMillis(storekit.Millis(p.Now))
	j.Status, j.Attempts, j.Deferrals, j.Result, j.Delivery = domain.StatusQueued, 0, 0, nil, nil
	j.ReadyQueue, j.ReadySeq = j.Queue, s.seq
	j.UpdatedAt, j.ExpiresAt = now, now.Add(domain.QueuedTTL)
	j.NotBefore, j.Deadline = time.Time{}, time.Time{}
	return storekit.Result{Job: j}, nil
}

// retryJob re-queues the job if it is retryable and live, with the next
// ready_seq, and reports whether it did.
func (s *Store) retryJob(ctx context.Context, w *wconn, seq int64, id domain.JobID, now time.Time) (bool, error) {
	readySeq := s.seq + 1
	n, err := s.stmts.retry.exec(ctx, w, seq, id, readySeq, storekit.Millis(now), storekit.Millis(now.Add(domain.QueuedTTL)),
		storekit.Millis(now))
	if err != nil {
		return false, fmt.Errorf("retry job: %w", err)
	}
	if n == 1 {
		s.seq = readySeq
	}
	return n == 1, nil
}

// cancelJob finishes the job as cancelled if it is queued and live, making
// its delivery due in it.DeliverIn, and reports whether it did.
func (s *Store) cancelJob(ctx context.Context, w *wconn, it ports.BatchItem, p *ports.RunBatchParams) (bool, error) {
	readySeq, delivery, expiresAt := s.deliveryDue(it.DeliverIn, p.Now, domain.RetentionTTL(domain.StatusFailed, p.Retention))
	n, err := s.stmts.cancel.exec(ctx, w, it.Seq, it.ID, storekit.Millis(p.Now), storekit.Millis(expiresAt),
		domain.ReasonCanceled, string(it.DeliverIn), readySeq, delivery, storekit.Millis(p.Now))
	if err != nil {
		return false, fmt.Errorf("cancel job: %w", err)
	}
	if n == 1 {
		s.seq = max(s.seq, readySeq)
	}
	return n == 1, nil
}

// applyRunBatch runs one batch of a bulk operation. Everything it writes —
// the jobs it changes and the operation's new progress, with the batch's
// changed and skipped counts added — is in the group's transaction, so a crash keeps all of it or none. The progress check comes
// before any write, so a refused batch writes nothing.
func (s *Store) applyRunBatch(ctx context.Context, w *wconn, p *ports.RunBatchParams) (storekit.Result, error) {
	var processed int64
	switch err := w.queryRow(ctx, s.stmts.processedOf, p.Op.ID).Scan(&processed); {
	case errors.Is(err, sql.ErrNoRows):
		return storekit.Result{Err: domain.ErrNotFound}, nil
	case err != nil:
		return storekit.Result{}, fmt.Errorf("read operation progress: %w", err)
	case processed != p.PrevProcessed:
		return storekit.Result{Err: ports.ErrOperationConflict}, nil
	}
	act := func(it ports.BatchItem) (bool, error) { return s.retryJob(ctx, w, it.Seq, it.ID, p.Now) }
	switch p.Op.Kind {
	case domain.OpKindRetry:
	case domain.OpKindCancel:
		act = func(it ports.BatchItem) (bool, error) { return s.cancelJob(ctx, w, it, p) }
	default:
		return storekit.Result{Err: fmt.Errorf("operation %s: unknown kind %q", p.Op.ID, p.Op.Kind)}, nil
	}
	var changed []domain.JobID
	for _, it := range p.Items {
		ok, err := act(it)
		if err != nil {
			return storekit.Result{}, err
		}
		if ok {
			changed = append(changed, it.ID)
		}
	}
	// The batch's own counts go in with its changes (the caller's Op is
	// left as it gave it).
	saved := *p.Op
	saved.Changed += int64(len(changed))
	saved.Skipped += int64(len(p.Items) - len(changed))
	if err := s.saveOperation(ctx, w, &saved); err != nil {
		return storekit.Result{}, err
	}
	return storekit.Result{IDs: changed}, nil
}

func (s *Store) saveOperation(ctx context.Context, w *wconn, op *domain.Operation) error {
	filter, err := storekit.EncodeFilter(op.Filter)
	if err != nil {
		return err
	}
	_, err = w.exec(ctx, s.stmts.saveOp, op.ID, string(op.Kind), string(op.State), filter,
		op.Cursor, op.Total, op.Processed, op.Changed, op.Skipped, op.Error,
		storekit.Millis(op.CreatedAt), storekit.Millis(op.UpdatedAt))
	if err != nil {
		return fmt.Errorf("save operation: %w", err)
	}
	return nil
}
