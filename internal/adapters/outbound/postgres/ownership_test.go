package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// Tests of job ownership under lane leases: several stores (processes)
// sharing one schema. Who dispatches a lane is decided by its lease (see
// cluster_test.go); the jobs' owner column only names the process that ran
// or last touched an attempt, which recovery uses.

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
	jobs, err := s.ListReady(t.Context(), &ports.ListReadyParams{Queue: domain.QueueKey(lane), AfterSeq: after, Limit: limit, Now: time.Now()})
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

func ownerOf(t *testing.T, schema string, id domain.JobID) string {
	t.Helper()
	var owner string
	query(t, schema, func(tx pgx.Tx) error {
		return tx.QueryRow(context.Background(), "SELECT owner FROM jobs WHERE id = $1", string(id)).Scan(&owner)
	})
	return owner
}

// markInFlight records an attempt of j by s at `at` and waits until it is
// committed (MarkInFlight does not wait; a later write of s commits after it).
func markInFlight(t *testing.T, s *Store, j *domain.Job, at time.Time) {
	t.Helper()
	if err := s.MarkInFlight(t.Context(), &ports.MarkInFlightParams{ID: j.ID, At: at}); err != nil {
		t.Fatal(err)
	}
	insert(t, s, "flush", fmt.Sprint(time.Now().UnixNano()), "flush.test:80")
}

// waitDead waits until s no longer lists id among the live instances.
func waitDead(t *testing.T, s *Store, id string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ins, err := s.Instances(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		alive := false
		for _, in := range ins {
			alive = alive || in.ID == id
		}
		if !alive {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still alive after 5s: %+v", id, ins)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestListReadyReadsEveryProcessesJobs: the lane's holder pages every ready
// job of the lane in ReadySeq order, whichever process inserted it, and
// nothing is claimed by reading.
func TestListReadyReadsEveryProcessesJobs(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", nil)
	b := openStore(t, schema, "b:1", nil)
	first := insert(t, a, "u", "1", "up.test:80")
	second := insert(t, b, "u", "2", "up.test:80")
	third := insert(t, a, "u", "3", "up.test:80")
	insert(t, b, "u", "other", "other.test:80")
	for _, s := range []*Store{a, b} {
		got := listReady(t, s, "up.test:80", 0, 2)
		if fmt.Sprint(ids(got)) != fmt.Sprint([]domain.JobID{first.ID, second.ID}) {
			t.Fatalf("%s's first page = %v, want the first two jobs of both processes", s.opts.Owner, ids(got))
		}
		got = listReady(t, s, "up.test:80", got[1].ReadySeq, 10)
		if len(got) != 1 || got[0].ID != third.ID {
			t.Fatalf("%s's second page = %v, want the third job", s.opts.Owner, ids(got))
		}
	}
	if o := ownerOf(t, schema, second.ID); o != "b:1" {
		t.Fatalf("reading changed the owner of B's job to %q", o)
	}
	// In-flight jobs are not ready, whoever runs them.
	markInFlight(t, b, first, time.Now())
	if got := listReady(t, a, "up.test:80", 0, 10); fmt.Sprint(ids(got)) != fmt.Sprint([]domain.JobID{second.ID, third.ID}) {
		t.Fatalf("A's page with B's attempt in flight = %v", ids(got))
	}
}

// TestOwnerFollowsTheAttempt: the owner column names the process that ran
// or last touched an attempt; a duplicate insert changes nothing.
func TestOwnerFollowsTheAttempt(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", nil)
	b := openStore(t, schema, "b:1", nil)
	j := insert(t, a, "u", "k", "up.test:80")
	dup, fresh, err := b.Insert(t.Context(), storetest.NewJob("u", "k", "up.test:80"))
	if err != nil || fresh || dup.ID != j.ID {
		t.Fatalf("B's duplicate insert = %v fresh=%v err=%v, want A's job", dup, fresh, err)
	}
	if o := ownerOf(t, schema, j.ID); o != "a:1" {
		t.Fatalf("owner after B's duplicate insert = %q, want a:1", o)
	}
	markInFlight(t, b, j, time.Now())
	if o := ownerOf(t, schema, j.ID); o != "b:1" {
		t.Fatalf("owner after B's MarkInFlight = %q, want b:1", o)
	}
	if err := a.Requeue(t.Context(), &ports.RequeueParams{ID: j.ID, Phase: domain.PhaseDispatch, Attempts: 1, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if o := ownerOf(t, schema, j.ID); o != "a:1" {
		t.Fatalf("owner after A's Requeue = %q, want a:1", o)
	}
	if _, err := b.Finish(t.Context(), &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Attempts: 2,
		Now: time.Now(), DeliverIn: "hooks.test:80"}); err != nil {
		t.Fatal(err)
	}
	if o := ownerOf(t, schema, j.ID); o != "b:1" {
		t.Fatalf("owner after B's Finish = %q, want b:1", o)
	}
	// The delivery is ready for whoever holds the receiver's lane.
	if got := listReady(t, a, "hooks.test:80", 0, 10); len(got) != 1 || got[0].Phase() != domain.PhaseDeliver {
		t.Fatalf("A's hooks lane = %v, want the delivery B made due", ids(got))
	}
	// Position and Counts are store-wide.
	insert(t, b, "u", "k2", "up.test:80")
	if c, err := a.Counts(t.Context()); err != nil || c.Queued != 2 || c.Deliveries != 1 { // k2 and markInFlight's flush job
		t.Fatalf("Counts = %+v, %v", c, err)
	}
}

// TestRecoveryLeavesLivePeersAlone: RecoverInFlight and ResetStale touch
// this process's in-flight jobs and dead processes', never a live peer's.
func TestRecoveryLeavesLivePeersAlone(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", func(o *Options) { o.Lease = 300 * time.Millisecond })
	b := openStore(t, schema, "b:1", nil)
	long := time.Now().Add(-time.Hour)
	ja := insert(t, a, "u", "a", "up.test:80")
	jb := insert(t, a, "u", "b", "up.test:80") // inserted by A, run by B
	markInFlight(t, a, ja, long)
	markInFlight(t, b, jb, long)
	stale := &ports.ResetStaleParams{DispatchedBefore: time.Now(), Now: time.Now()}
	if reset, err := b.ResetStale(t.Context(), stale); err != nil || len(reset) != 1 || reset[0].ID != jb.ID {
		t.Fatalf("B's ResetStale = %v, %v; want only the job it runs", reset, err)
	}
	if n, err := b.RecoverInFlight(t.Context()); err != nil || n != 0 {
		t.Fatalf("B's RecoverInFlight = %d, %v; want 0 (A's attempt is A's)", n, err)
	}
	if j, err := a.Get(t.Context(), ja.ID); err != nil || j.Status != domain.StatusInFlight {
		t.Fatalf("A's job after B's recovery: %+v, %v; want in flight", j, err)
	}
	// Once A stops renewing its liveness lease, its in-flight work is B's to
	// recover.
	a.stopRenewing()
	waitDead(t, b, "a:1")
	if n, err := b.RecoverInFlight(t.Context()); err != nil || n != 1 {
		t.Fatalf("B's RecoverInFlight after A died = %d, %v; want 1", n, err)
	}
	if got := listReady(t, b, "up.test:80", 0, 10); fmt.Sprint(ids(got)) != fmt.Sprint([]domain.JobID{ja.ID, jb.ID}) {
		t.Fatalf("lane after recovery = %v, want both jobs", ids(got))
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

// TestMigratesVersion1: a database at version 1 with work in it is brought
// to the newest version, and its jobs stay readable.
func TestMigratesVersion1(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	query(t, schema, func(tx pgx.Tx) error {
		ctx := context.Background()
		for _, sql := range []string{
			"CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize(),
			"SET LOCAL search_path = " + pgx.Identifier{schema}.Sanitize(),
			`CREATE TABLE aquifer_schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now())`,
			ms[0].sql,
			"INSERT INTO aquifer_schema_migrations (version, name) VALUES (1, '" + ms[0].name + "')",
			`INSERT INTO jobs (id, seq, user_id, idempotent_key, method, lane, status, created_at, updated_at, expires_at,
				ready_lane, ready_seq, owner) VALUES ('old', 1, 'u', 'k', 'POST', 'up.test:80', 'queued', 1, 1, 9e15,
				'up.test:80', 1, 'gone:1')`,
		} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
		}
		return nil
	})
	s := openStore(t, schema, "a:1", nil)
	if got := listReady(t, s, "up.test:80", 0, 10); len(got) != 1 || got[0].ID != "old" {
		t.Fatalf("after migrating, ListReady = %v", ids(got))
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
	if s.InstanceID() != "a:1" {
		t.Fatalf("InstanceID = %q", s.InstanceID())
	}
}
