package postgres

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// commit runs group, on the writer goroutine (see internal/groupcommit),
// and answers every waiting caller. The group is one transaction, sent as
// one pipelined batch (one round trip and one WAL flush): if it fails, no op
// in it took effect and every caller is told so. A deadlock with another
// process's group is retried. A statement that PostgreSQL refuses for its
// data (not for being unreachable) would fail every op sharing the group,
// so the group is then re-run one op per transaction and only the
// offending op fails.
func (s *Store) commit(group []*storekit.Op) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	superseded := storekit.Superseded(group)
	live := make([]*storekit.Op, 0, len(group))
	var skipped []*storekit.Op
	for i, o := range group {
		if superseded[i] {
			skipped = append(skipped, o)
		} else {
			live = append(live, o)
		}
	}
	results, err := s.run(ctx, live)
	for attempt := 1; err != nil && retryable(err) && attempt < 3 && ctx.Err() == nil; attempt++ {
		results, err = s.run(ctx, live)
	}
	if err != nil && len(live) > 1 && dataError(err) {
		s.log.Warn("postgres group commit refused; retrying its operations one by one", zap.Int("ops", len(live)), zap.Error(err))
		results, err = make([]storekit.Result, len(live)), nil
		for i, o := range live {
			r, e := s.run(ctx, []*storekit.Op{o})
			if e != nil {
				r = []storekit.Result{{Err: unavailable("write job", e)}}
			}
			results[i] = r[0]
		}
	}
	if len(live) > 0 {
		s.w.Health.Record(err, time.Now())
	}
	if err != nil {
		s.log.Error("postgres group commit failed", zap.Int("ops", len(live)), zap.Error(err))
		err = unavailable("job store write failed", err)
	}
	storekit.Answer(live, results, err)
	storekit.Answer(skipped, make([]storekit.Result, len(skipped)), nil) // they had nothing to write

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
func (s *Store) run(ctx context.Context, ops []*storekit.Op) ([]storekit.Result, error) {
	results := make([]storekit.Result, len(ops))
	b := &pgx.Batch{}
	inserts := s.queueJobOps(b, ops, results)
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
		s.w.Committed(len(ops) - len(conflicts) - len(later))
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
func splitRound(ops []*storekit.Op, idx []int) (round, rest []int) {
	if len(idx) == 0 {
		return nil, nil
	}
	seen := make(map[[2]string]bool, len(idx))
	for _, i := range idx {
		k := [2]string{ops[i].Job.UserID, ops[i].Job.IdempotentKey}
		if seen[k] {
			rest = append(rest, i)
			continue
		}
		seen[k] = true
		round = append(round, i)
	}
	sort.Slice(round, func(a, b int) bool {
		ja, jb := ops[round[a]].Job, ops[round[b]].Job
		if ja.UserID != jb.UserID {
			return ja.UserID < jb.UserID
		}
		return ja.IdempotentKey < jb.IdempotentKey
	})
	return round, rest
}

// insertColumns are the columns of a new job as the inserts send them, one
// array parameter each ($1 … $25, in this order; the owner is $26), and
// insertUnnest turns those arrays into rows.
const (
	insertColumns = `id, user_id, idempotent_key, url, pool_id, method, headers, body, webhook_url,
	lane, status, attempts, deferrals, created_at, updated_at, expires_at, ready_lane, tenant, upstream, url_path, history,
	not_before, deadline, priority, options`
	insertUnnest = `unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bytea[],
		$9::text[], $10::text[], $11::text[], $12::int4[], $13::int4[], $14::int8[], $15::int8[], $16::int8[], $17::text[],
		$18::text[], $19::text[], $20::text[], $21::text[], $22::int8[], $23::int8[], $24::int2[], $25::text[])`
)

// sqlInsert inserts many jobs in one statement. Each row takes one value of
// jobs_seq for seq and, when it is ready at once, for ready_seq too (a
// scheduled job, ready_lane ”, has ready_seq 0 until PromoteDue; OFFSET 0
// keeps the subquery, so nextval runs once per row). Rows whose key is
// taken are skipped, and only inserted rows are returned. tenant, upstream
// and url_path are derived from the request (derive).
const sqlInsert = `INSERT INTO jobs (` + insertColumns + `, owner, seq, ready_seq)
SELECT ` + insertColumns + `, $26, n, CASE WHEN ready_lane <> '' THEN n ELSE 0 END
FROM (SELECT t.*, nextval('jobs_seq') AS n FROM ` + insertUnnest + ` AS t(` + insertColumns + `) OFFSET 0) x
ON CONFLICT (user_id, idempotent_key) DO NOTHING
RETURNING id, seq`

// insertRows are jobs as the array parameters of sqlInsert or
// sqlInsertBatch, in the order of insertColumns.
type insertRows struct {
	ids, users, keys, urls, pools, methods, headers    []string
	webhooks, lanes, statuses, readyLanes              []string
	bodies                                             [][]byte
	attempts, deferrals                                []int32
	created, updated, expires, notBefore, deadlines    []int64
	priorities                                         []int16
	tenants, upstreams, paths, histories, optionsTexts []string
}

// add appends j, or returns why it cannot be encoded (then nothing is
// appended).
func (r *insertRows) add(j *domain.Job) error {
	h, err := storekit.EncodeHeaders(j.Headers)
	if err != nil {
		return err
	}
	hist, err := storekit.EncodeHistory(j.History)
	if err != nil {
		return err
	}
	opts, err := storekit.EncodeOptions(&j.JobOptions)
	if err != nil {
		return err
	}
	d := derive(j.UserID, j.Queue, j.URL)
	r.tenants, r.upstreams, r.paths, r.histories = append(r.tenants, d.tenant), append(r.upstreams, d.upstream), append(r.paths, d.urlPath), append(r.histories, hist)
	r.ids, r.users, r.keys = append(r.ids, string(j.ID)), append(r.users, j.UserID), append(r.keys, j.IdempotentKey)
	r.urls, r.pools, r.methods, r.headers = append(r.urls, j.URL), append(r.pools, j.PoolID), append(r.methods, j.Method), append(r.headers, h)
	var body []byte
	if len(j.Body) > 0 {
		body = j.Body
	}
	r.bodies, r.webhooks = append(r.bodies, body), append(r.webhooks, j.WebhookURL)
	r.lanes, r.statuses, r.readyLanes = append(r.lanes, string(j.Queue)), append(r.statuses, string(j.Status)), append(r.readyLanes, string(j.ReadyQueue))
	r.attempts, r.deferrals = append(r.attempts, int32(j.Attempts)), append(r.deferrals, int32(j.Deferrals))
	r.created, r.updated, r.expires = append(r.created, storekit.Millis(j.CreatedAt)), append(r.updated, storekit.Millis(j.UpdatedAt)), append(r.expires, storekit.Millis(j.ExpiresAt))
	r.notBefore, r.deadlines = append(r.notBefore, storekit.Millis(j.NotBefore)), append(r.deadlines, storekit.Millis(j.Deadline))
	r.priorities, r.optionsTexts = append(r.priorities, int16(j.Priority)), append(r.optionsTexts, opts)
	return nil
}

// args are the statement's parameters: the arrays, then owner.
func (r *insertRows) args(owner string) []any {
	return []any{r.ids, r.users, r.keys, r.urls, r.pools, r.methods, r.headers, r.bodies, r.webhooks, r.lanes, r.statuses,
		r.attempts, r.deferrals, r.created, r.updated, r.expires, r.readyLanes, r.tenants, r.upstreams, r.paths, r.histories,
		r.notBefore, r.deadlines, r.priorities, r.optionsTexts, owner}
}

// inserted is job j as stored under seq: a job ready at once has ReadySeq
// seq, a scheduled one none yet.
func inserted(j *domain.Job, seq int64) *domain.Job {
	stored := *j // shallow: the caller does not mutate a job after handing it over
	stored.Seq, stored.ReadySeq = seq, 0
	if stored.ReadyQueue != "" {
		stored.ReadySeq = seq
	}
	return &stored
}

// queueInsert adds one multi-row insert of the jobs at idx to b. Its callback
// fills the results of inserted jobs and lists the others in conflicts.
func (s *Store) queueInsert(b *pgx.Batch, ops []*storekit.Op, idx []int, results []storekit.Result, conflicts *[]int) {
	var cols insertRows
	rows := make([]int, 0, len(idx))
	for _, i := range idx {
		if err := cols.add(ops[i].Job); err != nil {
			results[i].Err = unavailable("insert job", err)
			continue
		}
		rows = append(rows, i)
	}
	if len(rows) == 0 {
		return
	}
	b.Queue(sqlInsert, cols.args(s.opts.Owner)...).Query(func(r pgx.Rows) error {
		seqs, err := insertedSeqs(r, len(rows))
		if err != nil {
			return err
		}
		for _, i := range rows {
			j := ops[i].Job
			seq, ok := seqs[string(j.ID)]
			if !ok {
				*conflicts = append(*conflicts, i)
				continue
			}
			results[i] = storekit.Result{Job: inserted(j, seq), Fresh: true}
		}
		return nil
	})
}

// insertedSeqs reads the (id, seq) rows an insert returned.
func insertedSeqs(r pgx.Rows, n int) (map[string]int64, error) {
	seqs := make(map[string]int64, n)
	for r.Next() {
		var id string
		var seq int64
		if err := r.Scan(&id, &seq); err != nil {
			return nil, err
		}
		seqs[id] = seq
	}
	return seqs, r.Err()
}

// settleInserts decides inserts whose key was taken when the group ran, and
// repeats of a key within the group, in order: each reads the job holding its
// key and returns it if it is live; an expired holder is deleted and the
// insert tried again, in a transaction of its own (the unique index keeps
// that atomic against any concurrent writer, in this process or another).
func (s *Store) settleInserts(ctx context.Context, ops []*storekit.Op, pending []int, results []storekit.Result) {
	tries := make(map[int]int)
	for len(pending) > 0 {
		if ctx.Err() != nil {
			for _, i := range pending {
				results[i].Err = unavailable("insert job", ctx.Err())
			}
			return
		}
		round, rest := splitRound(ops, pending)
		// Read the holders of this round's keys.
		users, keys := make([]string, len(round)), make([]string, len(round))
		for n, i := range round {
			users[n], keys[n] = ops[i].Job.UserID, ops[i].Job.IdempotentKey
		}
		rows, err := s.pool.Query(ctx, "SELECT "+jobColumns+` FROM jobs
			WHERE (user_id, idempotent_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, users, keys)
		var holders []*domain.Job
		if err == nil {
			holders, err = collect(rows)
		}
		if err != nil {
			for _, i := range append(round, rest...) {
				results[i].Err = unavailable("insert job", err)
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
			j := ops[i].Job
			h := byKey[[2]string{j.UserID, j.IdempotentKey}]
			switch {
			case h != nil && !h.Expired(j.CreatedAt):
				results[i] = storekit.Result{Job: h, Fresh: false}
			case tries[i] >= 3:
				results[i].Err = unavailable("insert job", errors.New("the key's holder kept changing"))
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
					results[i] = storekit.Result{Err: unavailable("insert job", err)}
				}
			} else {
				s.w.Committed(len(again) - len(conflicts))
				rest = append(conflicts, rest...)
			}
		}
		pending = rest
	}
}

// queue adds the statement of a non-insert op to b, with a callback that
// records its outcome in r.
func (s *Store) queue(b *pgx.Batch, o *storekit.Op, r *storekit.Result) error {
	notFoundIfNone := func(ct pgconn.CommandTag) error {
		if ct.RowsAffected() == 0 {
			r.Err = domain.ErrNotFound
		}
		return nil
	}
	switch o.Kind {
	case storekit.OpDelete:
		b.Queue("DELETE FROM jobs WHERE id = $1", string(o.ID)).Exec(notFoundIfNone)
	case storekit.OpInsertBatch:
		s.queueInsertBatch(b, o.Inserts, r)
	case storekit.OpPromote:
		s.queuePromote(b, o, r)
	case storekit.OpMarkInFlight:
		b.Queue(`UPDATE jobs SET status = 'in_flight', dispatched_at = $2, updated_at = $2, owner = $3
			WHERE id = $1 AND status IN ('queued', 'in_flight')`, string(o.ID), storekit.Millis(o.At), s.opts.Owner)
	case storekit.OpRequeue:
		p := o.Requeue
		switch p.Phase {
		case domain.PhaseDispatch:
			hist, err := historyParam(p.History)
			if err != nil {
				r.Err = unavailable("requeue job", err)
				return nil
			}
			b.Queue(`UPDATE jobs SET status = 'queued', attempts = $2, deferrals = $3, updated_at = $4, expires_at = $5, owner = $6,
				history = coalesce($7, history)
				WHERE id = $1 AND status IN ('queued', 'in_flight')`,
				string(o.ID), p.Attempts, p.Deferrals, storekit.Millis(p.Now), storekit.Millis(p.Now.Add(domain.QueuedTTL)), s.opts.Owner,
				hist).Exec(notFoundIfNone)
		case domain.PhaseDeliver:
			b.Queue(`UPDATE jobs SET delivery_attempts = $2, deferrals = $3, delivery_response = $4, delivery_reason = $5,
				updated_at = $6, owner = $7 WHERE id = $1 AND delivery_status = 'pending'`,
				string(o.ID), p.Attempts, p.Deferrals, p.Response, text(p.Reason), storekit.Millis(p.Now), s.opts.Owner).Exec(notFoundIfNone)
		default:
			r.Err = domain.ErrNotFound // no job is in that phase
		}
	case storekit.OpFinish:
		s.queueFinish(b, o.Finish, r)
	case storekit.OpFinishDelivery:
		p := o.Delivery
		d := deliveryValues(p)
		b.Queue(`UPDATE jobs SET delivery_status = $2, delivery_attempts = $3, delivery_response = $4,
			delivery_reason = $5, updated_at = $6, ready_lane = '', owner = $9,
			expires_at = $6 + CASE status WHEN 'completed' THEN $7::bigint ELSE $8::bigint END
			WHERE id = $1 AND delivery_status = 'pending'`,
			string(o.ID), string(d.status), p.Attempts, p.Response, text(p.Reason), storekit.Millis(p.Now),
			d.completedTTL.Milliseconds(), d.failedTTL.Milliseconds(), s.opts.Owner).Exec(notFoundIfNone)
	case storekit.OpRecover:
		b.Queue(`UPDATE jobs SET status = 'queued', updated_at = $2
			WHERE `+mineOrDead("$1")+` AND ready_lane <> '' AND status = 'in_flight'`,
			s.opts.Owner, storekit.Millis(o.At)).Exec(func(ct pgconn.CommandTag) error {
			r.N = ct.RowsAffected()
			return nil
		})
	case storekit.OpRecoverLane:
		b.Queue(sqlRecoverLane, string(o.Upstream), storekit.Millis(o.At)).Exec(func(ct pgconn.CommandTag) error {
			r.N = ct.RowsAffected()
			return nil
		})
	case storekit.OpResetStale:
		p := o.Stale
		ids := make([]string, len(o.Jobs))
		for i, j := range o.Jobs {
			ids[i] = string(j.ID)
		}
		b.Queue(`UPDATE jobs SET status = 'queued', updated_at = $3, expires_at = $4
			WHERE id = ANY ($2) AND `+mineOrDead("$1")+`
			AND status = 'in_flight' AND dispatched_at < $5
			RETURNING id`,
			s.opts.Owner, ids, storekit.Millis(p.Now), storekit.Millis(p.Now.Add(domain.QueuedTTL)), storekit.Millis(p.DispatchedBefore)).Query(func(rows pgx.Rows) error {
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
			for _, j := range o.Jobs {
				if reset[string(j.ID)] {
					j.Status = domain.StatusQueued
					j.UpdatedAt, j.ExpiresAt = p.Now, p.Now.Add(domain.QueuedTTL)
					r.Jobs = append(r.Jobs, j)
				}
			}
			return nil
		})
	case storekit.OpPurge:
		// Rows another process is purging (or writing) right now are left
		// to it rather than waited for.
		b.Queue(`DELETE FROM jobs WHERE id IN (
			SELECT id FROM jobs WHERE id = ANY ($1) AND expires_at <= $2 FOR UPDATE SKIP LOCKED)`, idStrings(o.IDs), storekit.Millis(o.At)).Exec(func(ct pgconn.CommandTag) error {
			r.N = ct.RowsAffected()
			return nil
		})
	case storekit.OpRetry:
		s.queueRetry(b, o.Retry, r)
	case storekit.OpRunBatch:
		s.queueRunBatch(b, o.Batch, r)
	default:
		return s.queueOperatorOp(b, o, r)
	}
	return nil
}

// historyParam is a history as the parameter of a statement that replaces
// the stored one when it is not NULL: nil (keep the stored history) for a
// nil h.
func historyParam(h []domain.Attempt) (*string, error) {
	if h == nil {
		return nil, nil
	}
	enc, err := storekit.EncodeHistory(h)
	return &enc, err
}

// idStrings is ids as the text[] parameter of a statement.
func idStrings(ids []domain.JobID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
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
		delivery_status = $12, deferrals = 0, owner = $13, history = coalesce($14, history)
	WHERE id = $1 AND status IN ('queued', 'in_flight')
	RETURNING ready_seq)
SELECT (SELECT ready_seq FROM u), EXISTS (SELECT 1 FROM jobs WHERE id = $1)`

// finish is what a Finish writes besides its parameters as they are.
type finish struct {
	res       *domain.Result // never nil
	body      []byte         // nil (NULL) for an empty body
	hist      *string        // historyParam's
	delivery  string         // the delivery status: pending when a delivery becomes due
	expiresAt time.Time
}

// finishValues works out what Finish p writes, or fails if p's history
// cannot be encoded.
func finishValues(p *ports.FinishParams) (finish, error) {
	f := finish{res: p.Result}
	if f.res == nil {
		f.res = &domain.Result{}
	}
	var err error
	if f.hist, err = historyParam(p.History); err != nil {
		return finish{}, err
	}
	ttl := domain.RetentionTTL(p.Status, p.Retention)
	f.expiresAt = p.Now.Add(ttl)
	if p.DeliverIn != "" {
		f.delivery = string(domain.DeliveryPending)
		f.expiresAt = p.Now.Add(max(ttl, domain.QueuedTTL)) // time to deliver
	}
	if len(f.res.Body) > 0 {
		f.body = f.res.Body
	}
	return f, nil
}

func (s *Store) queueFinish(b *pgx.Batch, p *ports.FinishParams, r *storekit.Result) {
	f, err := finishValues(p)
	if err != nil {
		r.Err = unavailable("finish job", err)
		return
	}
	res := f.res
	b.Queue(sqlFinish, string(p.ID), string(p.Status), p.Attempts, storekit.Millis(p.Now), storekit.Millis(f.expiresAt), res.ResponseStatus,
		f.body, res.BodyTruncated, text(res.ContentType), text(res.Reason), string(p.DeliverIn), f.delivery,
		s.opts.Owner, f.hist).QueryRow(func(row pgx.Row) error {
		var readySeq *int64
		var exists bool
		if err := row.Scan(&readySeq, &exists); err != nil {
			return err
		}
		switch {
		case readySeq != nil:
			r.N = *readySeq
		case !exists:
			r.Err = domain.ErrNotFound
		}
		return nil // already terminal: left alone, no second delivery
	})
}

// delivery is what a FinishDelivery writes besides its parameters as they
// are.
type delivery struct {
	status domain.DeliveryStatus
	// The job's status is known only to the row: the retention, when set,
	// replaces the TTL of either.
	completedTTL, failedTTL time.Duration
}

func deliveryValues(p *ports.FinishDeliveryParams) delivery {
	d := delivery{status: domain.DeliveryDelivered,
		completedTTL: domain.RetentionTTL(domain.StatusCompleted, p.Retention), failedTTL: domain.RetentionTTL(domain.StatusFailed, p.Retention)}
	if !p.Delivered {
		d.status = domain.DeliveryFailed
	}
	return d
}

// CheckWrites implements ports.WriteChecker: nil while commits succeed, the
// failure (and since when) otherwise. If the writer has tried no commit for
// Options.WriteProbeAfter, a probe transaction runs first: a statement
// against the jobs table that changes nothing (it still needs the table
// to take writes: privileges, a read-only database or standby, triggers)
// and the assignment of a transaction id, whose commit PostgreSQL must
// write to its WAL.
func (s *Store) CheckWrites(ctx context.Context) error {
	if s.w.Health.Idle(time.Now(), s.opts.WriteProbeAfter) {
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
			return s.w.Health.Err() // the caller went away: no verdict
		}
		s.w.Health.Record(err, time.Now())
	}
	return s.w.Health.Err()
}
