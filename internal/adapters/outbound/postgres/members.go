package postgres

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Pool membership (ports.Cluster), shared by every process: any process may
// register a member or take its heartbeat; the holder of the pool's lane
// lease saves the state it keeps (reputation, counters, pace) for all to see.

// sqlPutMember registers a member or records its heartbeat. xmax = 0 holds
// for a row this statement inserted, not for one it updated.
const sqlPutMember = `INSERT INTO aquifer_pool_members AS m
	(pool_id, member_id, address, capacity_rps, heartbeat_interval_ms, last_seen)
	VALUES ($1, $2, $3, $4, $5, now())
	ON CONFLICT (pool_id, member_id) DO UPDATE SET address = excluded.address,
		capacity_rps = excluded.capacity_rps, heartbeat_interval_ms = excluded.heartbeat_interval_ms,
		last_seen = excluded.last_seen
	RETURNING m.xmax = 0, m.last_seen`

// PutMember implements ports.Cluster. It also sets m.LastSeen to the
// database time it recorded.
func (s *Store) PutMember(ctx context.Context, m *ports.PoolMember) (bool, error) {
	if s.isClosed() {
		return false, domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	var (
		created bool
		seen    time.Time
	)
	err := s.pool.QueryRow(ctx, sqlPutMember, m.PoolID, m.MemberID, text(m.Address), m.CapacityRPS,
		m.HeartbeatInterval.Milliseconds()).Scan(&created, &seen)
	if err != nil {
		return false, unavailable("put pool member", err)
	}
	m.LastSeen = seen
	return created, nil
}

// DeleteMember implements ports.Cluster.
func (s *Store) DeleteMember(ctx context.Context, poolID, memberID string) (bool, error) {
	if s.isClosed() {
		return false, domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	ct, err := s.pool.Exec(ctx, "DELETE FROM aquifer_pool_members WHERE pool_id = $1 AND member_id = $2", poolID, memberID)
	if err != nil {
		return false, unavailable("delete pool member", err)
	}
	return ct.RowsAffected() > 0, nil
}

const memberColumns = `pool_id, member_id, address, capacity_rps, heartbeat_interval_ms, last_seen,
	reputation, probation, effective_rps, in_flight, paused, picks, successes, failures`

// Members implements ports.Cluster, in (pool, member) order.
func (s *Store) Members(ctx context.Context, poolID string) ([]ports.PoolMember, error) {
	if s.isClosed() {
		return nil, domain.ErrClosed
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, "SELECT "+memberColumns+` FROM aquifer_pool_members
		WHERE $1 = '' OR pool_id = $1 ORDER BY pool_id, member_id`, poolID)
	if err != nil {
		return nil, unavailable("list pool members", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ports.PoolMember, error) {
		var (
			m          ports.PoolMember
			intervalMS int64
			inFlight   int32
		)
		err := r.Scan(&m.PoolID, &m.MemberID, &m.Address, &m.CapacityRPS, &intervalMS, &m.LastSeen,
			&m.Reputation, &m.Probation, &m.EffectiveRPS, &inFlight, &m.Paused, &m.Picks, &m.Successes, &m.Failures)
		m.HeartbeatInterval, m.InFlight = time.Duration(intervalMS)*time.Millisecond, int(inFlight)
		return m, err
	})
	if err != nil {
		return nil, unavailable("list pool members", err)
	}
	return out, nil
}

// sqlSaveMemberStates updates the kept state of the members that exist; it
// never inserts, so a member deleted meanwhile stays deleted.
const sqlSaveMemberStates = `UPDATE aquifer_pool_members m SET reputation = v.reputation, probation = v.probation,
	effective_rps = v.effective_rps, in_flight = v.in_flight, paused = v.paused, picks = v.picks,
	successes = v.successes, failures = v.failures
	FROM unnest($1::text[], $2::text[], $3::float8[], $4::float8[], $5::float8[], $6::int4[], $7::bool[],
		$8::int8[], $9::int8[], $10::int8[])
		AS v(pool_id, member_id, reputation, probation, effective_rps, in_flight, paused, picks, successes, failures)
	WHERE m.pool_id = v.pool_id AND m.member_id = v.member_id`

// SaveMemberStates implements ports.Cluster in one statement. Rows are sent
// in key order, which the plan (index lookups in array order) normally
// follows, so two processes saving overlapping sets (a pool lane changing
// hands) do not deadlock; if one does, it is retried. A member listed twice
// is saved once (its first entry).
func (s *Store) SaveMemberStates(ctx context.Context, ms []ports.PoolMember) error {
	if s.isClosed() {
		return domain.ErrClosed
	}
	if len(ms) == 0 {
		return nil
	}
	type key struct{ pool, member string }
	seen := make(map[key]bool, len(ms))
	n := len(ms)
	var (
		pools, members                   = make([]string, 0, n), make([]string, 0, n)
		reputation, probation, effective = make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n)
		inFlight                         = make([]int32, 0, n)
		paused                           = make([]bool, 0, n)
		picks, successes, failures       = make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	)
	for _, m := range sortedMembers(ms) {
		k := key{m.PoolID, m.MemberID}
		if seen[k] {
			continue
		}
		seen[k] = true
		pools, members = append(pools, m.PoolID), append(members, m.MemberID)
		reputation, probation, effective = append(reputation, m.Reputation), append(probation, m.Probation),
			append(effective, m.EffectiveRPS)
		inFlight, paused = append(inFlight, int32(min(max(m.InFlight, 0), 1<<31-1))), append(paused, m.Paused)
		picks, successes, failures = append(picks, m.Picks), append(successes, m.Successes), append(failures, m.Failures)
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	err := s.retryDeadlocks(ctx, func() error {
		_, err := s.pool.Exec(ctx, sqlSaveMemberStates, pools, members, reputation, probation, effective, inFlight,
			paused, picks, successes, failures)
		return err
	})
	return unavailable("save pool member states", err)
}

// sortedMembers returns a copy of ms sorted by (pool, member), keeping the
// order of repeats.
func sortedMembers(ms []ports.PoolMember) []ports.PoolMember {
	out := slices.Clone(ms)
	slices.SortStableFunc(out, func(a, b ports.PoolMember) int {
		return cmp.Or(cmp.Compare(a.PoolID, b.PoolID), cmp.Compare(a.MemberID, b.MemberID))
	})
	return out
}
