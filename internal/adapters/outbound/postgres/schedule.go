package postgres

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// Job options (ports.ScheduleStore): batches inserted in one commit,
// scheduled jobs promoted when due, jobs past their deadline found. The
// writes are ops of the single writer (storekit.JobWrites submits them),
// queued into the group commit by queue; the reads go to the pool. doc.go
// ("Job options") has the indexes and their plans.

// scheduledRow is the condition that a row is a scheduled job: the
// predicate of jobs_scheduled, stated in full so that generic plans may
// use the partial index.
const scheduledRow = `ready_lane = '' AND status = 'queued' AND not_before <> 0`

// sqlDeleteExpiredHolders deletes the expired jobs holding a key of a batch
// ($1 users, $2 keys, $3 each job's creation time, the "now" its key is
// judged at, as settleInserts does): the batch's insert then takes their
// keys.
const sqlDeleteExpiredHolders = `DELETE FROM jobs j
	USING unnest($1::text[], $2::text[], $3::int8[]) AS v(user_id, idempotent_key, at)
	WHERE j.user_id = v.user_id AND j.idempotent_key = v.idempotent_key AND j.expires_at > 0 AND j.expires_at <= v.at`

// sqlInsertBatch inserts a batch's jobs: the first job of each key (DISTINCT
// ON, by the batch's order, ord), numbered from jobs_seq in the batch's
// order (the inner subqueries keep their order: OFFSET 0 stops the planner
// from flattening them, so nextval runs once per row, in ord order), then
// inserted in key order (byte order, as the columns' collation and the
// writer's splitRound sort), the lock order every insert of this store
// keeps, so that two processes' groups inserting the same keys do not
// deadlock.
// Rows whose key a stored job holds are skipped (their drawn seq is a
// gap); only inserted rows are returned.
const sqlInsertBatch = `INSERT INTO jobs (` + insertColumns + `, owner, seq, ready_seq)
SELECT ` + insertColumns + `, $26, n, CASE WHEN ready_lane <> '' THEN n ELSE 0 END
FROM (SELECT g.*, nextval('jobs_seq') AS n
	FROM (SELECT * FROM (SELECT DISTINCT ON (user_id, idempotent_key) t.*
			FROM ` + insertUnnest + ` WITH ORDINALITY AS t(` + insertColumns + `, ord)
			ORDER BY user_id, idempotent_key, ord) f
		ORDER BY ord OFFSET 0) g
	OFFSET 0) x
ORDER BY user_id COLLATE "C", idempotent_key COLLATE "C"
ON CONFLICT (user_id, idempotent_key) DO NOTHING
RETURNING id, seq`

// sqlBatchHolders reads the stored jobs holding a batch's keys ($1 users,
// $2 keys) other than the batch's own ($3 its ids): the holders of the keys
// the batch found taken. It runs after sqlInsertBatch in the same
// transaction, with a snapshot of its own, so it sees a holder whose
// commit the insert waited for.
const sqlBatchHolders = "SELECT " + jobColumns + ` FROM jobs
	WHERE (user_id, idempotent_key) IN (SELECT * FROM unnest($1::text[], $2::text[])) AND id <> ALL ($3::text[])`

// queueInsertBatch adds an InsertBatch to b: three statements of the
// group's transaction, so the whole batch commits with the group or not at
// all. The first deletes expired holders of the batch's keys, the second
// inserts the batch (sqlInsertBatch), the third reads the live holders of
// the keys that were taken; its callback answers each job in order: fresh,
// a duplicate of a stored job, or a duplicate of an earlier job of the
// batch.
func (s *Store) queueInsertBatch(b *pgx.Batch, jobs []*domain.Job, r *storekit.Result) {
	var cols insertRows
	for _, j := range jobs {
		if err := cols.add(j); err != nil {
			r.Err = unavailable("insert batch", err)
			return
		}
	}
	b.Queue(sqlDeleteExpiredHolders, cols.users, cols.keys, cols.created)
	var seqs map[string]int64
	b.Queue(sqlInsertBatch, cols.args(s.opts.Owner)...).Query(func(rows pgx.Rows) error {
		var err error
		seqs, err = insertedSeqs(rows, len(jobs))
		return err
	})
	b.Queue(sqlBatchHolders, cols.users, cols.keys, cols.ids).Query(func(rows pgx.Rows) error {
		holders, err := storekit.CollectJobs(rows)
		if err != nil {
			return err
		}
		byKey := make(map[[2]string]*domain.Job, len(holders)+len(jobs))
		for _, h := range holders {
			byKey[[2]string{h.UserID, h.IdempotentKey}] = h
		}
		out := make([]ports.InsertOutcome, len(jobs))
		for i, j := range jobs {
			k := [2]string{j.UserID, j.IdempotentKey}
			if seq, ok := seqs[string(j.ID)]; ok {
				stored := inserted(j, seq)
				out[i], byKey[k] = ports.InsertOutcome{Job: stored, Fresh: true}, stored
				continue
			}
			h := byKey[k]
			if h == nil {
				// The key's holder was deleted between the insert and this
				// read (by another process). The rest of the batch is
				// stored; a retry of the batch answers those as
				// duplicates and inserts this one.
				r.Err = unavailable("insert batch", errors.New("the holder of a job's key went away during the batch; try again"))
				return nil
			}
			out[i] = ports.InsertOutcome{Job: h.Clone()}
		}
		r.Batch = out
		return nil
	})
}

// sqlPromote makes up to $2 scheduled jobs due at $1 ready, in (not_before,
// seq) order, owned by $3. due locks them FOR UPDATE SKIP LOCKED: rows
// another process is promoting (or finishing) right now are skipped, not
// waited for, and a row another process promoted after this statement's
// snapshot is re-checked in its newest version (READ COMMITTED), which is
// no longer scheduled, so it is left out: of two processes promoting at
// once, each job is promoted by exactly one. numbered draws the fresh
// ready_seqs in due's order (the subquery keeps it; nextval runs once per
// row), and the update gives each job its ready_lane, the job's own queue.
const sqlPromote = `WITH due AS (
	SELECT id, not_before, seq FROM jobs
	WHERE ` + scheduledRow + ` AND not_before <= $1
	ORDER BY not_before, seq LIMIT $2
	FOR UPDATE SKIP LOCKED),
numbered AS (
	SELECT id AS due_id, nextval('jobs_seq') AS due_seq FROM (SELECT id FROM due ORDER BY not_before, seq OFFSET 0) d)
UPDATE jobs SET ready_lane = lane, ready_seq = numbered.due_seq, owner = $3
FROM numbered WHERE jobs.id = numbered.due_id
RETURNING ` + jobColumns

// queuePromote adds a PromoteDue to b; its callback returns the promoted
// jobs in the order their ready_seqs were drawn.
func (s *Store) queuePromote(b *pgx.Batch, o *storekit.Op, r *storekit.Result) {
	b.Queue(sqlPromote, storekit.Millis(o.At), o.Limit, s.opts.Owner).Query(func(rows pgx.Rows) error {
		jobs, err := storekit.CollectJobs(rows)
		if err != nil {
			return err
		}
		sort.Slice(jobs, func(a, b int) bool { return jobs[a].ReadySeq < jobs[b].ReadySeq })
		r.Jobs = jobs
		return nil
	})
}

// sqlNextDue is the earliest not_before of a scheduled job: the first entry
// of jobs_scheduled.
const sqlNextDue = `SELECT not_before FROM jobs WHERE ` + scheduledRow + ` ORDER BY not_before, seq LIMIT 1`

// NextDue implements ports.ScheduleStore.
func (s *Store) NextDue(ctx context.Context) (time.Time, error) {
	if s.isClosed() {
		return time.Time{}, domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	var ms int64
	err := s.pool.QueryRow(ctx, sqlNextDue).Scan(&ms)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, unavailable("next due job", err)
	}
	return storekit.FromMillis(ms), nil
}

// sqlOverdue reads jobs_deadline from its start (the earliest deadline)
// up to $1, leaving out expired jobs, and stops after $2 rows. The index
// holds only queued jobs with a deadline, ready or scheduled, so neither
// in-flight nor finished jobs, nor the many jobs without a deadline, are
// read.
const sqlOverdue = "SELECT " + jobColumns + ` FROM jobs
	WHERE deadline <> 0 AND status = 'queued' AND deadline <= $1 AND expires_at > $1
	ORDER BY deadline, seq LIMIT $2`

// Overdue implements ports.ScheduleStore. It reads every process's jobs,
// whoever holds their lanes (the app fails those of the lanes it holds,
// through Finish, which changes only a job still waiting).
func (s *Store) Overdue(ctx context.Context, p *ports.OverdueParams) ([]*domain.Job, error) {
	if s.isClosed() {
		return nil, domain.ErrClosed
	}
	if p.Limit <= 0 {
		return nil, nil
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, sqlOverdue, storekit.Millis(p.Now), p.Limit)
	if err != nil {
		return nil, unavailable("find overdue jobs", err)
	}
	jobs, err := collect(rows)
	if err != nil {
		return nil, unavailable("find overdue jobs", err)
	}
	return jobs, nil
}
