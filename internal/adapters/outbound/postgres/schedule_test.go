package postgres

import (
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap/zaptest"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// latestVersion is the newest schema version this binary embeds.
func latestVersion(t *testing.T) int {
	t.Helper()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	return ms[len(ms)-1].version
}

// openAt makes schema a database of version target, as Open of that
// version would.
func openAt(t *testing.T, schema string, target int) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	old := &Store{opts: Options{Schema: schema}, pool: pool, log: zaptest.NewLogger(t), path: fmt.Sprint("version ", target)}
	err = old.migrateTo(t.Context(), target)
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMigrationFromVersion4: the jobs a version 4 store wrote (queued,
// in flight, finished, with a delivery pending) are intact after version 5's
// migration, with normal priority and no options, and still ready in their
// queues, in their order; new jobs, with options or without, join them.
func TestMigrationFromVersion4(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	openAt(t, schema, 4)
	now := time.Now().UnixMilli()
	// Rows as version 4's writer leaves them (its insert, Finish with and
	// without a delivery, MarkInFlight).
	exec(t, schema, `INSERT INTO jobs (id, seq, user_id, idempotent_key, url, method, headers, body, webhook_url, lane, status,
		attempts, created_at, updated_at, dispatched_at, expires_at, response_status, response_body, response_content_type,
		ready_lane, ready_seq, delivery_status, owner, tenant, upstream, url_path, history) VALUES
	('q1', 1, 'u', 'k1', 'http://up.test:80/a', 'POST', '{"X-A":"1"}', '\x6869', '', 'http://up.test:80', 'queued',
		0, $1::bigint, $1::bigint, 0, $1::bigint + 86400000, 0, NULL, '', 'http://up.test:80', 1, '', 'old:1', '', 'http://up.test:80', '/a', ''),
	('q2', 2, 'u', 'k2', 'http://up.test:80/b', 'POST', '{}', NULL, '', 'http://up.test:80', 'queued',
		2, $1::bigint, $1::bigint, 0, $1::bigint + 86400000, 0, NULL, '', 'http://up.test:80', 2, '', 'old:1', '', 'http://up.test:80', '/b',
		'[{"at":1500,"dur_us":2500,"status":503}]'),
	('f1', 3, 'u', 'k3', 'http://up.test:80/c', 'POST', '{}', NULL, '', 'http://up.test:80', 'completed',
		1, $1::bigint, $1::bigint, $1::bigint, $1::bigint + 86400000, 200, '\x6f6b', 'text/plain', '', 0, '', 'old:1', '', 'http://up.test:80', '/c', ''),
	('d1', 4, 'u', 'k4', 'http://up.test:80/d', 'POST', '{}', NULL, 'http://hooks.test/h', 'http://up.test:80', 'failed',
		3, $1::bigint, $1::bigint, $1::bigint, $1::bigint + 86400000, 503, NULL, '', 'http://hooks.test:80', 6, 'pending', 'old:1', '', 'http://up.test:80', '/d', ''),
	('i1', 5, 'u', 'k5', 'http://up.test:80/e', 'POST', '{}', NULL, '', 'http://up.test:80', 'in_flight',
		0, $1::bigint, $1::bigint, $1::bigint, $1::bigint + 86400000, 0, NULL, '', 'http://up.test:80', 5, '', 'old:1', '', 'http://up.test:80', '/e', '')`, now)
	exec(t, schema, "SELECT setval('jobs_seq', 6)")
	var before []*domain.Job
	query(t, schema, func(tx pgx.Tx) error {
		rows, err := tx.Query(t.Context(), `SELECT `+version4Columns()+` FROM jobs ORDER BY seq`)
		if err != nil {
			return err
		}
		before, err = storekit.CollectJobs(rows)
		return err
	})

	s := openStore(t, schema, "a:1", nil)
	query(t, schema, func(tx pgx.Tx) error {
		var version int
		if err := tx.QueryRow(t.Context(), "SELECT max(version) FROM aquifer_schema_migrations").Scan(&version); err != nil {
			return err
		}
		if version != 5 {
			t.Errorf("after the migration: version %d", version)
		}
		return nil
	})
	if len(before) != 5 {
		t.Fatalf("%d jobs before the migration", len(before))
	}
	for _, old := range before {
		if got := getJob(t, s, old.ID); !reflect.DeepEqual(got, old) {
			t.Fatalf("job %s after the migration:\n%+v\nwas\n%+v", old.ID, got, old)
		}
	}
	ready := func(lane string, p domain.Priority) []domain.JobID {
		js, err := s.ListReady(t.Context(), &ports.ListReadyParams{Queue: domain.QueueKey(lane), Priority: p, Limit: 100, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return ids(js)
	}
	if got := ready("http://up.test:80", domain.PriorityNormal); fmt.Sprint(got) != "[q1 q2]" {
		t.Fatalf("the old queue after the migration: %v", got)
	}
	if got := ready("http://hooks.test:80", domain.PriorityNormal); fmt.Sprint(got) != "[d1]" {
		t.Fatalf("the old pending delivery after the migration: %v", got)
	}
	if n, err := s.Position(t.Context(), "http://up.test:80", 3); err != nil || n != 2 {
		t.Fatalf("Position = %d, %v; want 2", n, err)
	}
	// New jobs: plain, high priority, scheduled.
	plain, fresh, err := s.Insert(t.Context(), storetest.NewJob("u", "new", "http://up.test:80"))
	if err != nil || !fresh || plain.ReadySeq <= 6 {
		t.Fatalf("Insert after the migration: %+v, %v, %v", plain, fresh, err)
	}
	high := storetest.NewJob("u", "high", "http://up.test:80")
	high.Priority = domain.PriorityHigh
	if _, _, err := s.Insert(t.Context(), high); err != nil {
		t.Fatal(err)
	}
	sched := storetest.NewJob("u", "sched", "http://up.test:80")
	sched.NotBefore, sched.ReadyQueue = time.UnixMilli(now-1000), ""
	if _, _, err := s.Insert(t.Context(), sched); err != nil {
		t.Fatal(err)
	}
	if got := ready("http://up.test:80", domain.PriorityNormal); fmt.Sprint(got) != fmt.Sprint([]domain.JobID{"q1", "q2", plain.ID}) {
		t.Fatalf("the queue with a new job: %v", got)
	}
	if got := ready("http://up.test:80", domain.PriorityHigh); fmt.Sprint(got) != fmt.Sprint([]domain.JobID{high.ID}) {
		t.Fatalf("the high queue: %v", got)
	}
	p, err := s.PromoteDue(t.Context(), &ports.PromoteParams{Now: time.Now(), Limit: 10})
	if err != nil || len(p) != 1 || p[0].ID != sched.ID {
		t.Fatalf("PromoteDue after the migration = %v, %v", ids(p), err)
	}
	// Old jobs take part in the writes like new ones.
	if err := s.MarkInFlight(t.Context(), &ports.MarkInFlightParams{ID: "q1", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(t.Context(), &ports.FinishParams{ID: "q1", Status: domain.StatusCompleted, Attempts: 1, Now: time.Now(),
		Result: &domain.Result{ResponseStatus: 200}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Retry(t.Context(), &ports.RetryParams{ID: "f1", Now: time.Now()}); err != nil {
		t.Fatalf("Retry of a job written by version 4: %v", err)
	}
	c, err := s.Counts(t.Context())
	if err != nil || c != (ports.Counts{Queued: 5, InFlight: 1, Deliveries: 1}) {
		t.Fatalf("Counts = %+v, %v", c, err)
	}
}

// version4Columns is the job columns version 4 has (storekit.JobColumns without
// the option columns), with the option columns' zero values in their
// places, so that its rows scan as jobs.
func version4Columns() string {
	return `seq, id, user_id, idempotent_key, url, pool_id, method, headers, body,
	webhook_url, lane, status, attempts, deferrals, created_at, updated_at, dispatched_at, expires_at,
	response_status, response_body, response_truncated, response_content_type, reason,
	ready_lane, ready_seq, delivery_status, delivery_attempts, delivery_response, delivery_reason, history,
	0::bigint, 0::bigint, 0, ''`
}

// TestPromoteDueAcrossProcesses: two processes promoting the same due jobs
// at once, each from several goroutines, promote every job exactly once;
// each call's jobs come in (not_before, seq) order with increasing
// ReadySeqs, as stored, and owned by the process that promoted them.
func TestPromoteDueAcrossProcesses(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	stores := []*Store{openStore(t, schema, "a:1", nil), openStore(t, schema, "b:1", nil)}
	const n = 600
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var batch []*domain.Job
	for i := range n {
		j := storetest.NewJob("u", fmt.Sprint("k", i), fmt.Sprintf("http://up%d.test:80", i%3))
		// Due times repeat (ties go by seq) and do not follow insertion.
		j.NotBefore, j.ReadyQueue = base.Add(time.Duration((i*7919)%200)*time.Millisecond), ""
		batch = append(batch, j)
	}
	out, err := stores[0].InsertBatch(t.Context(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != n {
		t.Fatalf("InsertBatch: %d outcomes", len(out))
	}
	var (
		mu       sync.Mutex
		promoted = make(map[domain.JobID]string)
		wg       sync.WaitGroup
	)
	for _, s := range stores {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					js, err := s.PromoteDue(t.Context(), &ports.PromoteParams{Now: time.Now(), Limit: 7})
					if err != nil {
						t.Error(err)
						return
					}
					if len(js) == 0 {
						return
					}
					for i, j := range js {
						if i > 0 {
							prev := js[i-1]
							if j.ReadySeq <= prev.ReadySeq || j.NotBefore.Before(prev.NotBefore) ||
								(j.NotBefore.Equal(prev.NotBefore) && j.Seq < prev.Seq) {
								t.Errorf("one call's jobs out of order: %s (%v, %d, ready %d) after %s (%v, %d, ready %d)",
									j.ID, j.NotBefore, j.Seq, j.ReadySeq, prev.ID, prev.NotBefore, prev.Seq, prev.ReadySeq)
							}
						}
						if j.ReadyQueue != j.Queue || j.Scheduled() {
							t.Errorf("promoted job %s not ready: %+v", j.ID, j)
						}
					}
					mu.Lock()
					for _, j := range js {
						if by, dup := promoted[j.ID]; dup {
							t.Errorf("job %s promoted twice (by %s and %s)", j.ID, by, s.opts.Owner)
						}
						promoted[j.ID] = s.opts.Owner
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if len(promoted) != n {
		t.Fatalf("%d jobs promoted, want %d", len(promoted), n)
	}
	// As stored: ready with the ReadySeq returned, owned by the promoter.
	query(t, schema, func(tx pgx.Tx) error {
		rows, err := tx.Query(t.Context(), `SELECT id, owner, ready_lane = lane, ready_seq > seq FROM jobs`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, owner string
			var inLane, fresh bool
			if err := rows.Scan(&id, &owner, &inLane, &fresh); err != nil {
				return err
			}
			if owner != promoted[domain.JobID(id)] || !inLane || !fresh {
				t.Errorf("job %s: owner %s (promoted by %s), in its lane %v, fresh ready_seq %v", id, owner, promoted[domain.JobID(id)], inLane, fresh)
			}
		}
		return rows.Err()
	})
	if next, err := stores[1].NextDue(t.Context()); err != nil || !next.IsZero() {
		t.Fatalf("NextDue after promoting all = %v, %v", next, err)
	}
	total := 0
	for i := range 3 {
		total += len(listReady(t, stores[1], fmt.Sprintf("http://up%d.test:80", i), 0, n))
	}
	if total != n {
		t.Fatalf("%d jobs ready after promotion, want %d", total, n)
	}
}

// TestPlainJobsCostNoOptionIndexes: jobs without options never enter the
// indexes of scheduled jobs and deadlines, whatever happens to them, so
// they pay nothing for them; a scheduled job, or one with a deadline, does.
func TestPlainJobsCostNoOptionIndexes(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := openStore(t, schema, "a:1", nil)
	size := func(index string) int64 {
		var n int64
		query(t, schema, func(tx pgx.Tx) error {
			return tx.QueryRow(t.Context(), "SELECT pg_relation_size($1::regclass)", index).Scan(&n)
		})
		return n
	}
	empty := map[string]int64{"jobs_scheduled": size("jobs_scheduled"), "jobs_deadline": size("jobs_deadline")}
	var jobs []*domain.Job
	for i := range 500 {
		jobs = append(jobs, storetest.NewJob("u", fmt.Sprint("plain", i), "http://up.test:80"))
	}
	out, err := s.InsertBatch(t.Context(), jobs[:250])
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs[250:] {
		if _, _, err := s.Insert(t.Context(), j); err != nil {
			t.Fatal(err)
		}
	}
	for i, j := range jobs {
		if i < len(out) {
			j = out[i].Job
		}
		if err := s.MarkInFlight(t.Context(), &ports.MarkInFlightParams{ID: j.ID, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := s.Requeue(t.Context(), &ports.RequeueParams{ID: j.ID, Phase: domain.PhaseDispatch, Attempts: 1, Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := s.Finish(t.Context(), &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Attempts: 1, Now: time.Now(),
			Result: &domain.Result{ResponseStatus: 200}, DeliverIn: "http://hooks.test:80"}); err != nil {
			t.Fatal(err)
		}
	}
	for index, was := range empty {
		if now := size(index); now != was {
			t.Fatalf("%s grew from %d to %d bytes with plain jobs only", index, was, now)
		}
	}
	// Jobs with options do enter them (the check above can fail).
	var with []*domain.Job
	for i := range 500 {
		j := storetest.NewJob("u", fmt.Sprint("opts", i), "http://up.test:80")
		j.NotBefore, j.ReadyQueue, j.Deadline = time.Now().Add(time.Hour), "", time.Now().Add(2*time.Hour)
		with = append(with, j)
	}
	if _, err := s.InsertBatch(t.Context(), with); err != nil {
		t.Fatal(err)
	}
	for index, was := range empty {
		if now := size(index); now == was {
			t.Fatalf("%s did not grow with scheduled jobs with deadlines (%d bytes)", index, now)
		}
	}
}

// TestInsertBatchInAGroup: an InsertBatch shares its group's transaction
// with other ops: an Insert of a key the batch takes is its duplicate, an
// expired holder of a batch's key is replaced, and a batch PostgreSQL
// refuses is stored not at all while the rest of the group is.
func TestInsertBatchInAGroup(t *testing.T) {
	t.Parallel()
	s := openStore(t, newSchema(t), "a:1", nil)
	old := storetest.NewJob("u", "expired", "up.test:80")
	old.ExpiresAt = time.Now().Add(-time.Minute)
	if _, _, err := s.Insert(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	b1, b2 := storetest.NewJob("u", "expired", "up.test:80"), storetest.NewJob("u", "shared", "up.test:80")
	single := storetest.NewJob("u", "shared", "up.test:80")
	bad := []*domain.Job{storetest.NewJob("u", "bad-1", "up.test:80"), storetest.NewJob("u\x00", "bad-2", "up.test:80")}
	alone := storetest.NewJob("u", "alone", "up.test:80")
	r := runGroup(s, []*storekit.Op{
		{Kind: storekit.OpInsertBatch, Inserts: []*domain.Job{b1, b2}},
		{Kind: storekit.OpInsert, Job: single},
		{Kind: storekit.OpInsertBatch, Inserts: bad},
		{Kind: storekit.OpInsert, Job: alone},
	})
	if r[0].Err != nil || len(r[0].Batch) != 2 || !r[0].Batch[0].Fresh || !r[0].Batch[1].Fresh ||
		r[0].Batch[0].Job.ID != b1.ID || r[0].Batch[1].Job.ID != b2.ID {
		t.Fatalf("batch: %+v", r[0])
	}
	if r[1].Err != nil || r[1].Fresh || r[1].Job.ID != b2.ID {
		t.Fatalf("insert of the batch's key: %+v, want a duplicate of %s", r[1], b2.ID)
	}
	if r[2].Err == nil || domain.CodeOf(r[2].Err) != domain.CodeUnavailable {
		t.Fatalf("refused batch: %+v, want an unavailable error", r[2])
	}
	if r[3].Err != nil || !r[3].Fresh {
		t.Fatalf("insert beside a refused batch: %+v", r[3])
	}
	if _, err := s.Lookup(t.Context(), "u", "bad-1"); err == nil {
		t.Fatal("a job of the refused batch was stored")
	}
	if _, err := s.Get(t.Context(), old.ID); err == nil {
		t.Fatal("the expired holder survived")
	}
	// A batch's jobs hold ReadySeqs in its order, whatever their keys' order.
	keys := []string{"z", "a", "m", "b"}
	var batch []*domain.Job
	for _, k := range keys {
		batch = append(batch, storetest.NewJob("u", k, "up.test:80"))
	}
	out, err := s.InsertBatch(t.Context(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if !sort.SliceIsSorted(out, func(a, b int) bool { return out[a].Job.ReadySeq < out[b].Job.ReadySeq }) {
		t.Fatalf("ReadySeqs out of the batch's order: %v", out)
	}
	for i, o := range out {
		if got := getJob(t, s, o.Job.ID); got.ReadySeq != o.Job.ReadySeq || got.Seq != o.Job.Seq || i > 0 && got.Seq <= out[i-1].Job.Seq {
			t.Fatalf("job %s stored with seq %d ready %d, returned %d/%d", o.Job.ID, got.Seq, got.ReadySeq, o.Job.Seq, o.Job.ReadySeq)
		}
	}
}

// TestInsertBatchAcrossProcesses: two processes inserting batches of the
// same keys at once, in opposite orders, store each key once: every job
// is answered, exactly one of each key's two jobs fresh and the other its
// duplicate, and neither process fails.
func TestInsertBatchAcrossProcesses(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	stores := []*Store{openStore(t, schema, "a:1", nil), openStore(t, schema, "b:1", nil)}
	const rounds, size = 20, 50
	for r := range rounds {
		batches := make([][]*domain.Job, 2)
		for i := range size {
			for p := range batches {
				k := i
				if p == 1 {
					k = size - 1 - i // the other order
				}
				batches[p] = append(batches[p], storetest.NewJob("u", fmt.Sprintf("r%d-k%d", r, k), "up.test:80"))
			}
		}
		outs := make([][]ports.InsertOutcome, 2)
		var wg sync.WaitGroup
		for p := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := stores[p].InsertBatch(t.Context(), batches[p])
				if err != nil {
					t.Errorf("round %d, process %d: %v", r, p, err)
				}
				outs[p] = out
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		holder := map[string]domain.JobID{}
		for p, out := range outs {
			for i, o := range out {
				if o.Job.IdempotentKey != batches[p][i].IdempotentKey {
					t.Fatalf("round %d, process %d, job %d answered with key %s", r, p, i, o.Job.IdempotentKey)
				}
				if o.Fresh {
					if _, dup := holder[o.Job.IdempotentKey]; dup {
						t.Fatalf("round %d: key %s inserted twice", r, o.Job.IdempotentKey)
					}
					holder[o.Job.IdempotentKey] = o.Job.ID
				}
			}
		}
		if len(holder) != size {
			t.Fatalf("round %d: %d keys inserted, want %d", r, len(holder), size)
		}
		for p, out := range outs {
			for _, o := range out {
				if !o.Fresh && o.Job.ID != holder[o.Job.IdempotentKey] {
					t.Fatalf("round %d, process %d: duplicate of %s answered with %s, not its holder %s",
						r, p, o.Job.IdempotentKey, o.Job.ID, holder[o.Job.IdempotentKey])
				}
			}
		}
	}
}
