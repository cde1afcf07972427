package postgres

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// Tests of ownership: several stores (processes) sharing one schema.

func insert(t *testing.T, s *Store, user, key, lane string) *domain.Job {
	t.Helper()
	j, fresh, err := s.Insert(t.Context(), storetest.NewJob(user, key, lane))
	if err != nil || !fresh {
		t.Fatalf("Insert(%s/%s): fresh=%v err=%v", user, key, fresh, err)
	}
	return j
}

func listReady(t *testing.T, s *Store, lane string, after int64, limit int) []*domain.Job {
	t.Helper()
	jobs, err := s.ListReady(t.Context(), &ports.ListReadyParams{Lane: domain.LaneKey(lane), AfterSeq: after, Limit: limit, Now: time.Now()})
	if err != nil {
		t.Fatalf("ListReady(%s): %v", lane, err)
	}
	return jobs
}

func ids(jobs []*domain.Job) []domain.JobID {
	out := make([]domain.JobID, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func orphaned(t *testing.T, s *Store) []domain.LaneKey {
	t.Helper()
	lanes, err := s.OrphanedLanes(t.Context())
	if err != nil {
		t.Fatalf("OrphanedLanes: %v", err)
	}
	return lanes
}

// waitOrphaned polls s.OrphanedLanes until it reports want.
func waitOrphaned(t *testing.T, s *Store, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		lanes := orphaned(t, s)
		sort.Slice(lanes, func(i, j int) bool { return lanes[i] < lanes[j] })
		if fmt.Sprint(lanes) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("OrphanedLanes = %v, want %s", lanes, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ownerOf(t *testing.T, schema string, id domain.JobID) string {
	t.Helper()
	var owner string
	query(t, schema, func(tx pgx.Tx) error {
		return tx.QueryRow(context.Background(), "SELECT owner FROM jobs WHERE id = $1", string(id)).Scan(&owner)
	})
	return owner
}

func TestPeerWorkIsInvisible(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", nil)
	b := openStore(t, schema, "b:1", nil)
	j := insert(t, a, "u", "k", "up.test:80")
	if got := listReady(t, b, "up.test:80", 0, 10); len(got) != 0 {
		t.Fatalf("B read A's fresh job: %v", ids(got))
	}
	if got := listReady(t, a, "up.test:80", 0, 10); len(got) != 1 || got[0].ID != j.ID {
		t.Fatalf("A's ListReady = %v, want its job", ids(got))
	}
	if lanes := orphaned(t, b); len(lanes) != 0 {
		t.Fatalf("B sees A's live work as orphaned: %v", lanes)
	}
	// A duplicate inserted by B returns A's job and leaves it A's.
	dup, fresh, err := b.Insert(t.Context(), storetest.NewJob("u", "k", "up.test:80"))
	if err != nil || fresh || dup.ID != j.ID {
		t.Fatalf("B's duplicate insert = %v fresh=%v err=%v, want A's job", dup, fresh, err)
	}
	if o := ownerOf(t, schema, j.ID); o != "a:1" {
		t.Fatalf("owner after B's duplicate insert = %q, want a:1", o)
	}
	// The delivery a Finish makes due belongs to the finishing process.
	if _, err := a.Finish(t.Context(), &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Attempts: 1,
		Now: time.Now(), DeliverIn: "hooks.test:80"}); err != nil {
		t.Fatal(err)
	}
	if got := listReady(t, b, "hooks.test:80", 0, 10); len(got) != 0 {
		t.Fatalf("B read A's delivery: %v", ids(got))
	}
	if got := listReady(t, a, "hooks.test:80", 0, 10); len(got) != 1 || got[0].Phase() != domain.PhaseDeliver {
		t.Fatalf("A's hooks lane = %v, want the delivery", ids(got))
	}
	// Position and Counts are store-wide.
	insert(t, b, "u", "k2", "up.test:80")
	if c, err := a.Counts(t.Context()); err != nil || c.Queued != 1 || c.Deliveries != 1 {
		t.Fatalf("Counts = %+v, %v", c, err)
	}
}

func TestOrphanedWorkIsTakenOver(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	lease := func(o *Options) { o.Lease = 300 * time.Millisecond }
	a := openStore(t, schema, "a:1", lease)
	b := openStore(t, schema, "b:1", lease)
	first := insert(t, a, "u", "1", "up.test:80")
	second := insert(t, a, "u", "2", "up.test:80")
	mine := insert(t, b, "u", "3", "up.test:80")
	time.Sleep(400 * time.Millisecond) // longer than the lease: renewals keep it
	if lanes := orphaned(t, b); len(lanes) != 0 {
		t.Fatalf("OrphanedLanes = %v while A renews its lease", lanes)
	}
	a.stopRenewing() // A hangs or crashes: its lease runs out
	waitOrphaned(t, b, "[up.test:80]")
	if lanes := orphaned(t, a); len(lanes) != 0 {
		t.Fatalf("A's own work is orphaned to A: %v", lanes)
	}
	// B re-reads the lane from the start and claims A's work, in order
	// with its own.
	got := listReady(t, b, "up.test:80", 0, 2)
	if fmt.Sprint(ids(got)) != fmt.Sprint([]domain.JobID{first.ID, second.ID}) {
		t.Fatalf("B's first page = %v, want A's two jobs", ids(got))
	}
	got = listReady(t, b, "up.test:80", got[1].ReadySeq, 10)
	if len(got) != 1 || got[0].ID != mine.ID {
		t.Fatalf("B's second page = %v, want its own job", ids(got))
	}
	if o := ownerOf(t, schema, first.ID); o != "b:1" {
		t.Fatalf("owner after the claim = %q, want b:1", o)
	}
	if lanes := orphaned(t, b); len(lanes) != 0 {
		t.Fatalf("OrphanedLanes = %v after the take-over", lanes)
	}
	if got := listReady(t, a, "up.test:80", 0, 10); len(got) != 0 {
		t.Fatalf("A still reads the work B took over: %v", ids(got))
	}

	// Close releases the lease at once.
	c := openStore(t, schema, "c:1", nil) // default lease: 30s
	insert(t, c, "u", "4", "other.test:80")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if lanes := orphaned(t, b); fmt.Sprint(lanes) != "[other.test:80]" {
		t.Fatalf("OrphanedLanes after C closed = %v, want [other.test:80]", lanes)
	}
}

func TestRacingClaimsAreDisjoint(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	const n = 300
	dead := openStore(t, schema, "dead:1", nil)
	want := map[domain.JobID]bool{}
	for i := range n {
		want[insert(t, dead, "u", fmt.Sprint(i), "up.test:80").ID] = true
	}
	if err := dead.Close(); err != nil { // releases its lease: everything is orphaned
		t.Fatal(err)
	}
	stores := []*Store{openStore(t, schema, "b:1", nil), openStore(t, schema, "c:1", nil), openStore(t, schema, "d:1", nil)}
	got := make([][]domain.JobID, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var after int64
			for {
				page, err := s.ListReady(context.Background(), &ports.ListReadyParams{Lane: "up.test:80", AfterSeq: after, Limit: 7, Now: time.Now()})
				if err != nil {
					t.Error(err)
					return
				}
				if len(page) == 0 {
					return
				}
				for _, j := range page {
					got[i] = append(got[i], j.ID)
					after = j.ReadySeq
				}
			}
		}()
	}
	wg.Wait()
	seen := map[domain.JobID]int{}
	for i, g := range got {
		for _, id := range g {
			if prev, dup := seen[id]; dup {
				t.Fatalf("job %s claimed by store %d and store %d", id, prev, i)
			}
			seen[id] = i
			if o := ownerOf(t, schema, id); o != stores[i].opts.Owner {
				t.Fatalf("job %s returned to %s but owned by %s", id, stores[i].opts.Owner, o)
			}
		}
	}
	if len(seen) != n {
		t.Fatalf("claimed %d of %d orphaned jobs (%d, %d, %d per store)", len(seen), n, len(got[0]), len(got[1]), len(got[2]))
	}
	for id := range want {
		if _, ok := seen[id]; !ok {
			t.Fatalf("job %s was not claimed", id)
		}
	}
	t.Logf("claims per store: %d, %d, %d", len(got[0]), len(got[1]), len(got[2]))
}

func TestRecoveryLeavesLivePeersAlone(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", func(o *Options) { o.Lease = 300 * time.Millisecond })
	b := openStore(t, schema, "b:1", nil)
	long := time.Now().Add(-time.Hour)
	ja := insert(t, a, "u", "a", "up.test:80")
	jb := insert(t, b, "u", "b", "up.test:80")
	for _, x := range []struct {
		s *Store
		j *domain.Job
	}{{a, ja}, {b, jb}} {
		if err := x.s.MarkInFlight(t.Context(), &ports.MarkInFlightParams{ID: x.j.ID, At: long}); err != nil {
			t.Fatal(err)
		}
		insert(t, x.s, "flush", x.j.IdempotentKey, "flush.test:80") // commits after the mark
	}
	stale := &ports.ResetStaleParams{DispatchedBefore: time.Now(), Now: time.Now()}
	if reset, err := b.ResetStale(t.Context(), stale); err != nil || len(reset) != 1 || reset[0].ID != jb.ID {
		t.Fatalf("B's ResetStale = %v, %v; want only its own job", reset, err)
	}
	if n, err := b.RecoverInFlight(t.Context()); err != nil || n != 0 {
		t.Fatalf("B's RecoverInFlight = %d, %v; want 0 (A's in-flight job is A's)", n, err)
	}
	if j, err := a.Get(t.Context(), ja.ID); err != nil || j.Status != domain.StatusInFlight {
		t.Fatalf("A's job after B's recovery: %+v, %v; want in flight", j, err)
	}
	// Once A's lease runs out, its in-flight work is B's to recover.
	a.stopRenewing()
	waitOrphaned(t, b, "[flush.test:80 up.test:80]")
	if n, err := b.RecoverInFlight(t.Context()); err != nil || n != 1 {
		t.Fatalf("B's RecoverInFlight after A died = %d, %v; want 1", n, err)
	}
	if got := listReady(t, b, "up.test:80", 0, 10); fmt.Sprint(ids(got)) != fmt.Sprint([]domain.JobID{ja.ID, jb.ID}) {
		t.Fatalf("B's lane after recovery = %v, want A's job and its own", ids(got))
	}
}

func TestConcurrentOpensMigrateOnce(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	const n = 6
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(context.Background(), Options{DSN: testDSN(), Schema: schema, Owner: fmt.Sprintf("p:%d", i)})
			if err != nil {
				t.Errorf("Open %d: %v", i, err)
				return
			}
			if _, _, err := s.Insert(context.Background(), storetest.NewJob("u", fmt.Sprint(i), "up.test:80")); err != nil {
				t.Errorf("Insert %d: %v", i, err)
			}
			_ = s.Close()
		}()
	}
	wg.Wait()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	var versions, jobs int
	query(t, schema, func(tx pgx.Tx) error {
		if err := tx.QueryRow(context.Background(), "SELECT count(*) FROM aquifer_schema_migrations").Scan(&versions); err != nil {
			return err
		}
		return tx.QueryRow(context.Background(), "SELECT count(*) FROM jobs").Scan(&jobs)
	})
	if versions != len(ms) || jobs != n {
		t.Fatalf("%d migrations recorded (want %d), %d jobs (want %d)", versions, len(ms), jobs, n)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := openStore(t, schema, "a:1", nil)
	_ = s.Close()
	exec(t, schema, "INSERT INTO aquifer_schema_migrations (version, name) VALUES (999, '0999_future.sql')")
	_, err := Open(t.Context(), Options{DSN: testDSN(), Schema: schema, Owner: "a:1"})
	if err == nil || !strings.Contains(err.Error(), "version 999") {
		t.Fatalf("Open(newer schema) = %v, want a version error", err)
	}
}

func TestOptionsAndPath(t *testing.T) {
	t.Parallel()
	if deadOwnersOf5 != deadOwners("$5") {
		t.Fatalf("deadOwnersOf5 = %q, want %q", deadOwnersOf5, deadOwners("$5"))
	}
	if _, err := Open(t.Context(), Options{Owner: "a"}); err == nil {
		t.Fatal("Open without a DSN succeeded")
	}
	if _, err := Open(t.Context(), Options{DSN: testDSN()}); err == nil {
		t.Fatal("Open without an Owner succeeded")
	}
	for in, want := range map[string]string{
		"postgres://u:secret@db:5432/aq?sslmode=disable":          "postgres://u@db:5432/aq?sslmode=disable",
		"postgres://db/aq?user=u&password=secret":                 "postgres://db/aq?user=u",
		"host=db user=u password=secret dbname=aq":                "host=db user=u password=xxxxx dbname=aq",
		"host=db password='se cret' dbname=aq":                    "host=db password=xxxxx dbname=aq",
		"postgres://postgres@127.0.0.1:5432/test?sslmode=disable": "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	} {
		if got := redact(in); got != want || strings.Contains(got, "secret") {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
	s := openStore(t, newSchema(t), "a:1", nil)
	if strings.Contains(s.Path(), "@") && strings.Contains(s.Path(), ":@") {
		t.Fatalf("Path() = %q", s.Path())
	}
	n, err := s.SizeBytes(t.Context())
	if err != nil || n <= 0 {
		t.Fatalf("SizeBytes = %d, %v", n, err)
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
}
