package postgres

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// The lifecycle writes of a group (marks in flight, requeues, finishes,
// finished deliveries) are mostly one per job, and each one alone is a
// statement PostgreSQL parses, plans and executes with its own row lookup.
// run therefore merges the ops of one kind into a single UPDATE ... FROM
// unnest(...) with one array parameter per column, as the group's inserts
// are one INSERT ... SELECT FROM unnest(...). Each merged statement
// returns the ids it changed, and its callback gives every op the result
// its own statement would have given.
//
// Merging moves an op: its statement runs where the merged statement is
// queued, not at its place in the group. That changes nothing only if no
// op it moves past acts on the same job, so:
//
//   - an op is merged only if no other op of the group names its job
//     (sameJob: every op on a job named more than once stays a statement
//     of its own, in group order);
//   - an op that acts on jobs it does not name one by one (RecoverInFlight,
//     ResetStale, PromoteDue, a bulk operation's batch, ...) is a barrier:
//     the ops merged before it are queued before it, and merging starts
//     afresh after it.
//
// Within a merged statement the rows are locked in id order (the arrays
// are sorted by id, and the join reads them in that order), the same order
// whatever the group, so two processes' merged statements on the same
// jobs wait for each other rather than deadlock; a deadlock between
// statements of different kinds is broken by PostgreSQL and the group run
// again, as before.

// sqlPlanByID makes the planner, until sqlPlanAsUsual, find every row by
// its primary key (a nested loop over the arrays, one jobs_pkey lookup per
// element), which is what a merged statement must do at any table size.
// Left to itself it may plan a merged statement as a scan of the whole
// table (a sequential scan, or a bitmap of jobs_list's queued and in-flight
// entries, dead ones included) joined with the arrays: cheaper while the
// table is small or has no statistics yet, and PostgreSQL keeps that
// generic plan for the connection's prepared statement as the table grows,
// until an ANALYZE invalidates it. BenchmarkLifecycle, on a new table,
// ran at half its speed so. The settings are LOCAL to the group's
// transaction, and the statements between the two are only merged ones.
// Those settings leave index scans, so the merged statements that check
// status write it as (status IN (...)) IS TRUE, which no index matches:
// otherwise jobs_list (status, seq) would still offer a scan of every
// queued job. sqlPlanByID keeps each setting's value as it found it in a
// placeholder setting of its own (aquifer.<name>, LOCAL too), and
// sqlPlanAsUsual puts that value back: a server configured with one of
// them off keeps it off for the rest of the group.
var sqlPlanByID, sqlPlanAsUsual = planSettings("enable_seqscan", "enable_bitmapscan", "enable_hashjoin", "enable_mergejoin")

// planSettings returns the statement that saves and turns off the planner
// settings names, and the one that restores them. The saving is a subquery
// in FROM: its set_config calls are volatile, so it is not pulled up and
// runs before the outer ones read the settings they save.
func planSettings(names ...string) (off, restore string) {
	var save, set, back []string
	for _, n := range names {
		save = append(save, fmt.Sprintf("set_config('aquifer.%s', current_setting('%s'), true)", n, n))
		set = append(set, fmt.Sprintf("set_config('%s', 'off', true)", n))
		back = append(back, fmt.Sprintf("set_config('%s', current_setting('aquifer.%s'), true)", n, n))
	}
	return "SELECT " + strings.Join(set, ", ") + " FROM (SELECT " + strings.Join(save, ", ") + ") saved",
		"SELECT " + strings.Join(back, ", ")
}

// mergeKind is a kind of op that run merges: each is one statement.
type mergeKind int

const (
	mergeMark            mergeKind = iota // OpMarkInFlight
	mergeRequeueDispatch                  // OpRequeue in domain.PhaseDispatch
	mergeRequeueDeliver                   // OpRequeue in domain.PhaseDeliver
	mergeFinish                           // OpFinish
	mergeDelivery                         // OpFinishDelivery
	mergeKinds                            // how many there are
)

// mergeKindOf returns the merged statement o can join, if any.
func mergeKindOf(o *storekit.Op) (mergeKind, bool) {
	switch o.Kind {
	case storekit.OpMarkInFlight:
		return mergeMark, true
	case storekit.OpRequeue:
		switch o.Requeue.Phase {
		case domain.PhaseDispatch:
			return mergeRequeueDispatch, true
		case domain.PhaseDeliver:
			return mergeRequeueDeliver, true
		}
	case storekit.OpFinish:
		return mergeFinish, true
	case storekit.OpFinishDelivery:
		return mergeDelivery, true
	}
	return 0, false
}

// namesOneJob reports whether an op of kind k acts on the one job it names
// (Op.ID) and no other row a job op may touch: such ops may be moved
// across one another when their jobs differ. Every other kind but inserts
// (which run writes after everything else, see run) is a barrier.
func namesOneJob(k storekit.Kind) bool {
	switch k {
	case storekit.OpDelete, storekit.OpMarkInFlight, storekit.OpRequeue, storekit.OpFinish, storekit.OpFinishDelivery, storekit.OpRetry:
		return true
	}
	return false
}

// sameJob returns the jobs that more than one op of ops names (namesOneJob),
// or nil if there are none.
func sameJob(ops []*storekit.Op) map[domain.JobID]bool {
	seen := make(map[domain.JobID]bool, len(ops))
	var twice map[domain.JobID]bool
	for _, o := range ops {
		if !namesOneJob(o.Kind) {
			continue
		}
		if seen[o.ID] {
			if twice == nil {
				twice = make(map[domain.JobID]bool)
			}
			twice[o.ID] = true
		}
		seen[o.ID] = true
	}
	return twice
}

// queueJobOps adds the statements of every op of ops but inserts to b,
// merging what may be merged (see above), with callbacks that record each
// op's outcome in results. It returns the indexes of the inserts, for run
// to queue after.
func (s *Store) queueJobOps(b *pgx.Batch, ops []*storekit.Op, results []storekit.Result) (inserts []int) {
	twice := sameJob(ops)
	var pending [mergeKinds][]int
	// flush queues the pending ops: those alone of their kind as they are,
	// then the merged statements, between sqlPlanByID and sqlPlanAsUsual.
	flush := func() {
		merged := 0
		for _, idx := range pending {
			switch {
			case len(idx) == 1:
				s.queueOne(b, ops[idx[0]], &results[idx[0]])
			case len(idx) > 1:
				merged++
			}
		}
		if merged > 0 {
			b.Queue(sqlPlanByID)
			for k, idx := range pending {
				if len(idx) > 1 {
					s.queueMerged(b, mergeKind(k), ops, idx, results)
				}
			}
			b.Queue(sqlPlanAsUsual)
		}
		pending = [mergeKinds][]int{}
	}
	for i, o := range ops {
		if o.Kind == storekit.OpInsert {
			inserts = append(inserts, i)
			continue
		}
		if k, ok := mergeKindOf(o); ok && !twice[o.ID] {
			pending[k] = append(pending[k], i)
			continue
		}
		if !namesOneJob(o.Kind) {
			flush()
		}
		s.queueOne(b, o, &results[i])
	}
	flush()
	return inserts
}

// queueOne adds the statement of one op to b.
func (s *Store) queueOne(b *pgx.Batch, o *storekit.Op, r *storekit.Result) {
	if err := s.queue(b, o, r); err != nil {
		r.Err = err // cannot happen for well-formed ops; fails only this op
	}
}

// queueMerged adds the one statement of the ops at idx, all of kind k and
// each on a job no other op of the group names, to b.
func (s *Store) queueMerged(b *pgx.Batch, k mergeKind, ops []*storekit.Op, idx []int, results []storekit.Result) {
	idx = slices.Clone(idx)
	slices.SortFunc(idx, func(x, y int) int {
		switch a, b := ops[x].ID, ops[y].ID; {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})
	switch k {
	case mergeMark:
		s.queueMarks(b, ops, idx)
	case mergeRequeueDispatch:
		s.queueRequeuesDispatch(b, ops, idx, results)
	case mergeRequeueDeliver:
		s.queueRequeuesDeliver(b, ops, idx, results)
	case mergeFinish:
		s.queueFinishes(b, ops, idx, results)
	case mergeDelivery:
		s.queueDeliveries(b, ops, idx, results)
	}
}

// sqlMarks marks jobs in flight, as OpMarkInFlight's statement does one.
const sqlMarks = `UPDATE jobs j SET status = 'in_flight', dispatched_at = v.at, updated_at = v.at, owner = $3
FROM unnest($1::text[], $2::int8[]) AS v(id, at)
WHERE j.id = v.id AND (j.status IN ('queued', 'in_flight')) IS TRUE`

func (s *Store) queueMarks(b *pgx.Batch, ops []*storekit.Op, idx []int) {
	ids, at := make([]string, len(idx)), make([]int64, len(idx))
	for n, i := range idx {
		ids[n], at[n] = string(ops[i].ID), storekit.Millis(ops[i].At)
	}
	b.Queue(sqlMarks, ids, at, s.opts.Owner)
}

// notFoundUnless returns the callback of a merged statement that returns
// the ids it changed: each op of idx whose job it did not change gets
// domain.ErrNotFound, as notFoundIfNone tells one op.
func notFoundUnless(ops []*storekit.Op, idx []int, results []storekit.Result) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		changed := make(map[string]bool, len(idx))
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			changed[id] = true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, i := range idx {
			if !changed[string(ops[i].ID)] {
				results[i].Err = domain.ErrNotFound
			}
		}
		return nil
	}
}

// sqlRequeuesDispatch puts jobs back in their queue, as a requeue in
// domain.PhaseDispatch does one.
const sqlRequeuesDispatch = `UPDATE jobs j SET status = 'queued', attempts = v.attempts, deferrals = v.deferrals, updated_at = v.now,
	expires_at = v.expires_at, owner = $7, history = coalesce(v.history, j.history)
FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::int8[], $6::text[]) AS v(id, attempts, deferrals, now, expires_at, history)
WHERE j.id = v.id AND (j.status IN ('queued', 'in_flight')) IS TRUE
RETURNING j.id`

func (s *Store) queueRequeuesDispatch(b *pgx.Batch, ops []*storekit.Op, idx []int, results []storekit.Result) {
	var ids []string
	var attempts, deferrals, now, expires []int64
	var hists []*string
	var queued []int
	for _, i := range idx {
		p := ops[i].Requeue
		hist, err := historyParam(p.History)
		if err != nil {
			results[i].Err = unavailable("requeue job", err)
			continue
		}
		queued = append(queued, i)
		ids, hists = append(ids, string(ops[i].ID)), append(hists, hist)
		attempts, deferrals = append(attempts, int64(p.Attempts)), append(deferrals, int64(p.Deferrals))
		now, expires = append(now, storekit.Millis(p.Now)), append(expires, storekit.Millis(p.Now.Add(domain.QueuedTTL)))
	}
	if len(queued) == 0 {
		return
	}
	b.Queue(sqlRequeuesDispatch, ids, attempts, deferrals, now, expires, hists, s.opts.Owner).
		Query(notFoundUnless(ops, queued, results))
}

// sqlRequeuesDeliver defers deliveries, as a requeue in domain.PhaseDeliver
// does one.
const sqlRequeuesDeliver = `UPDATE jobs j SET delivery_attempts = v.attempts, deferrals = v.deferrals, delivery_response = v.response,
	delivery_reason = v.reason, updated_at = v.now, owner = $7
FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::text[], $6::int8[]) AS v(id, attempts, deferrals, response, reason, now)
WHERE j.id = v.id AND j.delivery_status = 'pending'
RETURNING j.id`

func (s *Store) queueRequeuesDeliver(b *pgx.Batch, ops []*storekit.Op, idx []int, results []storekit.Result) {
	n := len(idx)
	ids, reasons := make([]string, n), make([]string, n)
	attempts, deferrals, responses, now := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for k, i := range idx {
		p := ops[i].Requeue
		ids[k], reasons[k] = string(ops[i].ID), text(p.Reason)
		attempts[k], deferrals[k], responses[k], now[k] = int64(p.Attempts), int64(p.Deferrals), int64(p.Response), storekit.Millis(p.Now)
	}
	b.Queue(sqlRequeuesDeliver, ids, attempts, deferrals, responses, reasons, now, s.opts.Owner).
		Query(notFoundUnless(ops, idx, results))
}

// sqlFinishes records the terminal status of jobs, as sqlFinish does one's.
// It returns a row per job of the arrays: its id, the new ready_seq (NULL
// when its row did not change) and, only for a row that did not change,
// whether the job exists (NULL otherwise), so that existence costs a
// lookup only where it decides something.
const sqlFinishes = `WITH v AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::int8[], $6::int8[], $7::bytea[], $8::bool[],
		$9::text[], $10::text[], $11::text[], $12::text[], $13::text[])
		AS v(id, status, attempts, now, expires_at, response_status, response_body, response_truncated, response_content_type,
			reason, ready_lane, delivery_status, history)),
u AS (
	UPDATE jobs j SET status = v.status, attempts = v.attempts, updated_at = v.now, expires_at = v.expires_at,
		response_status = v.response_status, response_body = v.response_body, response_truncated = v.response_truncated,
		response_content_type = v.response_content_type, reason = v.reason,
		ready_lane = v.ready_lane, ready_seq = CASE WHEN v.ready_lane <> '' THEN nextval('jobs_seq') ELSE 0 END,
		delivery_status = v.delivery_status, deferrals = 0, owner = $14, history = coalesce(v.history, j.history)
	FROM v WHERE j.id = v.id AND (j.status IN ('queued', 'in_flight')) IS TRUE
	RETURNING j.id, j.ready_seq)
SELECT v.id, u.ready_seq, CASE WHEN u.id IS NULL THEN EXISTS (SELECT 1 FROM jobs WHERE jobs.id = v.id) END
FROM v LEFT JOIN u ON u.id = v.id`

// finishRows are finishes as the array parameters of sqlFinishes, in the
// order of its columns.
type finishRows struct {
	ids, statuses, contentTypes, reasons, lanes, deliveries []string
	attempts, now, expires, responseStatuses                []int64
	bodies                                                  [][]byte
	truncated                                               []bool
	hists                                                   []*string
}

func (s *Store) queueFinishes(b *pgx.Batch, ops []*storekit.Op, idx []int, results []storekit.Result) {
	var c finishRows
	var queued []int
	for _, i := range idx {
		p := ops[i].Finish
		f, err := finishValues(p)
		if err != nil {
			results[i].Err = unavailable("finish job", err)
			continue
		}
		queued = append(queued, i)
		c.ids, c.statuses, c.attempts = append(c.ids, string(p.ID)), append(c.statuses, string(p.Status)), append(c.attempts, int64(p.Attempts))
		c.now, c.expires = append(c.now, storekit.Millis(p.Now)), append(c.expires, storekit.Millis(f.expiresAt))
		c.responseStatuses, c.bodies = append(c.responseStatuses, int64(f.res.ResponseStatus)), append(c.bodies, f.body)
		c.truncated, c.contentTypes = append(c.truncated, f.res.BodyTruncated), append(c.contentTypes, text(f.res.ContentType))
		c.reasons, c.lanes, c.deliveries = append(c.reasons, text(f.res.Reason)), append(c.lanes, string(p.DeliverIn)), append(c.deliveries, f.delivery)
		c.hists = append(c.hists, f.hist)
	}
	if len(queued) == 0 {
		return
	}
	b.Queue(sqlFinishes, c.ids, c.statuses, c.attempts, c.now, c.expires, c.responseStatuses, c.bodies, c.truncated,
		c.contentTypes, c.reasons, c.lanes, c.deliveries, c.hists, s.opts.Owner).Query(func(rows pgx.Rows) error {
		type outcome struct {
			readySeq *int64
			exists   *bool
		}
		out := make(map[string]outcome, len(queued))
		for rows.Next() {
			var id string
			var o outcome
			if err := rows.Scan(&id, &o.readySeq, &o.exists); err != nil {
				return err
			}
			out[id] = o
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, i := range queued {
			o := out[string(ops[i].Finish.ID)]
			switch {
			case o.readySeq != nil:
				results[i].N = *o.readySeq
			case o.exists == nil || !*o.exists:
				results[i].Err = domain.ErrNotFound
			}
			// Otherwise already terminal: left alone, no second delivery.
		}
		return nil
	})
}

// sqlDeliveries records the outcome of deliveries, as OpFinishDelivery's
// statement does one's.
const sqlDeliveries = `UPDATE jobs j SET delivery_status = v.delivery_status, delivery_attempts = v.attempts,
	delivery_response = v.response, delivery_reason = v.reason, updated_at = v.now, ready_lane = '', owner = $9,
	expires_at = v.now + CASE j.status WHEN 'completed' THEN v.completed_ttl ELSE v.failed_ttl END
FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::text[], $6::int8[], $7::int8[], $8::int8[])
	AS v(id, delivery_status, attempts, response, reason, now, completed_ttl, failed_ttl)
WHERE j.id = v.id AND j.delivery_status = 'pending'
RETURNING j.id`

func (s *Store) queueDeliveries(b *pgx.Batch, ops []*storekit.Op, idx []int, results []storekit.Result) {
	n := len(idx)
	ids, statuses, reasons := make([]string, n), make([]string, n), make([]string, n)
	attempts, responses, now, completedTTL, failedTTL := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for k, i := range idx {
		p := ops[i].Delivery
		d := deliveryValues(p)
		ids[k], statuses[k], reasons[k] = string(ops[i].ID), string(d.status), text(p.Reason)
		attempts[k], responses[k], now[k] = int64(p.Attempts), int64(p.Response), storekit.Millis(p.Now)
		completedTTL[k], failedTTL[k] = d.completedTTL.Milliseconds(), d.failedTTL.Milliseconds()
	}
	b.Queue(sqlDeliveries, ids, statuses, attempts, responses, reasons, now, completedTTL, failedTTL, s.opts.Owner).
		Query(notFoundUnless(ops, idx, results))
}
