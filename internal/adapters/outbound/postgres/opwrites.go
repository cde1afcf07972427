package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// The operators' writes (ports.OperatorStore) are ops of the single writer
// like the dispatcher's, queued into the same group commit by queue.

// retrySet re-queues a finished job as a new attempt cycle: no result, no
// delivery, attempts and deferrals back to zero, ready again in its own
// queue at once, with no not_before and no deadline (an operator's retry
// runs now), ($now, $expires, $owner name the statement's parameters). Its
// request, seq, history, priority and other options stay.
func retrySet(now, expires, owner string) string {
	return `status = 'queued', attempts = 0, deferrals = 0, response_status = 0, response_body = NULL, not_before = 0, deadline = 0,
		response_truncated = false, response_content_type = '', reason = '',
		delivery_status = '', delivery_attempts = 0, delivery_response = 0, delivery_reason = '',
		ready_lane = lane, ready_seq = nextval('jobs_seq'), updated_at = ` + now + `, expires_at = ` + expires + `, owner = ` + owner
}

// retryableRow is the condition under which a job may be re-queued
// (domain.Job.Retryable), and is not expired at $now.
func retryableRow(now string) string {
	return `status IN ('completed', 'failed') AND delivery_status <> 'pending' AND expires_at > ` + now
}

// queueRetry re-queues one job. The update returns the job as stored; when
// it changes nothing, a second statement of the same transaction tells a
// job that is gone (or expired) from one that has not finished.
func (s *Store) queueRetry(b *pgx.Batch, p *ports.RetryParams, r *storekit.Result) {
	now := storekit.Millis(p.Now)
	changed := false
	b.Queue(`UPDATE jobs SET `+retrySet("$2", "$3", "$4")+` WHERE id = $1 AND `+retryableRow("$2")+` RETURNING `+jobColumns,
		string(p.ID), now, storekit.Millis(p.Now.Add(domain.QueuedTTL)), s.opts.Owner).QueryRow(func(row pgx.Row) error {
		j, err := scanJob(row)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		changed, r.Job = true, j
		return nil
	})
	b.Queue(`SELECT expires_at > $2 FROM jobs WHERE id = $1`, string(p.ID), now).QueryRow(func(row pgx.Row) error {
		var live bool
		err := row.Scan(&live)
		switch {
		case errors.Is(err, pgx.ErrNoRows) || (err == nil && !live):
			r.Err = domain.ErrNotFound
		case err != nil:
			return err
		case !changed:
			r.Err = domain.ErrNotFinished
		}
		return nil
	})
}

// A RunBatch is one statement of three data-modifying parts, so that the
// job changes and the operation's progress commit together or not at all:
//
//   - cas locks the operation's row if its processed count is still the one
//     the runner last saw ($13). The lock makes concurrent runners of one
//     operation, in this process or another, wait for each other; under
//     READ COMMITTED the one that waited re-checks processed on the
//     committed row, finds it moved on and selects nothing.
//   - changed acts on the batch's jobs, only if cas selected the row.
//   - op saves the operation's new state (sqlBatchOp), its changed and
//     skipped counts increased by what changed did, only if cas selected
//     the row.
//
// The statement returns whether op saved, whether the operation exists,
// and the jobs changed.
const sqlBatchCAS = `WITH cas AS (
	SELECT id FROM aquifer_operations WHERE id = $1 AND processed = $13 FOR UPDATE)`

// sqlBatchOp ends a RunBatch statement ($14 is the number of items).
const sqlBatchOp = `, op AS (
	UPDATE aquifer_operations SET kind = $2, state = $3, filter = $4, cursor = $5, total = $6, processed = $7,
		changed = $8::bigint + (SELECT count(*) FROM changed), skipped = $9::bigint + $14::bigint - (SELECT count(*) FROM changed),
		error = $10, created_at = $11, updated_at = $12
	WHERE id IN (SELECT id FROM cas)
	RETURNING id)
SELECT EXISTS (SELECT 1 FROM op), EXISTS (SELECT 1 FROM aquifer_operations WHERE id = $1), ARRAY (SELECT id FROM changed)`

// queueRunBatch adds one batch of a bulk operation: its job changes and its
// progress, in one statement.
func (s *Store) queueRunBatch(b *pgx.Batch, p *ports.RunBatchParams, r *storekit.Result) {
	op := p.Op
	filter, err := storekit.EncodeFilter(op.Filter)
	if err != nil {
		r.Err = unavailable("run batch", err)
		return
	}
	args := []any{op.ID, string(op.Kind), string(op.State), filter, op.Cursor, op.Total, op.Processed,
		op.Changed, op.Skipped, text(op.Error), storekit.Millis(op.CreatedAt), storekit.Millis(op.UpdatedAt), p.PrevProcessed,
		int64(len(p.Items))}
	now := storekit.Millis(p.Now)
	ids, lanes := make([]string, len(p.Items)), make([]string, len(p.Items))
	for i, it := range p.Items {
		ids[i], lanes[i] = string(it.ID), string(it.DeliverIn)
	}
	var changed string
	switch op.Kind {
	case domain.OpKindRetry:
		changed = `, changed AS (
	UPDATE jobs SET ` + retrySet("$15", "$16", "$17") + `
	WHERE id = ANY ($18::text[]) AND EXISTS (SELECT 1 FROM cas) AND ` + retryableRow("$15") + `
	RETURNING id)`
		args = append(args, now, storekit.Millis(p.Now.Add(domain.QueuedTTL)), s.opts.Owner, ids)
	case domain.OpKindCancel:
		// As Finish of a queued job as failed with reason "canceled": its
		// delivery, when it has a webhook, becomes due in the item's lane.
		ttl := domain.RetentionTTL(domain.StatusFailed, p.Retention)
		changed = `, changed AS (
	UPDATE jobs j SET status = 'failed', updated_at = $15,
		expires_at = CASE WHEN v.deliver_in <> '' THEN $16::bigint ELSE $17::bigint END,
		response_status = 0, response_body = NULL, response_truncated = false, response_content_type = '',
		reason = $18, ready_lane = v.deliver_in,
		ready_seq = CASE WHEN v.deliver_in <> '' THEN nextval('jobs_seq') ELSE 0 END,
		delivery_status = CASE WHEN v.deliver_in <> '' THEN 'pending' ELSE '' END, deferrals = 0, owner = $19
	FROM unnest($20::text[], $21::text[]) AS v(id, deliver_in)
	WHERE j.id = v.id AND EXISTS (SELECT 1 FROM cas) AND j.status = 'queued' AND j.expires_at > $15
	RETURNING j.id)`
		args = append(args, now, storekit.Millis(p.Now.Add(max(ttl, domain.QueuedTTL))), storekit.Millis(p.Now.Add(ttl)),
			domain.ReasonCanceled, s.opts.Owner, ids, lanes)
	default: // a kind this store does not know acts on no job; its progress is still saved
		changed = `, changed AS (SELECT ''::text AS id WHERE false)`
	}
	sql := sqlBatchCAS + changed + sqlBatchOp
	b.Queue(sql, args...).QueryRow(func(row pgx.Row) error {
		var saved, exists bool
		var changed []string
		if err := row.Scan(&saved, &exists, &changed); err != nil {
			return err
		}
		switch {
		case !exists:
			r.Err = domain.ErrNotFound
		case !saved:
			r.Err = ports.ErrOperationConflict
		default:
			r.IDs = make([]domain.JobID, len(changed))
			for i, id := range changed {
				r.IDs[i] = domain.JobID(id)
			}
		}
		return nil
	})
}

const sqlSaveOperation = `INSERT INTO aquifer_operations (id, kind, state, filter, cursor, total, processed, changed, skipped,
	error, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, state = excluded.state, filter = excluded.filter,
	cursor = excluded.cursor, total = excluded.total, processed = excluded.processed, changed = excluded.changed,
	skipped = excluded.skipped, error = excluded.error, created_at = excluded.created_at, updated_at = excluded.updated_at`

// queueOperatorOp adds the statement of an operator's op other than a batch
// or a retry.
func (s *Store) queueOperatorOp(b *pgx.Batch, o *storekit.Op, r *storekit.Result) error {
	switch o.Kind {
	case storekit.OpSaveOperation:
		op := o.Operation
		filter, err := storekit.EncodeFilter(op.Filter)
		if err != nil {
			r.Err = unavailable("save operation", err)
			return nil
		}
		b.Queue(sqlSaveOperation, op.ID, string(op.Kind), string(op.State), filter, op.Cursor, op.Total, op.Processed,
			op.Changed, op.Skipped, text(op.Error), storekit.Millis(op.CreatedAt), storekit.Millis(op.UpdatedAt))
	case storekit.OpPauseLane:
		b.Queue(`INSERT INTO aquifer_lane_pauses (upstream, at, reason) VALUES ($1, $2, $3)
			ON CONFLICT (upstream) DO UPDATE SET at = excluded.at, reason = excluded.reason`,
			string(o.Pause.Upstream), storekit.Millis(o.Pause.At), text(o.Pause.Reason))
	case storekit.OpResumeLane:
		b.Queue(`DELETE FROM aquifer_lane_pauses WHERE upstream = $1`, string(o.Upstream))
	default:
		return fmt.Errorf("unknown op %d", o.Kind)
	}
	return nil
}
