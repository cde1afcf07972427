package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap/zaptest"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

func insertJob(t *testing.T, s *Store, j *domain.Job) *domain.Job {
	t.Helper()
	stored, fresh, err := s.Insert(t.Context(), j)
	if err != nil || !fresh {
		t.Fatalf("insert: %v (fresh %v)", err, fresh)
	}
	return stored
}

func getJob(t *testing.T, s *Store, id domain.JobID) *domain.Job {
	t.Helper()
	j, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return j
}

func failJob(t *testing.T, s *Store, j *domain.Job, reason string, history []domain.Attempt) {
	t.Helper()
	if _, err := s.Finish(t.Context(), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusFailed, Attempts: 1,
		Result: &domain.Result{ResponseStatus: 503, Reason: reason}, History: history, Now: time.Now()}); err != nil {
		t.Fatalf("finish: %v", err)
	}
}

// listAll pages through every job f matches, 3 at a time.
func listAll(t *testing.T, s *Store, f domain.JobFilter) []domain.JobID {
	t.Helper()
	var out []domain.JobID
	before := int64(0)
	for {
		page, err := s.ListJobs(t.Context(), &ports.ListJobsParams{Filter: f, BeforeSeq: before, Limit: 3, Now: time.Now()})
		if err != nil {
			t.Fatalf("ListJobs(%+v): %v", f, err)
		}
		for _, j := range page {
			out = append(out, j.ID)
		}
		if len(page) < 3 {
			return out
		}
		before = page[len(page)-1].Seq
	}
}

// checkFilters compares ListJobs and CountJobs with domain.JobFilter over
// jobs (newest first), for each filter.
func checkFilters(t *testing.T, s *Store, jobs []*domain.Job, filters []domain.JobFilter) {
	t.Helper()
	for _, f := range filters {
		var want []domain.JobID
		wantCounts := map[domain.Status]int64{}
		for _, j := range jobs {
			if f.Matches(j) {
				want = append(want, j.ID)
			}
			if f.MatchesIgnoringStatus(j) {
				wantCounts[j.Status]++
			}
		}
		if got := listAll(t, s, f); !slices.Equal(got, want) {
			t.Errorf("filter %#v: listed %v, want %v", f, got, want)
		}
		counts, err := s.CountJobs(t.Context(), &ports.CountJobsParams{Filter: f, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(counts) != fmt.Sprint(wantCounts) {
			t.Errorf("filter %#v: counts %v, want %v", f, counts, wantCounts)
		}
	}
}

// TestFiltersMatchTheDomainOnOddValues: the derived columns and the SQL
// conditions select exactly what domain.JobFilter does for values the
// contract's seed does not have: user ids with several scope separators,
// queue keys with several '|', URL paths that url.EscapedPath rewrites,
// non-ASCII reasons and a q that is not valid UTF-8.
func TestFiltersMatchTheDomainOnOddValues(t *testing.T) {
	t.Parallel()
	s := openStore(t, newSchema(t), "a:1", nil)
	type spec struct{ user, lane, url, reason string }
	specs := []spec{
		{domain.Scope("acme", domain.Scope("team", "bob")), "http://a.test:80|x|y", "http://a.test:80/a%20b/%7Euser/Caf%C3%A9?q=1", "ÉCHEC de l'envoi"},
		{"\x1fbare", "http://a.test:80|x", "http://a.test:80/a b/é", "connection refused"},
		{domain.Scope("acme", "alice"), "http://a.test:80", "http://a.test:80/Ab%2fCd", "délai dépassé"},
		{"alice", "pool:acme\x1fgpu", "", "no member"},
		{domain.Scope("acme", "carol"), "http://b.test:443|" + "deadbeef", "http://b.test:443/%zz", ""},
	}
	var jobs []*domain.Job
	for i, sp := range specs {
		j := storetest.NewJob(sp.user, fmt.Sprint("odd", i), sp.lane)
		j.URL = sp.url
		j = insertJob(t, s, j)
		if sp.reason != "" {
			failJob(t, s, j, sp.reason, nil)
		}
		jobs = append(jobs, getJob(t, s, j.ID))
	}
	slices.Reverse(jobs)
	checkFilters(t, s, jobs, []domain.JobFilter{
		{Tenant: "acme"},
		{Tenant: domain.Scope("acme", "team")}, // not a real tenant: matched as a prefix
		{Tenant: "team"},
		{Tenant: "\x1fbare"},
		{UserID: "\x1fbare"},
		{Destination: "http://a.test:80|x"},
		{Destination: "http://a.test:80"},
		{Destination: "http://b.test:443"},
		{Destination: "pool:acme\x1fgpu"},
		{Q: "a%20b"}, {Q: "A B"}, {Q: "%7euser"}, {Q: "café"}, {Q: "CAF%c3"}, {Q: "%2F"}, {Q: "%25zz"},
		{Q: "échec"}, {Q: "ÉCHEC"}, {Q: "\xa9"}, {Q: "\x00"}, {Q: "%"}, {Q: "_"}, {Q: "q=1"},
		{Q: "d", Statuses: []domain.Status{domain.StatusFailed}, Tenant: "acme"},
	})
}

// TestOperatorStateSurvivesReopen: operations, lane pauses and attempt
// histories are in the database, not the process: a store opened after
// the first one closed finds them, and so does a peer while the first runs.
func TestOperatorStateSurvivesReopen(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := openStore(t, schema, "a:1", nil)
	j := insertJob(t, s, storetest.NewJob("u", "h", "http://a.test:80"))
	at := time.UnixMilli(time.Now().Add(-time.Minute).UnixMilli())
	history := []domain.Attempt{
		{At: at, Duration: 1500 * time.Microsecond, Status: 429, Signal: domain.SignalRetryAfter},
		{At: at.Add(time.Second), Duration: 30 * time.Millisecond, Error: "connection refused"},
		{At: at.Add(2 * time.Second), Duration: 2 * time.Second, Status: 503, Member: "gpu-1", Signal: domain.SignalORCA},
	}
	failJob(t, s, j, "upstream returned 503", history)
	op := &domain.Operation{ID: "op-1", Kind: domain.OpKindRetry, State: domain.OpRunning, Cursor: j.Seq + 1, Total: 1,
		Filter:    domain.JobFilter{Statuses: []domain.Status{domain.StatusFailed}, Destination: "http://a.test:80", CreatedAfter: at},
		CreatedAt: at, UpdatedAt: at}
	if err := s.SaveOperation(t.Context(), op); err != nil {
		t.Fatal(err)
	}
	pause := domain.LanePause{Upstream: "http://a.test:80", At: at, Reason: "incident 7"}
	if err := s.PauseLane(t.Context(), pause); err != nil {
		t.Fatal(err)
	}
	peer := openStore(t, schema, "b:1", nil)
	if ps, err := peer.LanePauses(t.Context()); err != nil || len(ps) != 1 || ps[0] != pause {
		t.Fatalf("a peer sees pauses %+v, %v; want %+v", ps, err, pause)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r := openStore(t, schema, "a:1", nil)
	got := getJob(t, r, j.ID)
	if len(got.History) != len(history) {
		t.Fatalf("history after reopen: %+v", got.History)
	}
	for i := range history {
		if g, w := got.History[i], history[i]; !g.At.Equal(w.At) || g.Duration != w.Duration || g.Status != w.Status ||
			g.Error != w.Error || g.Signal != w.Signal || g.Member != w.Member {
			t.Fatalf("attempt %d after reopen = %+v, want %+v", i, g, w)
		}
	}
	ops, err := r.Operations(t.Context(), true)
	if err != nil || len(ops) != 1 || ops[0].ID != op.ID || ops[0].Filter.Destination != op.Filter.Destination ||
		!ops[0].Filter.CreatedAfter.Equal(at) || ops[0].Cursor != op.Cursor {
		t.Fatalf("running operations after reopen: %+v, %v", ops, err)
	}
	if ps, err := r.LanePauses(t.Context()); err != nil || len(ps) != 1 || ps[0] != pause {
		t.Fatalf("pauses after reopen: %+v, %v", ps, err)
	}
	// The operation resumes where it stood: its next batch commits.
	next := *ops[0]
	next.Processed, next.State = 1, domain.OpCompleted
	changed, err := r.RunBatch(t.Context(), &ports.RunBatchParams{Op: &next, PrevProcessed: 0,
		Items: []ports.BatchItem{{ID: j.ID, Seq: j.Seq}}, Now: time.Now()})
	if err != nil || !slices.Equal(changed, []domain.JobID{j.ID}) {
		t.Fatalf("resumed batch changed %v, %v", changed, err)
	}
	if got := storedOp(t, peer, op.ID); got.State != domain.OpCompleted || got.Processed != 1 || got.Changed != 1 {
		t.Fatalf("a peer reads the operation as %+v", got)
	}
	if err := peer.ResumeLane(t.Context(), pause.Upstream); err != nil {
		t.Fatal(err)
	}
	if ps, err := r.LanePauses(t.Context()); err != nil || len(ps) != 0 {
		t.Fatalf("pauses after a peer resumed the lane: %+v, %v", ps, err)
	}
}

// failedJobs inserts n failed jobs and returns them.
func failedJobs(t *testing.T, s *Store, prefix string, n int) []*domain.Job {
	t.Helper()
	out := make([]*domain.Job, n)
	for i := range out {
		out[i] = insertJob(t, s, storetest.NewJob("u", fmt.Sprint(prefix, i), "http://a.test:80"))
		failJob(t, s, out[i], "x", nil)
	}
	return out
}

func items(js []*domain.Job) []ports.BatchItem {
	out := make([]ports.BatchItem, len(js))
	for i, j := range js {
		out[i] = ports.BatchItem{ID: j.ID, Seq: j.Seq}
	}
	return out
}

func storedOp(t *testing.T, s *Store, id string) *domain.Operation {
	t.Helper()
	op, err := s.GetOperation(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// TestRunBatchIsAtomic: when any part of a batch fails, in the jobs or in
// the operation's row, neither the jobs nor the operation's progress
// change; run again, the batch changes every job once.
func TestRunBatchIsAtomic(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := openStore(t, schema, "a:1", nil)
	jobs := failedJobs(t, s, "f", 6)
	op := &domain.Operation{ID: "op-a", Kind: domain.OpKindRetry, State: domain.OpRunning, Cursor: 1 << 40,
		CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := s.SaveOperation(t.Context(), op); err != nil {
		t.Fatal(err)
	}
	next := *op
	next.Processed = 6 // the store adds the batch's changed and skipped counts
	for _, fault := range []struct{ table, cond string }{
		{"jobs", "NEW.id = '" + string(jobs[3].ID) + "'"}, // the fourth job of the batch fails
		{"aquifer_operations", "true"},                    // the progress fails
	} {
		exec(t, schema, `CREATE FUNCTION fault() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF `+fault.cond+` THEN RAISE EXCEPTION 'injected fault'; END IF; RETURN NEW; END $$`)
		exec(t, schema, `CREATE TRIGGER fault BEFORE UPDATE ON `+fault.table+` FOR EACH ROW EXECUTE FUNCTION fault()`)
		_, err := s.RunBatch(t.Context(), &ports.RunBatchParams{Op: &next, Items: items(jobs), Now: time.Now()})
		if domain.CodeOf(err) != domain.CodeUnavailable {
			t.Fatalf("batch with a fault in %s = %v, want unavailable", fault.table, err)
		}
		for _, j := range jobs {
			if g := getJob(t, s, j.ID); g.Status != domain.StatusFailed {
				t.Fatalf("fault in %s: job %s is %s after the failed batch", fault.table, j.ID, g.Status)
			}
		}
		if got := storedOp(t, s, op.ID); got.Processed != 0 || got.Changed != 0 {
			t.Fatalf("fault in %s: the failed batch recorded progress %+v", fault.table, got)
		}
		exec(t, schema, `DROP TRIGGER fault ON `+fault.table+`; DROP FUNCTION fault()`)
	}
	changed, err := s.RunBatch(t.Context(), &ports.RunBatchParams{Op: &next, Items: items(jobs), Now: time.Now()})
	if err != nil || len(changed) != len(jobs) {
		t.Fatalf("batch without faults changed %v, %v", changed, err)
	}
	if got := storedOp(t, s, op.ID); got.Processed != 6 || got.Changed != 6 {
		t.Fatalf("progress after the batch: %+v", got)
	}
	// Replayed after a crash that lost the answer, the batch is refused.
	if _, err := s.RunBatch(t.Context(), &ports.RunBatchParams{Op: &next, Items: items(jobs), Now: time.Now()}); !errors.Is(err, ports.ErrOperationConflict) {
		t.Fatalf("replayed batch = %v, want ErrOperationConflict", err)
	}
}

// TestRunBatchOneRunnerWinsAcrossProcesses: two processes running the same
// operation from the same progress race batch after batch; in each round
// exactly one batch commits, the other is refused with
// ErrOperationConflict and changes nothing, so no job is re-queued twice.
func TestRunBatchOneRunnerWinsAcrossProcesses(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a, b := openStore(t, schema, "a:1", nil), openStore(t, schema, "b:1", nil)
	const rounds, per = 10, 5
	jobs := failedJobs(t, a, "r", rounds*2*per)
	op := &domain.Operation{ID: "op-race", Kind: domain.OpKindRetry, State: domain.OpRunning, Cursor: 1 << 40,
		CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := a.SaveOperation(t.Context(), op); err != nil {
		t.Fatal(err)
	}
	for r := range rounds {
		next := *op
		next.Processed = int64((r + 1) * per)
		mine := [][]*domain.Job{jobs[2*r*per : (2*r+1)*per], jobs[(2*r+1)*per : (2*r+2)*per]}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, s := range []*Store{a, b} {
			wg.Go(func() {
				<-start
				_, errs[i] = s.RunBatch(context.Background(), &ports.RunBatchParams{Op: &next, PrevProcessed: int64(r * per),
					Items: items(mine[i]), Now: time.Now()})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner < 0:
				winner = i
			case err == nil:
				t.Fatalf("round %d: both runners committed", r)
			case !errors.Is(err, ports.ErrOperationConflict):
				t.Fatalf("round %d: runner %d: %v", r, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no runner committed: %v", r, errs)
		}
		for i, js := range mine {
			for _, j := range js {
				if g := getJob(t, a, j.ID); (g.Status == domain.StatusQueued) != (i == winner) {
					t.Fatalf("round %d: job of runner %d is %s (winner %d)", r, i, g.Status, winner)
				}
			}
		}
		op = &next
	}
}

// TestMigrationFromVersion2: a database that a version 2 store wrote opens
// with this one, which fills the new columns of the jobs already stored,
// so they list and count by tenant, destination and q like new ones.
func TestMigrationFromVersion2(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	cfg, err := pgxpool.ParseConfig(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	old := &Store{opts: Options{Schema: schema}, pool: pool, log: zaptest.NewLogger(t), path: "version 2"}
	err = old.migrateTo(t.Context(), 2)
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Jobs as version 2 wrote them: more than one fill chunk of them.
	const n = 2*backfillChunk + 17
	exec(t, schema, `INSERT INTO jobs (id, seq, user_id, idempotent_key, url, pool_id, method, lane, status,
		created_at, updated_at, expires_at, response_status, reason, ready_lane, ready_seq)
	SELECT 'j' || lpad(g::text, 6, '0'), g,
		CASE WHEN g % 3 = 0 THEN 'acme' || E'\x1f' || 'u' || (g % 4) ELSE 'u' || (g % 4) END, 'k' || g,
		CASE WHEN g % 5 = 0 THEN '' ELSE 'http://up' || (g % 2) || '.test:80/v1/Chat/' || g || '?token=s' END,
		CASE WHEN g % 5 = 0 THEN 'p' ELSE '' END, 'POST',
		CASE WHEN g % 5 = 0 THEN 'pool:p' ELSE 'http://up' || (g % 2) || '.test:80' ||
			CASE WHEN g % 3 = 0 THEN '|acmehash' ELSE '' END END,
		CASE WHEN g % 2 = 0 THEN 'failed' ELSE 'queued' END, $2::bigint + g, $2::bigint + g, $2::bigint + 86400000,
		CASE WHEN g % 2 = 0 THEN 503 ELSE 0 END, CASE WHEN g % 2 = 0 THEN 'Connection Refused' ELSE '' END,
		CASE WHEN g % 2 = 0 THEN '' ELSE 'lane' END, g
	FROM generate_series(1, $1::int) g`, n, time.Now().UnixMilli())
	exec(t, schema, "SELECT setval('jobs_seq', $1::bigint)", n)

	s := openStore(t, schema, "a:1", nil)
	query(t, schema, func(tx pgx.Tx) error {
		var version, missing int
		if err := tx.QueryRow(t.Context(), "SELECT max(version) FROM aquifer_schema_migrations").Scan(&version); err != nil {
			return err
		}
		if err := tx.QueryRow(t.Context(), "SELECT count(*) FROM jobs WHERE upstream = ''").Scan(&missing); err != nil {
			return err
		}
		if version != latestVersion(t) || missing != 0 {
			t.Errorf("after the migration: version %d, %d jobs without an upstream", version, missing)
		}
		return nil
	})
	// Every job of the old database, read back, is the reference.
	var all []*domain.Job
	for g := n; g >= 1; g-- {
		all = append(all, getJob(t, s, domain.JobID(fmt.Sprintf("j%06d", g))))
	}
	for _, f := range []domain.JobFilter{
		{Tenant: "acme"},
		{Destination: "http://up1.test:80", Statuses: []domain.Status{domain.StatusFailed}},
		{Destination: "pool:p"},
		{UserID: "u3", Q: "chat/77"},
		{Q: "refused", Tenant: "acme"},
		{Q: "token"}, // in the query string only: never matched
	} {
		var want int
		wantCounts := map[domain.Status]int64{}
		for _, j := range all {
			if f.Matches(j) {
				want++
			}
			if f.MatchesIgnoringStatus(j) {
				wantCounts[j.Status]++
			}
		}
		page, err := s.ListJobs(t.Context(), &ports.ListJobsParams{Filter: f, Limit: 100, Now: time.Now()})
		if err != nil || len(page) != min(want, 100) {
			t.Fatalf("filter %#v: listed %d jobs, %v; want %d", f, len(page), err, min(want, 100))
		}
		for _, j := range page {
			if !f.Matches(j) {
				t.Fatalf("filter %#v listed %+v", f, j)
			}
		}
		counts, err := s.CountJobs(t.Context(), &ports.CountJobsParams{Filter: f, Now: time.Now()})
		if err != nil || fmt.Sprint(counts) != fmt.Sprint(wantCounts) {
			t.Fatalf("filter %#v: counts %v, %v; want %v", f, counts, err, wantCounts)
		}
	}
	// Old jobs take part in operators' writes like new ones.
	if _, err := s.Retry(t.Context(), &ports.RetryParams{ID: "j000002", Now: time.Now()}); err != nil {
		t.Fatalf("retry of a job written by version 2: %v", err)
	}
}

// TestListingsLeaveTheWriterItsConnections: listings and counts take at
// most a quarter of the pool; while that many are running (here: the one
// slot of a pool of 4 is taken, and a long read transaction holds a
// snapshot of jobs), the writer still commits, and a further listing waits
// only within its bound, failing as unavailable.
func TestListingsLeaveTheWriterItsConnections(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	s := openStore(t, schema, "a:1", func(o *Options) { o.MaxConns = 4 })
	if cap(s.reads) != 1 {
		t.Fatalf("%d listing slots for a pool of 4, want 1", cap(s.reads))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tx, err := admin(t).BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	var n int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "jobs"}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	s.reads <- struct{}{} // a listing in progress
	for i := range 20 {
		j := insertJob(t, s, storetest.NewJob("u", fmt.Sprint("w", i), "http://a.test:80"))
		failJob(t, s, j, "x", nil)
	}
	lctx, lcancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	_, err = s.ListJobs(lctx, &ports.ListJobsParams{Limit: 10, Now: time.Now()})
	lcancel()
	if domain.CodeOf(err) != domain.CodeUnavailable {
		t.Fatalf("a listing beyond the limit = %v, want unavailable once its context ends", err)
	}
	<-s.reads
	page, err := s.ListJobs(t.Context(), &ports.ListJobsParams{Filter: domain.JobFilter{Statuses: []domain.Status{domain.StatusFailed}}, Limit: 50, Now: time.Now()})
	if err != nil || len(page) != 20 {
		t.Fatalf("listing after the slot freed: %d jobs, %v", len(page), err)
	}
}
