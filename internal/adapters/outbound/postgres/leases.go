package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// Lane leases (ports.Cluster): one aquifer_lanes row per upstream, held by
// the process named in owner while until (database clock) lies ahead. See
// doc.go for why at most one process holds a lane at a time.

// InstanceID implements ports.Cluster: Options.Owner.
func (s *Store) InstanceID() string { return s.opts.Owner }

// untilExpr is the until that renewing or taking writes into the lease row
// l: now() + TTL ($2, in milliseconds), but never earlier than the until
// already there. now() is the start of the writing transaction, not the
// time of the write, and two transactions of this process (concurrent
// SyncLeases calls, or one whose caller gave up on it while the database
// still runs it) may write a row in the opposite order of their starts.
// The one that started first locks the row after the other committed,
// passes the owner re-check, and with a plain now() + TTL would move until
// back, cutting short the lease the other call just returned: another
// process could then take the lane while that caller still dispatches it.
// Keeping the later until, every lease granted lasts at least until its
// transaction's now() + TTL, whatever commits after it. Only releasing
// (ReleaseLeases, sqlFreeMyLanes) moves until back, to -infinity.
const untilExpr = `greatest(l.until, now() + $2 * interval '1 millisecond')`

// Statements that lock several lease rows and wait for locks lock them in
// upstream order (a FOR UPDATE subquery with ORDER BY), so that two of them
// naming overlapping lanes cannot deadlock. Taking never waits (SKIP LOCKED).

// sqlRenewLeases renews the leases this process ($1) still holds among the
// given upstreams, saving the state each carries, and returns them. A lease
// another process took meanwhile (owner changed) is not touched and not
// returned: the lock re-checks the owner on the row's newest version. One
// that ran out but nobody took is still this process's, and renewing it is
// safe, since nobody else dispatched the lane meanwhile.
//
// The new until never comes before the row's current one (see untilExpr).
const sqlRenewLeases = `WITH locked AS (
	SELECT upstream FROM aquifer_lanes WHERE upstream = ANY ($3::text[]) AND owner = $1
	ORDER BY upstream FOR UPDATE
)
UPDATE aquifer_lanes l
	SET until = ` + untilExpr + `, saved = h.saved, rps = h.rps,
		max_concurrent = h.max_concurrent, account_queues = h.account_queues, updated_at = now()
	FROM locked, unnest($3::text[], $4::bool[], $5::float8[], $6::int4[], $7::bool[])
		AS h(upstream, saved, rps, max_concurrent, account_queues)
	WHERE l.upstream = locked.upstream AND h.upstream = l.upstream AND l.owner = $1
	RETURNING l.upstream, l.saved, l.rps, l.max_concurrent, l.account_queues`

// sqlEnsureLanes creates the (free) rows of lanes never leased before, so
// that taking a lease is always an UPDATE of an existing, lockable row. Rows
// that exist are filtered out by NOT EXISTS, on the statement's snapshot,
// before ON CONFLICT sees them: its arbiter check would otherwise wait for
// every transaction renewing or taking one of them. Only keys that another
// process is creating right now are waited for; they are inserted in sorted
// order, so two processes creating the same new lanes cannot deadlock. It
// runs first in SyncLeases's transaction, before that holds any lock.
const sqlEnsureLanes = `INSERT INTO aquifer_lanes (upstream)
	SELECT u FROM unnest($1::text[]) AS u
	WHERE NOT EXISTS (SELECT 1 FROM aquifer_lanes l WHERE l.upstream = u)
	ON CONFLICT (upstream) DO NOTHING`

// sqlTakeLeases takes, for this process ($1), free or expired leases among
// the wanted upstreams ($3, in the caller's order of preference), at most as
// many as this process may still hold: $4 (Max, 0 = no limit) minus the
// leases among $5 (the held ones just renewed) that are live. A lease this
// process holds but did not list as held (a stray) may be taken again too.
//
// The candidates are locked FOR UPDATE SKIP LOCKED: a row another process
// is taking or renewing right now is passed over rather than waited for,
// and a row another process took after this statement's snapshot is
// re-checked against its newest version once locked (READ COMMITTED
// re-evaluates the WHERE clause), so its fresh until fails the check and
// LIMIT moves on to the next candidate. The state columns are not written,
// so RETURNING gives the state the previous holder saved. A stray's until
// is kept if it is later than the new one (see untilExpr); a row that is
// free or expired gets now() + TTL.
const sqlTakeLeases = `WITH room AS (
	SELECT CASE WHEN $4::int <= 0 THEN NULL
		ELSE greatest($4::int - (SELECT count(*) FROM aquifer_lanes
			WHERE owner = $1 AND until > now() AND upstream = ANY ($5::text[])), 0) END AS n
), cand AS (
	SELECT upstream FROM aquifer_lanes
	WHERE upstream = ANY ($3::text[]) AND (until < now() OR owner = $1)
	ORDER BY array_position($3::text[], upstream)
	LIMIT (SELECT n FROM room)
	FOR UPDATE SKIP LOCKED
)
UPDATE aquifer_lanes l SET owner = $1, until = ` + untilExpr + `, updated_at = now()
FROM cand WHERE l.upstream = cand.upstream
RETURNING l.upstream, l.saved, l.rps, l.max_concurrent, l.account_queues`

// sqlReleaseLeases saves the state of leases this process ($1) holds and
// frees them at once. The owner column keeps the last holder's name.
const sqlReleaseLeases = `WITH locked AS (
	SELECT upstream FROM aquifer_lanes WHERE upstream = ANY ($2::text[]) AND owner = $1
	ORDER BY upstream FOR UPDATE
)
UPDATE aquifer_lanes l
	SET until = '-infinity', saved = h.saved, rps = h.rps, max_concurrent = h.max_concurrent,
		account_queues = h.account_queues, updated_at = now()
	FROM locked, unnest($2::text[], $3::bool[], $4::float8[], $5::int4[], $6::bool[])
		AS h(upstream, saved, rps, max_concurrent, account_queues)
	WHERE l.upstream = locked.upstream AND h.upstream = l.upstream AND l.owner = $1`

// sqlFreeMyLanes frees every lease this process ($1) holds, keeping the
// state saved last (Open, for a previous run's leases; Close).
const sqlFreeMyLanes = `WITH locked AS (
	SELECT upstream FROM aquifer_lanes WHERE owner = $1 AND until > '-infinity'
	ORDER BY upstream FOR UPDATE
)
UPDATE aquifer_lanes l SET until = '-infinity', updated_at = now()
	FROM locked WHERE l.upstream = locked.upstream AND l.owner = $1`

// leaseArrays splits leases into the column arrays the statements unnest.
type leaseArrays struct {
	upstreams []string
	saved     []bool
	rps       []float64
	maxConc   []int32
	account   []bool
}

func toArrays(leases []ports.LaneLease) leaseArrays {
	a := leaseArrays{
		upstreams: make([]string, 0, len(leases)), saved: make([]bool, 0, len(leases)),
		rps: make([]float64, 0, len(leases)), maxConc: make([]int32, 0, len(leases)), account: make([]bool, 0, len(leases)),
	}
	seen := make(map[domain.UpstreamKey]bool, len(leases))
	for _, l := range leases {
		if seen[l.Upstream] {
			continue // one row can be updated once per statement
		}
		seen[l.Upstream] = true
		a.upstreams = append(a.upstreams, string(l.Upstream))
		a.saved = append(a.saved, l.State.Saved)
		a.rps = append(a.rps, l.State.RPS)
		a.maxConc = append(a.maxConc, int32(min(max(l.State.MaxConcurrent, 0), 1<<31-1)))
		a.account = append(a.account, l.State.AccountQueues)
	}
	return a
}

func scanLease(rows pgx.CollectableRow) (ports.LaneLease, error) {
	var (
		l  ports.LaneLease
		u  string
		mc int32
	)
	err := rows.Scan(&u, &l.State.Saved, &l.State.RPS, &mc, &l.State.AccountQueues)
	l.Upstream, l.State.MaxConcurrent = domain.UpstreamKey(u), int(mc)
	return l, err
}

// SyncLeases implements ports.Cluster in one transaction of three
// statements, sent as one pipelined batch (one round trip): create the rows
// of wanted lanes never seen before, renew the held leases that are still
// this process's, take free or expired wanted leases up to Max. Its cost
// depends on the number of lanes named, not on the number of jobs.
func (s *Store) SyncLeases(ctx context.Context, p *ports.SyncLeasesParams) ([]ports.LaneLease, error) {
	if s.isClosed() {
		return nil, domain.ErrClosed
	}
	held := toArrays(p.Held)
	isHeld := make(map[string]bool, len(held.upstreams))
	for _, u := range held.upstreams {
		isHeld[u] = true
	}
	var want []string // in the caller's order, without repeats or held lanes
	for _, u := range p.Want {
		if !isHeld[string(u)] {
			isHeld[string(u)] = true
			want = append(want, string(u))
		}
	}
	sorted := slices.Sorted(slices.Values(want))
	ttl := max(p.TTL, time.Millisecond).Milliseconds()

	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	var out []ports.LaneLease
	err := s.retryDeadlocks(ctx, func() error {
		out = out[:0]
		b := &pgx.Batch{}
		collectInto := func(rows pgx.Rows) error {
			ls, err := pgx.CollectRows(rows, scanLease)
			out = append(out, ls...)
			return err
		}
		if len(want) > 0 {
			b.Queue(sqlEnsureLanes, sorted)
		}
		if len(held.upstreams) > 0 {
			b.Queue(sqlRenewLeases, s.opts.Owner, ttl, held.upstreams, held.saved, held.rps, held.maxConc, held.account).
				Query(collectInto)
		}
		if len(want) > 0 {
			b.Queue(sqlTakeLeases, s.opts.Owner, ttl, want, p.Max, held.upstreams).Query(collectInto)
		}
		if b.Len() == 0 {
			return nil
		}
		return s.pool.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, unavailable("sync lane leases", err)
	}
	return out, nil
}

// retryDeadlocks runs fn (one transaction) again, up to twice, when it
// failed for a deadlock or serialization failure.
func (s *Store) retryDeadlocks(ctx context.Context, fn func() error) error {
	err := fn()
	for attempt := 1; err != nil && retryable(err) && attempt < 3 && ctx.Err() == nil; attempt++ {
		err = fn()
	}
	return err
}

// ReleaseLeases implements ports.Cluster: the leases this process still
// holds among leases are freed at once, with their state saved.
func (s *Store) ReleaseLeases(ctx context.Context, leases []ports.LaneLease) error {
	if s.isClosed() {
		return domain.ErrClosed
	}
	if len(leases) == 0 {
		return nil
	}
	a := toArrays(leases)
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	err := s.retryDeadlocks(ctx, func() error {
		_, err := s.pool.Exec(ctx, sqlReleaseLeases, s.opts.Owner, a.upstreams, a.saved, a.rps, a.maxConc, a.account)
		return err
	})
	return unavailable("release lane leases", err)
}

// sqlInstances lists the processes whose liveness lease is live, with the
// lanes each holds, in id order.
const sqlInstances = `SELECT o.owner,
	coalesce(array_agg(l.upstream ORDER BY l.upstream) FILTER (WHERE l.upstream IS NOT NULL), '{}')
	FROM aquifer_owners o
	LEFT JOIN aquifer_lanes l ON l.owner = o.owner AND l.until > now()
	WHERE o.until > now()
	GROUP BY o.owner ORDER BY o.owner`

// Instances implements ports.Cluster.
func (s *Store) Instances(ctx context.Context) ([]ports.Instance, error) {
	if s.isClosed() {
		return nil, domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, sqlInstances)
	if err != nil {
		return nil, unavailable("list instances", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ports.Instance, error) {
		var (
			in    ports.Instance
			lanes []string
		)
		err := r.Scan(&in.ID, &lanes)
		for _, l := range lanes {
			in.Lanes = append(in.Lanes, domain.UpstreamKey(l))
		}
		return in, err
	})
	if err != nil {
		return nil, unavailable("list instances", err)
	}
	return out, nil
}

// sqlRecoverLane puts back to queued the in-flight jobs of upstream $1 whose
// owner (the process that ran the attempt) is not alive. An upstream's store
// lanes are its shared lane, named like the upstream, and its tenant lanes,
// "<upstream>|<tenant>" (domain.TenantQueue): the range [$1 || '|', $1 || '}')
// holds exactly the keys starting with "$1|" under the C collation of
// ready_lane ('}' follows '|'), and the strpos check keeps out keys whose
// upstream merely starts with "$1|" (QueueKey.Upstream splits at the last
// '|'). Both halves are index conditions on jobs_in_flight.
const sqlRecoverLane = `UPDATE jobs SET status = 'queued', updated_at = $2
	WHERE status = 'in_flight'
	AND (ready_lane = $1::text
		OR (ready_lane >= $1::text || '|' AND ready_lane < $1::text || '}'
			AND strpos(substr(ready_lane, length($1::text) + 2), '|') = 0))
	AND ` + notLive

// RecoverLane implements ports.Cluster. It goes through the writer, like
// the other status changes.
func (s *Store) RecoverLane(ctx context.Context, upstream domain.UpstreamKey) (int, error) {
	if upstream == "" {
		return 0, nil
	}
	return s.w.Count(ctx, &storekit.Op{Kind: storekit.OpRecoverLane, Upstream: upstream, At: time.Now()})
}
