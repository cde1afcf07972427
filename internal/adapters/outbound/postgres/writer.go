package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	opRecoverLane
	opPurge
)

// op is one write waiting for the writer. done is nil for fire-and-forget ops.
type op struct {
	kind     opKind
	job      *domain.Job
	id       domain.JobID
	at       time.Time
	ids      []string
	jobs     []*domain.Job
	requeue  *ports.RequeueParams
	finish   *ports.FinishParams
	delivery *ports.FinishDeliveryParams
	stale    *ports.ResetStaleParams
	upstream domain.UpstreamKey
	done     chan opResult
}

type opResult struct {
	job   *domain.Job
	fresh bool
	n     int64
	jobs  []*domain.Job
	err   error
}

// writer is the single goroutine that writes: it runs the ops waiting, up to
// MaxBatch at a time, in one transaction each, sent as one pipelined batch
// (one round trip and one WAL flush per group; see internal/groupcommit).
func (s *Store) writer() {
	defer close(s.done)
	groupcommit.Run(s.ops, s.closing, groupcommit.Options{MaxBatch: s.opts.MaxBatch, GatherYields: s.opts.GatherYields},
		s.commit)
}

// commit runs batch and answers every waiting caller. The group is one
// transaction: if it fails, no op in it took effect and every caller is told
// so. A deadlock with another process's group is retried. A statement that
// PostgreSQL refuses for its data (not for being unreachable) would fail
// every op sharing the group, so the group is then re-run one op per
// transaction and only the offending op fails.
func (s *Store) commit(batch []*op) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	superseded := supersededMarks(batch)
	live := make([]*op, 0, len(batch))
	for i, o := range batch {
		if !superseded[i] {
			live = append(live, o)
		}
	}
	results, err := s.run(ctx, live)
	for attempt := 1; err != nil && retryable(err) && attempt < 3 && ctx.Err() == nil; attempt++ {
		results, err = s.run(ctx, live)
	}
	if err != nil && len(live) > 1 && dataError(err) {
		s.log.Warn("postgres group commit refused; retrying its operations one by one", zap.Int("ops", len(live)), zap.Error(err))
		results, err = make([]opResult, len(live)), nil
		for i, o := range live {
			r, e := s.run(ctx, []*op{o})
			if e != nil {
				r = []opResult{{err: unavailable("write job", e)}}
			}
			results[i] = r[0]
		}
	}
	if len(live) > 0 {
		s.health.Record(err, time.Now())
	}
	if err != nil {
		s.log.Error("postgres group commit failed", zap.Int("ops", len(live)), zap.Error(err))
		err = unavailable("job store write failed", err)
	}
	for i, o := range live {
		if o.done == nil {
			continue
		}
		if err != nil {
			o.done <- opResult{err: err}
		} else {
			o.done <- results[i]
		}
	}
	for i, o := range batch {
		if superseded[i] && o.done != nil {
			o.done <- opResult{}
		}
	}
}

// retryable reports whether err aborted a transaction that may simply be run
// again (a deadlock with, or a serialization failure against, another
// process's transaction).
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// dataError reports whether PostgreSQL refused a statement for what it
// contained, as opposed to being unreachable, overloaded, shutting down or
// out of time.
func dataError(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	switch pe.Code[:2] {
	case "08", "40", "53", "54", "55", "57", "58", "XX":
		return false
	}
	return true
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

// run applies ops in one transaction: a single pipelined batch, which
// PostgreSQL runs as one implicit transaction committed at its end. It
// returns each op's outcome, or an error if the transaction failed (then no
// op took effect).
//
// Inserts whose key is already taken, and inserts that repeat a key another
// insert of this group uses, cannot be decided before the first batch's
// results are in; they are settled afterwards in further transactions
// (settleInserts), each insert still one atomic step on the unique index.
// Their callers' results then depend only on their own transaction.
func (s *Store) run(ctx context.Context, ops []*op) ([]opResult, error) {
	results := make([]opResult, len(ops))
	b := &pgx.Batch{}
	var inserts []int
	for i, o := range ops {
		if o.kind == opInsert {
			inserts = append(inserts, i)
			continue
		}
		if err := s.queue(b, o, &results[i]); err != nil {
			results[i].err = err // cannot happen for well-formed ops; fails only this op
		}
	}
	// The first insert of each key goes into the batch; repeats wait.
	round, later := splitRound(ops, inserts)
	var conflicts []int
	if len(round) > 0 {
		s.queueInsert(b, ops, round, results, &conflicts)
	}
	if b.Len() > 0 {
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
		s.commits.Add(1)
		s.committedOps.Add(int64(len(ops) - len(conflicts) - len(later)))
	}
	if len(conflicts) > 0 || len(later) > 0 {
		s.settleInserts(ctx, ops, append(conflicts, later...), results)
	}
	return results, nil
}

// splitRound returns, of the inserts at indexes idx, the first of each
// (user_id, idempotent_key) sorted by key (a fixed lock order, so groups of
// two processes inserting the same keys cannot deadlock), and the rest in
// their original order.
func splitRound(ops []*op, idx []int) (round, rest []int) {
	if len(idx) == 0 {
		return nil, nil
	}
	seen := make(map[[2]string]bool, len(idx))
	for _, i := range idx {
		k := [2]string{ops[i].job.UserID, ops[i].job.IdempotentKey}
		if seen[k] {
			rest = append(rest, i)
			continue
		}
		seen[k] = true
		round = append(round, i)
	}
	sort.Slice(round, func(a, b int) bool {
		ja, jb := ops[round[a]].job, ops[round[b]].job
		if ja.UserID != jb.UserID {
			return ja.UserID < jb.UserID
		}
		return ja.IdempotentKey < jb.IdempotentKey
	})
	return round, rest
}

// sqlInsert inserts many jobs in one statement. Each row takes one value of
// jobs_seq for both seq and ready_seq (OFFSET 0 keeps the subquery, so
// nextval runs once per row). Rows whose key is taken are skipped, and only
// inserted rows are returned.
const sqlInsert = `INSERT INTO jobs (id, user_id, idempotent_key, url, pool_id, method, headers, body, webhook_url,
	lane, status, attempts, deferrals, created_at, updated_at, expires_at, ready_lane, owner, seq, ready_seq)
SELECT id, user_id, idempotent_key, url, pool_id, method, headers, body, webhook_url,
	lane, status, attempts, deferrals, created_at, updated_at, expires_at, ready_lane, $18, n, n
FROM (SELECT t.*, nextval('jobs_seq') AS n
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bytea[],
		$9::text[], $10::text[], $11::text[], $12::int4[], $13::int4[], $14::int8[], $15::int8[], $16::int8[], $17::text[])
	AS t(id, user_id, idempotent_key, url, pool_id, method, headers, body, webhook_url,
		lane, status, attempts, deferrals, created_at, updated_at, expires_at, ready_lane)
	OFFSET 0) x
ON CONFLICT (user_id, idempotent_key) DO NOTHING
RETURNING id, seq`

// queueInsert adds one multi-row insert of the jobs at idx to b. Its callback
// fills the results of inserted jobs and lists the others in conflicts.
func (s *Store) queueInsert(b *pgx.Batch, ops []*op, idx []int, results []opResult, conflicts *[]int) {
	n := len(idx)
	var (
		ids, users, keys, urls, pools, methods, headers = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n),
			make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		webhooks, lanes, statuses, readyLanes = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		bodies                                = make([][]byte, 0, n)
		attempts, deferrals                   = make([]int32, 0, n), make([]int32, 0, n)
		created, updated, expires             = make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		rows                                  = make([]int, 0, n)
	)
	for _, i := range idx {
		j := ops[i].job
		h, err := encodeHeaders(j.Headers)
		if err != nil {
			results[i].err = unavailable("insert job", err)
			continue
		}
		rows = append(rows, i)
		ids, users, keys = append(ids, string(j.ID)), append(users, j.UserID), append(keys, j.IdempotentKey)
		urls, pools, methods, headers = append(urls, j.URL), append(pools, j.PoolID), append(methods, j.Method), append(headers, h)
		var body []byte
		if len(j.Body) > 0 {
			body = j.Body
		}
		bodies, webhooks = append(bodies, body), append(webhooks, j.WebhookURL)
		lanes, statuses, readyLanes = append(lanes, string(j.Queue)), append(statuses, string(j.Status)), append(readyLanes, string(j.ReadyQueue))
		attempts, deferrals = append(attempts, int32(j.Attempts)), append(deferrals, int32(j.Deferrals))
		created, updated, expires = append(created, ms(j.CreatedAt)), append(updated, ms(j.UpdatedAt)), append(expires, ms(j.ExpiresAt))
	}
	if len(rows) == 0 {
		return
	}
	b.Queue(sqlInsert, ids, users, keys, urls, pools, methods, headers, bodies, webhooks, lanes, statuses,
		attempts, deferrals, created, updated, expires, readyLanes, s.opts.Owner).Query(func(r pgx.Rows) error {
		inserted := make(map[string]int64, len(rows))
		for r.Next() {
			var id string
			var seq int64
			if err := r.Scan(&id, &seq); err != nil {
				return err
			}
			inserted[id] = seq
		}
		if err := r.Err(); err != nil {
			return err
		}
		for _, i := range rows {
			j := ops[i].job
			seq, ok := inserted[string(j.ID)]
			if !ok {
				*conflicts = append(*conflicts, i)
				continue
			}
			stored := *j // shallow: the caller does not mutate a job after handing it over
			stored.Seq, stored.ReadySeq = seq, seq
			results[i] = opResult{job: &stored, fresh: true}
		}
		return nil
	})
}

// settleInserts decides inserts whose key was taken when the group ran, and
// repeats of a key within the group, in order: each reads the job holding its
// key and returns it if it is live; an expired holder is deleted and the
// insert tried again, in a transaction of its own (the unique index keeps
// that atomic against any concurrent writer, in this process or another).
func (s *Store) settleInserts(ctx context.Context, ops []*op, pending []int, results []opResult) {
	tries := make(map[int]int)
	for len(pending) > 0 {
		if ctx.Err() != nil {
			for _, i := range pending {
				results[i].err = unavailable("insert job", ctx.Err())
			}
			return
		}
		round, rest := splitRound(ops, pending)
		// Read the holders of this round's keys.
		users, keys := make([]string, len(round)), make([]string, len(round))
		for n, i := range round {
			users[n], keys[n] = ops[i].job.UserID, ops[i].job.IdempotentKey
		}
		rows, err := s.pool.Query(ctx, "SELECT "+jobColumns+` FROM jobs
			WHERE (user_id, idempotent_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, users, keys)
		var holders []*domain.Job
		if err == nil {
			holders, err = collect(rows)
		}
		if err != nil {
			for _, i := range append(round, rest...) {
				results[i].err = unavailable("insert job", err)
			}
			return
		}
		byKey := make(map[[2]string]*domain.Job, len(holders))
		for _, h := range holders {
			byKey[[2]string{h.UserID, h.IdempotentKey}] = h
		}
		var retry, expired []int
		var expiredIDs []string
		for _, i := range round {
			j := ops[i].job
			h := byKey[[2]string{j.UserID, j.IdempotentKey}]
			switch {
			case h != nil && !h.Expired(j.CreatedAt):
				results[i] = opResult{job: h, fresh: false}
			case tries[i] >= 3:
				results[i].err = unavailable("insert job", errors.New("the key's holder kept changing"))
			default:
				tries[i]++
				if h != nil {
					expired = append(expired, i)
					expiredIDs = append(expiredIDs, string(h.ID))
				} else {
					retry = append(retry, i) // the holder went away meanwhile
				}
			}
		}
		// Replace expired holders and retry the inserts whose holder vanished,
		// in one transaction; what still conflicts goes round again.
		again := append(retry, expired...)
		if len(again) > 0 {
			b := &pgx.Batch{}
			if len(expiredIDs) > 0 {
				b.Queue("DELETE FROM jobs WHERE id = ANY($1)", expiredIDs)
			}
			var conflicts []int
			sort.Ints(again)
			againRound, _ := splitRound(ops, again) // keys are distinct: keeps all, in key order
			s.queueInsert(b, ops, againRound, results, &conflicts)
			if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
				for _, i := range again {
					results[i] = opResult{err: unavailable("insert job", err)}
				}
			} else {
				s.commits.Add(1)
				s.committedOps.Add(int64(len(again) - len(conflicts)))
				rest = append(conflicts, rest...)
			}
		}
		pending = rest
	}
}

// queue adds the statement of a non-insert op to b, with a callback that
// records its outcome in r.
func (s *Store) queue(b *pgx.Batch, o *op, r *opResult) error {
	notFoundIfNone := func(ct pgconn.CommandTag) error {
		if ct.RowsAffected() == 0 {
			r.err = domain.ErrNotFound
		}
		return nil
	}
	switch o.kind {
	case opDelete:
		b.Queue("DELETE FROM jobs WHERE id = $1", string(o.id)).Exec(notFoundIfNone)
	case opMarkInFlight:
		b.Queue(`UPDATE jobs SET status = 'in_flight', dispatched_at = $2, updated_at = $2, owner = $3
			WHERE id = $1 AND status IN ('queued', 'in_flight')`, string(o.id), ms(o.at), s.opts.Owner)
	case opRequeue:
		p := o.requeue
		switch p.Phase {
		case domain.PhaseDispatch:
			b.Queue(`UPDATE jobs SET status = 'queued', attempts = $2, deferrals = $3, updated_at = $4, expires_at = $5, owner = $6
				WHERE id = $1 AND status IN ('queued', 'in_flight')`,
				string(o.id), p.Attempts, p.Deferrals, ms(p.Now), ms(p.Now.Add(domain.QueuedTTL)), s.opts.Owner).Exec(notFoundIfNone)
		case domain.PhaseDeliver:
			b.Queue(`UPDATE jobs SET delivery_attempts = $2, deferrals = $3, delivery_response = $4, delivery_reason = $5,
				updated_at = $6, owner = $7 WHERE id = $1 AND delivery_status = 'pending'`,
				string(o.id), p.Attempts, p.Deferrals, p.Response, text(p.Reason), ms(p.Now), s.opts.Owner).Exec(notFoundIfNone)
		default:
			r.err = domain.ErrNotFound // no job is in that phase
		}
	case opFinish:
		s.queueFinish(b, o.finish, r)
	case opFinishDelivery:
		p := o.delivery
		status := domain.DeliveryDelivered
		if !p.Delivered {
			status = domain.DeliveryFailed
		}
		b.Queue(`UPDATE jobs SET delivery_status = $2, delivery_attempts = $3, delivery_response = $4,
			delivery_reason = $5, updated_at = $6, ready_lane = '', owner = $9,
			expires_at = $6 + CASE status WHEN 'completed' THEN $7::bigint ELSE $8::bigint END
			WHERE id = $1 AND delivery_status = 'pending'`,
			string(o.id), string(status), p.Attempts, p.Response, text(p.Reason), ms(p.Now),
			domain.CompletedTTL.Milliseconds(), domain.FailedTTL.Milliseconds(), s.opts.Owner).Exec(notFoundIfNone)
	case opRecover:
		b.Queue(`UPDATE jobs SET status = 'queued', updated_at = $2
			WHERE `+mineOrDead("$1")+` AND ready_lane <> '' AND status = 'in_flight'`,
			s.opts.Owner, ms(o.at)).Exec(func(ct pgconn.CommandTag) error {
			r.n = ct.RowsAffected()
			return nil
		})
	case opRecoverLane:
		b.Queue(sqlRecoverLane, string(o.upstream), ms(o.at)).Exec(func(ct pgconn.CommandTag) error {
			r.n = ct.RowsAffected()
			return nil
		})
	case opResetStale:
		p := o.stale
		ids := make([]string, len(o.jobs))
		for i, j := range o.jobs {
			ids[i] = string(j.ID)
		}
		b.Queue(`UPDATE jobs SET status = 'queued', updated_at = $3, expires_at = $4
			WHERE id = ANY ($2) AND `+mineOrDead("$1")+`
			AND status = 'in_flight' AND dispatched_at < $5
			RETURNING id`,
			s.opts.Owner, ids, ms(p.Now), ms(p.Now.Add(domain.QueuedTTL)), ms(p.DispatchedBefore)).Query(func(rows pgx.Rows) error {
			reset := make(map[string]bool)
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				reset[id] = true
			}
			if err := rows.Err(); err != nil {
				return err
			}
			for _, j := range o.jobs {
				if reset[string(j.ID)] {
					j.Status = domain.StatusQueued
					j.UpdatedAt, j.ExpiresAt = p.Now, p.Now.Add(domain.QueuedTTL)
					r.jobs = append(r.jobs, j)
				}
			}
			return nil
		})
	case opPurge:
		// Rows another process is purging (or writing) right now are left
		// to it rather than waited for.
		b.Queue(`DELETE FROM jobs WHERE id IN (
			SELECT id FROM jobs WHERE id = ANY ($1) AND expires_at <= $2 FOR UPDATE SKIP LOCKED)`, o.ids, ms(o.at)).Exec(func(ct pgconn.CommandTag) error {
			r.n = ct.RowsAffected()
			return nil
		})
	default:
		return fmt.Errorf("unknown op %d", o.kind)
	}
	return nil
}

// sqlFinish records the terminal status of a job that is not terminal yet
// and, when a receiver lane is given, makes its delivery due there with a new
// ready_seq; the job's owner becomes this process. It returns that ready_seq (NULL when no
// row changed: the job is gone or already terminal) and whether the job
// exists.
const sqlFinish = `WITH u AS (
	UPDATE jobs SET status = $2, attempts = $3, updated_at = $4, expires_at = $5, response_status = $6,
		response_body = $7, response_truncated = $8, response_content_type = $9, reason = $10,
		ready_lane = $11::text, ready_seq = CASE WHEN $11::text <> '' THEN nextval('jobs_seq') ELSE 0 END,
		delivery_status = $12, deferrals = 0, owner = $13
	WHERE id = $1 AND status IN ('queued', 'in_flight')
	RETURNING ready_seq)
SELECT (SELECT ready_seq FROM u), EXISTS (SELECT 1 FROM jobs WHERE id = $1)`

func (s *Store) queueFinish(b *pgx.Batch, p *ports.FinishParams, r *opResult) {
	res := p.Result
	if res == nil {
		res = &domain.Result{}
	}
	var delivery string
	expiresAt := p.Now.Add(domain.TTL(p.Status))
	if p.DeliverIn != "" {
		delivery = string(domain.DeliveryPending)
		expiresAt = p.Now.Add(max(domain.TTL(p.Status), domain.QueuedTTL)) // time to deliver
	}
	var body []byte
	if len(res.Body) > 0 {
		body = res.Body
	}
	b.Queue(sqlFinish, string(p.ID), string(p.Status), p.Attempts, ms(p.Now), ms(expiresAt), res.ResponseStatus,
		body, res.BodyTruncated, text(res.ContentType), text(res.Reason), string(p.DeliverIn), delivery,
		s.opts.Owner).QueryRow(func(row pgx.Row) error {
		var readySeq *int64
		var exists bool
		if err := row.Scan(&readySeq, &exists); err != nil {
			return err
		}
		switch {
		case readySeq != nil:
			r.n = *readySeq
		case !exists:
			r.err = domain.ErrNotFound
		}
		return nil // already terminal: left alone, no second delivery
	})
}

// CheckWrites implements ports.WriteChecker: nil while commits succeed, the
// failure (and since when) otherwise. If the writer has tried no commit for
// Options.WriteProbeAfter, a probe transaction runs first: a statement
// against the jobs table that changes nothing (it still needs the table
// to take writes: privileges, a read-only database or standby, triggers)
// and the assignment of a transaction id, whose commit PostgreSQL must
// write to its WAL.
func (s *Store) CheckWrites(ctx context.Context) error {
	if s.health.Idle(time.Now(), s.opts.WriteProbeAfter) {
		ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		defer cancel()
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "UPDATE jobs SET seq = seq WHERE false"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "SELECT pg_current_xact_id()")
			return err
		})
		if err != nil && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return s.health.Err() // the caller went away: no verdict
		}
		s.health.Record(err, time.Now())
	}
	return s.health.Err()
}
