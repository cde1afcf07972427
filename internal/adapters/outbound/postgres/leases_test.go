package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Tests of lane leases (ports.Cluster) between stores sharing one schema.

func upstreams(n int) []domain.UpstreamKey {
	out := make([]domain.UpstreamKey, n)
	for i := range out {
		out[i] = domain.UpstreamKey(fmt.Sprintf("http://up%02d.test:80", i))
	}
	return out
}

func syncLeases(t *testing.T, s *Store, p *ports.SyncLeasesParams) []ports.LaneLease {
	t.Helper()
	got, err := s.SyncLeases(t.Context(), p)
	if err != nil {
		t.Fatalf("%s: SyncLeases: %v", s.opts.Owner, err)
	}
	return got
}

func keys(ls []ports.LaneLease) []domain.UpstreamKey {
	out := make([]domain.UpstreamKey, len(ls))
	for i, l := range ls {
		out[i] = l.Upstream
	}
	slices.Sort(out)
	return out
}

// TestSyncLeasesIsExclusive races two stores (processes), several goroutines
// each, for the same lanes. Each goroutine keeps its own leases and renews
// them; the goroutines of a store share its owner name, so their calls are
// one process's overlapping transactions, taking each other's leases as
// strays and renewing them in any order. Each store now and then pauses all
// its goroutines, long enough for its leases to run out, and sometimes
// releases its lanes when it pauses; after a pause its goroutines either
// start afresh or, like a process that stalled, renew the leases they held
// as if nothing happened, and must not get back those the other store took
// meanwhile. Every lease returned is recorded as the time during which its
// store may dispatch the lane: from the return of the call to the call's
// start plus the TTL (the lease runs at least until the call's
// transaction's now() + TTL, and the database's now() is later than the
// call's start), or to the release. No two stores' periods for a lane may
// overlap. The TTL is short, so that leases change hands often; a loaded
// machine may make a call slower than the TTL, whose leases then hold for
// no time at all.
func TestSyncLeasesIsExclusive(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	lanes := upstreams(6)
	const (
		perStore = 4
		ttl      = 60 * time.Millisecond
		runFor   = 2 * time.Second
	)
	type period struct {
		store    int
		from, to time.Time
	}
	var (
		mu      sync.Mutex // guards periods and calls
		periods = map[domain.UpstreamKey][]*period{}
		calls   int
	)
	type run struct {
		s      *Store
		gate   sync.RWMutex // goroutines sync under RLock; a pause takes Lock
		paused atomic.Bool
		forget atomic.Bool // whether a paused goroutine drops its leases
	}
	runs := []*run{{s: openStore(t, schema, "a:1", nil)}, {s: openStore(t, schema, "b:1", nil)}}
	var wg sync.WaitGroup
	end := time.Now().Add(runFor)
	for si, r := range runs {
		for g := range perStore {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(si), uint64(g)))
				var held []ports.LaneLease
				for time.Now().Before(end) {
					if r.paused.Load() {
						if r.forget.Load() {
							held = nil
						}
						time.Sleep(ttl / 4)
						continue
					}
					r.gate.RLock()
					want := slices.Clone(lanes)
					rng.Shuffle(len(want), func(i, j int) { want[i], want[j] = want[j], want[i] })
					start := time.Now()
					got, err := r.s.SyncLeases(t.Context(), &ports.SyncLeasesParams{Want: want[:1+rng.IntN(len(want))], Held: held, TTL: ttl})
					back := time.Now()
					if err != nil {
						r.gate.RUnlock()
						t.Error(err)
						return
					}
					mu.Lock()
					calls++
					for _, l := range got {
						periods[l.Upstream] = append(periods[l.Upstream], &period{si, back, start.Add(ttl)})
					}
					mu.Unlock()
					r.gate.RUnlock()
					held = got
					time.Sleep(time.Duration(rng.IntN(int(ttl / 2))))
				}
			}()
		}
		wg.Add(1)
		go func() { // pauses the store now and then
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(si), 99))
			for time.Now().Before(end) {
				time.Sleep(2*ttl + time.Duration(rng.IntN(int(4*ttl))))
				r.gate.Lock() // every goroutine of the store is between calls
				r.forget.Store(rng.IntN(2) == 0)
				r.paused.Store(true)
				if rng.IntN(2) == 0 {
					release := make([]ports.LaneLease, len(lanes))
					for i, l := range lanes {
						release[i].Upstream = l
					}
					at := time.Now()
					if err := r.s.ReleaseLeases(t.Context(), release); err != nil {
						t.Error(err)
					}
					mu.Lock()
					for _, ps := range periods {
						for _, p := range ps {
							if p.store == si && p.to.After(at) {
								p.to = at
							}
						}
					}
					mu.Unlock()
				}
				r.gate.Unlock()
				time.Sleep(2*ttl + time.Duration(rng.IntN(int(3*ttl))))
				r.paused.Store(false)
			}
		}()
	}
	wg.Wait()
	changes, empty := 0, 0
	ts := func(t time.Time) string { return t.Format("15:04:05.000000") }
	for lane, all := range periods {
		// A call slower than the TTL returns leases that may have run out
		// already: by the holder's clock it holds them for no time at all.
		var ps []*period
		for _, p := range all {
			if p.to.After(p.from) {
				ps = append(ps, p)
			} else {
				empty++
			}
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].from.Before(ps[j].from) })
		for i, p := range ps {
			for _, q := range ps[:i] {
				if q.store != p.store && q.to.After(p.from) {
					t.Fatalf("%s: store %d holds it from %v to %v, store %d from %v to %v", lane,
						q.store, ts(q.from), ts(q.to), p.store, ts(p.from), ts(p.to))
				}
			}
			if i > 0 && ps[i-1].store != p.store {
				changes++
			}
		}
	}
	if changes < 5 {
		t.Fatalf("lanes changed hands only %d times in %d calls: the test proved little", changes, calls)
	}
	t.Logf("%d SyncLeases calls, %d changes of hands, %d leases returned after their TTL", calls, changes, empty)
}

// TestRenewalNeverShortensLease: two SyncLeases transactions of one process
// overlap, and the one that started first writes a lease row after the
// other committed its renewal of it. The late writer's now() is the earlier
// one, yet the lease must keep the later end the other call was granted:
// otherwise another process could take the lane while that caller, by its
// own clock, still holds it. The first call is held back by a row lock on
// the lane it renews first (renewals lock in upstream order).
func TestRenewalNeverShortensLease(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := openStore(t, schema, "a:1", nil)
	lanes := upstreams(2) // renewed in this order
	const ttl = 5 * time.Second
	held := syncLeases(t, s, &ports.SyncLeasesParams{Want: lanes, TTL: ttl})
	if len(held) != 2 {
		t.Fatalf("took %v, want both lanes", keys(held))
	}
	until := func() (u time.Time) {
		query(t, schema, func(tx pgx.Tx) error {
			return tx.QueryRow(t.Context(), "SELECT until FROM aquifer_lanes WHERE upstream = $1", string(lanes[1])).Scan(&u)
		})
		return u
	}

	ctx := t.Context()
	blocker, err := admin(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(context.Background()) }() // on failure, lets the first call end
	var blockerPID int
	if err := blocker.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&blockerPID); err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(ctx, "SET LOCAL search_path = "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(ctx, "SELECT 1 FROM aquifer_lanes WHERE upstream = $1 FOR UPDATE", string(lanes[0])); err != nil {
		t.Fatal(err)
	}
	type result struct {
		got []ports.LaneLease
		err error
	}
	first := make(chan result, 1)
	go func() {
		got, err := s.SyncLeases(context.Background(), &ports.SyncLeasesParams{Held: held, TTL: ttl})
		first <- result{got, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for waiting := 0; waiting == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first renewal never waited for the locked lane")
		}
		time.Sleep(5 * time.Millisecond)
		if err := admin(t).QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))",
			blockerPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	// The first call's transaction, and its now(), started before this;
	// the second call's now() is clearly later.
	time.Sleep(200 * time.Millisecond)
	second := []ports.LaneLease{{Upstream: lanes[1]}}
	if got := syncLeases(t, s, &ports.SyncLeasesParams{Held: second, TTL: ttl}); len(got) != 1 {
		t.Fatalf("the second renewal returned %v, want %s", keys(got), lanes[1])
	}
	granted := until()
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-first; r.err != nil || len(r.got) != 2 {
		t.Fatalf("the first renewal returned %v, %v; want both lanes", keys(r.got), r.err)
	}
	if after := until(); after.Before(granted) {
		t.Fatalf("the first renewal, committed last, moved the lease's end back from %v to %v", granted, after)
	}
}

// TestSyncLeasesRaceForFreeLanes: goroutines of two stores ask at once for
// the same fresh lanes, a few at a time in different orders; each lane goes
// to exactly one store.
func TestSyncLeasesRaceForFreeLanes(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	stores := []*Store{openStore(t, schema, "a:1", nil), openStore(t, schema, "b:1", nil)}
	lanes := upstreams(40)
	got := make([]map[domain.UpstreamKey]bool, len(stores))
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	start := make(chan struct{})
	for si, s := range stores {
		got[si] = map[domain.UpstreamKey]bool{}
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(si), uint64(g)))
				<-start
				for range 6 {
					want := slices.Clone(lanes)
					rng.Shuffle(len(want), func(i, j int) { want[i], want[j] = want[j], want[i] })
					// Each goroutine holds its own few; together they
					// want everything.
					ls, err := s.SyncLeases(t.Context(), &ports.SyncLeasesParams{Want: want, Max: 2, TTL: time.Minute})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, l := range ls {
						got[si][l.Upstream] = true
					}
					mu.Unlock()
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	owners := map[string]string{}
	query(t, schema, func(tx pgx.Tx) error {
		rows, err := tx.Query(t.Context(), "SELECT upstream, owner FROM aquifer_lanes WHERE until > now()")
		if err != nil {
			return err
		}
		for rows.Next() {
			var u, o string
			if err := rows.Scan(&u, &o); err != nil {
				return err
			}
			owners[u] = o
		}
		return rows.Err()
	})
	for _, l := range lanes {
		a, b := got[0][l], got[1][l]
		if a && b {
			t.Fatalf("%s was returned to both stores", l)
		}
		if a && owners[string(l)] != "a:1" || b && owners[string(l)] != "b:1" || !a && !b && owners[string(l)] != "" {
			t.Fatalf("%s: owner %q in the table; returned to A %v, to B %v", l, owners[string(l)], a, b)
		}
	}
	if len(got[0]) == 0 || len(got[1]) == 0 {
		t.Fatalf("A took %d lanes, B %d: no race happened", len(got[0]), len(got[1]))
	}
	t.Logf("A took %d lanes, B %d", len(got[0]), len(got[1]))
}

// TestSyncLeasesRespectsMax: a process takes lanes only up to its fair
// share, counting the ones it renews, and never takes a peer's live lease.
func TestSyncLeasesRespectsMax(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", nil)
	b := openStore(t, schema, "b:1", nil)
	lanes := upstreams(10)
	heldA := syncLeases(t, a, &ports.SyncLeasesParams{Want: lanes, Max: 3, TTL: time.Minute})
	if fmt.Sprint(keys(heldA)) != fmt.Sprint(lanes[:3]) {
		t.Fatalf("A took %v, want the first 3 it asked for", keys(heldA))
	}
	heldB := syncLeases(t, b, &ports.SyncLeasesParams{Want: lanes, Max: 5, TTL: time.Minute})
	if fmt.Sprint(keys(heldB)) != fmt.Sprint(lanes[3:8]) {
		t.Fatalf("B took %v, want the 5 after A's", keys(heldB))
	}
	// A renews its 3 and, at Max 3, takes nothing more.
	heldA = syncLeases(t, a, &ports.SyncLeasesParams{Want: lanes, Held: heldA, Max: 3, TTL: time.Minute})
	if fmt.Sprint(keys(heldA)) != fmt.Sprint(lanes[:3]) {
		t.Fatalf("A at its max holds %v, want its 3", keys(heldA))
	}
	// With room for one more, A takes one of the 2 free lanes.
	heldA = syncLeases(t, a, &ports.SyncLeasesParams{Want: lanes, Held: heldA, Max: 4, TTL: time.Minute})
	if k := keys(heldA); len(k) != 4 || k[3] != lanes[8] {
		t.Fatalf("A with Max 4 holds %v, want its 3 and %s", k, lanes[8])
	}
	// No limit: B takes the last free one and none of A's.
	heldB = syncLeases(t, b, &ports.SyncLeasesParams{Want: lanes, Held: heldB, TTL: time.Minute})
	if k := keys(heldB); len(k) != 6 || k[5] != lanes[9] {
		t.Fatalf("B without a limit holds %v, want its 5 and %s", k, lanes[9])
	}
	// Held lanes are renewed even beyond Max (shrinking is the caller's
	// choice: ReleaseLeases), and nothing is taken.
	heldB = syncLeases(t, b, &ports.SyncLeasesParams{Want: lanes, Held: heldB, Max: 2, TTL: time.Minute})
	if len(heldB) != 6 {
		t.Fatalf("B with Max 2 holds %v, want its 6 renewed", keys(heldB))
	}
}

// TestLeaseExpiryAndRelease: a lease that runs out goes to the next process
// with the state its holder saved; the old holder's renewal then fails; a
// released lease is free at once.
func TestLeaseExpiryAndRelease(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", nil)
	b := openStore(t, schema, "b:1", nil)
	lane := domain.UpstreamKey("https://api.test:443")
	want := []domain.UpstreamKey{lane}
	const ttl = 300 * time.Millisecond

	held := syncLeases(t, a, &ports.SyncLeasesParams{Want: want, TTL: ttl})
	if len(held) != 1 || held[0].State.Saved {
		t.Fatalf("A's first lease = %+v, want a lease with nothing saved", held)
	}
	slowed := ports.LaneState{Saved: true, RPS: 2.5, MaxConcurrent: 3, AccountQueues: true}
	held[0].State = slowed
	held = syncLeases(t, a, &ports.SyncLeasesParams{Held: held, TTL: ttl}) // renews, saving the state
	if len(held) != 1 || held[0].State != slowed {
		t.Fatalf("A's renewal = %+v", held)
	}
	if got := syncLeases(t, b, &ports.SyncLeasesParams{Want: want, TTL: ttl}); len(got) != 0 {
		t.Fatalf("B took A's live lease: %+v", got)
	}
	// A stops renewing; once the lease has run out B takes it, with A's state.
	deadline := time.Now().Add(5 * time.Second)
	var gotB []ports.LaneLease
	for len(gotB) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("B never took the expired lease")
		}
		time.Sleep(50 * time.Millisecond)
		gotB = syncLeases(t, b, &ports.SyncLeasesParams{Want: want, TTL: time.Minute})
	}
	if gotB[0].Upstream != lane || gotB[0].State != slowed {
		t.Fatalf("B's lease = %+v, want A's saved state %+v", gotB[0], slowed)
	}
	// A's late renewal must not give the lane back to A, nor save A's state.
	stale := []ports.LaneLease{{Upstream: lane, State: ports.LaneState{Saved: true, RPS: 99}}}
	if got := syncLeases(t, a, &ports.SyncLeasesParams{Want: want, Held: stale, TTL: time.Minute}); len(got) != 0 {
		t.Fatalf("A's renewal after B took over returned %+v", got)
	}
	// B releases with its own state: A takes the lane at once, with it.
	mine := ports.LaneState{Saved: true, RPS: 1, MaxConcurrent: 1}
	if err := b.ReleaseLeases(t.Context(), []ports.LaneLease{{Upstream: lane, State: mine}}); err != nil {
		t.Fatal(err)
	}
	// A stale release by A does nothing either.
	if err := a.ReleaseLeases(t.Context(), stale); err != nil {
		t.Fatal(err)
	}
	got := syncLeases(t, a, &ports.SyncLeasesParams{Want: want, TTL: time.Minute})
	if len(got) != 1 || got[0].State != mine {
		t.Fatalf("A after B's release = %+v, want the lane with B's state %+v", got, mine)
	}
	if got := syncLeases(t, b, &ports.SyncLeasesParams{Want: want, Held: gotB, TTL: time.Minute}); len(got) != 0 {
		t.Fatalf("B still renews the lease it released and A took: %+v", got)
	}
}

// TestInstances lists the live processes with their lanes; a closed process
// drops out and its lanes are free at once.
func TestInstances(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", nil)
	b := openStore(t, schema, "b:1", nil)
	lanes := upstreams(4)
	syncLeases(t, a, &ports.SyncLeasesParams{Want: lanes[:2], TTL: time.Minute})
	syncLeases(t, b, &ports.SyncLeasesParams{Want: lanes[2:], TTL: time.Minute})
	ins, err := a.Instances(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]ports.Instance{{ID: "a:1", Lanes: lanes[:2]}, {ID: "b:1", Lanes: lanes[2:]}})
	if fmt.Sprint(ins) != want {
		t.Fatalf("Instances = %v, want %v", ins, want)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SyncLeases(t.Context(), &ports.SyncLeasesParams{Want: lanes, TTL: time.Minute}); err != domain.ErrClosed {
		t.Fatalf("SyncLeases after Close = %v, want ErrClosed", err)
	}
	ins, err = a.Instances(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint([]ports.Instance{{ID: "a:1", Lanes: lanes[:2]}}); fmt.Sprint(ins) != want {
		t.Fatalf("Instances after B closed = %v, want %v", ins, want)
	}
	if got := syncLeases(t, a, &ports.SyncLeasesParams{Want: lanes[2:], TTL: time.Minute}); len(got) != 2 {
		t.Fatalf("A after B closed took %v, want B's 2 lanes at once", keys(got))
	}
	// A process restarting under the same id frees its previous run's leases.
	c := openStore(t, schema, "c:1", nil)
	syncLeases(t, c, &ports.SyncLeasesParams{Want: []domain.UpstreamKey{"pool:p1"}, TTL: time.Hour})
	c.stopRenewing() // "crashes" without closing
	openStore(t, schema, "c:1", nil)
	if got := syncLeases(t, a, &ports.SyncLeasesParams{Want: []domain.UpstreamKey{"pool:p1"}, TTL: time.Minute}); len(got) != 1 {
		t.Fatalf("a restarted c:1 left its old lease in place: A took %v", keys(got))
	}
}

// TestRecoverLane resets the in-flight jobs of one upstream — its shared
// lane and its tenant lanes — that dead processes left, and nothing else.
func TestRecoverLane(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	dead := openStore(t, schema, "dead:1", nil)
	live := openStore(t, schema, "live:1", nil)
	holder := openStore(t, schema, "holder:1", nil)
	const up = "http://up.test:80"
	jobIn := func(s *Store, key string, lane domain.QueueKey) *domain.Job {
		j := insert(t, holder, "u", key, string(lane))
		markInFlight(t, s, j, time.Now())
		return j
	}
	shared := jobIn(dead, "shared", domain.SharedQueue(up))
	tenant := jobIn(dead, "tenant", domain.TenantQueue(up, "0123abcd"))
	livePeer := jobIn(live, "live", domain.SharedQueue(up))
	otherPort := jobIn(dead, "port", domain.SharedQueue("http://up.test:8080"))
	otherTenant := jobIn(dead, "port-tenant", domain.TenantQueue("http://up.test:8080", "0123abcd"))
	prefix := jobIn(dead, "prefix", domain.SharedQueue("http://up.test:80|x")+"|t") // an upstream that merely starts with "up|"
	queued := insert(t, holder, "u", "queued", up)
	if err := dead.Close(); err != nil {
		t.Fatal(err)
	}
	n, err := holder.RecoverLane(t.Context(), up)
	if err != nil || n != 2 {
		t.Fatalf("RecoverLane = %d, %v; want 2", n, err)
	}
	for _, c := range []struct {
		j    *domain.Job
		want domain.Status
	}{{shared, domain.StatusQueued}, {tenant, domain.StatusQueued}, {livePeer, domain.StatusInFlight},
		{otherPort, domain.StatusInFlight}, {otherTenant, domain.StatusInFlight}, {prefix, domain.StatusInFlight},
		{queued, domain.StatusQueued}} {
		got, err := holder.Get(t.Context(), c.j.ID)
		if err != nil || got.Status != c.want {
			t.Fatalf("%s (lane %s): %+v, %v; want %s", c.j.IdempotentKey, c.j.ReadyQueue, got, err, c.want)
		}
	}
	if n, err := holder.RecoverLane(t.Context(), up); err != nil || n != 0 {
		t.Fatalf("second RecoverLane = %d, %v; want 0", n, err)
	}
	if got := listReady(t, holder, up, 0, 10); fmt.Sprint(ids(got)) != fmt.Sprint([]domain.JobID{shared.ID, queued.ID}) {
		t.Fatalf("shared lane after recovery = %v", ids(got))
	}
}
