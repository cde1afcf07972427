package pebble

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// scanPrefix returns every key and value under prefix.
func scanPrefix(t *testing.T, r reader, prefix []byte) map[string]string {
	t.Helper()
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkIndexes rebuilds the r/, s/, d/, e/, w/, x/, i/ and c/ entries (the
// deliveries counter among them) the records call for and compares them,
// byte for byte, with the stored ones; and checks that the b/ keys are
// exactly the bodies of the version 4 records that have a non-empty one,
// each as long as its record says (no body left behind by a deleted job).
func checkIndexes(t *testing.T, s *Store) {
	t.Helper()
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	snap := s.db.NewSnapshot()
	defer snap.Close()
	wantX, wantI, wantC := map[string]string{}, map[string]string{}, map[string]string{}
	wantR, wantS, wantD := map[string]string{}, map[string]string{}, map[string]string{}
	wantE, wantW := map[string]string{}, map[string]string{}
	wantB := map[string]int{}
	counts := map[counter]int64{}
	for _, v := range scanPrefix(t, snap, prefixJob) {
		j, ref, err := decodeJob([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		if ref.apart() {
			wantB[string(bodyKey(nil, j.ID))] = ref.n
		}
		if j.ReadyQueue != "" {
			wantR[string(readyKey(nil, j.ReadyQueue, j.Priority, j.ReadySeq))] = string(readyValue(nil, j))
		}
		if j.Scheduled() {
			wantS[string(schedKey(nil, storekit.Millis(j.NotBefore), j.Seq))] = string(schedValue(nil, j))
		}
		if waitsWithDeadline(j) {
			wantD[string(dueKey(nil, storekit.Millis(j.Deadline), j.Seq))] = string(j.ID)
		}
		if ms := storekit.Millis(j.ExpiresAt); ms != 0 && waiting(j) {
			wantW[string(expiryKeyIn(nil, prefixWait, ms, j.ID))] = ""
		} else if ms != 0 {
			wantE[string(expiryKey(nil, ms, j.ID))] = ""
		}
		st := statusCode(j.Status)
		wantX[string(statusKey(nil, st, j.Seq))] = string(appendStatusValue(nil, j))
		sum := string(appendID(nil, j.ID))
		dims(j, func(dim byte, value string) {
			wantI[string(indexKey(nil, dim, value, j.Seq))] = sum
			counts[counter{dim, value, st}]++
		})
		counts[counter{dimAll, "", st}]++
		if delivering(j) {
			counts[deliveries]++
		}
	}
	for c, n := range counts {
		wantC[string(countKey(nil, c.dim, c.value, c.st))] = string(countValue(n))
	}
	for _, x := range []struct {
		name   string
		prefix []byte
		want   map[string]string
	}{{"x/", prefixStatus, wantX}, {"i/", prefixIndex, wantI}, {"c/", prefixCount, wantC},
		{"r/", prefixReady, wantR}, {"s/", prefixSched, wantS}, {"d/", prefixDue, wantD},
		{"e/", prefixExpiry, wantE}, {"w/", prefixWait, wantW}} {
		got := scanPrefix(t, snap, x.prefix)
		for k, v := range x.want {
			if g, ok := got[k]; !ok || g != v {
				t.Fatalf("%s entry %q = %q (present %v), want %q", x.name, k, g, ok, v)
			}
		}
		for k, v := range got {
			if _, ok := x.want[k]; !ok {
				t.Fatalf("stray %s entry %q = %q", x.name, k, v)
			}
		}
	}
	bodies := scanPrefix(t, snap, prefixBody)
	for k, n := range wantB {
		if b, ok := bodies[k]; !ok || len(b) != n {
			t.Fatalf("body %q is %d bytes (present %v), its record says %d", k, len(b), ok, n)
		}
	}
	for k := range bodies {
		if _, ok := wantB[k]; !ok {
			t.Fatalf("stray body %q (%d bytes)", k, len(bodies[k]))
		}
	}
}

// workload drives a store through every kind of write, at random.
type workload struct {
	t    *testing.T
	s    *Store
	rng  *rand.Rand
	ids  *domain.IDGenerator
	jobs []domain.JobID
	n    int
	opts bool // insert jobs with options too, batches, and promote scheduled jobs
	// bodies are the request bodies of the jobs inserted, which every read
	// must return as they were.
	bodies map[domain.JobID][]byte
}

// body is the request body of the workload's nth job: by n%4 none, an
// empty one, a few bytes or 1 KiB (a body under b/ unless none or empty).
// It uses no randomness, so the workload's random sequence is what it was
// before jobs had bodies.
func (w *workload) body(n int) []byte {
	switch n % 4 {
	case 0:
		return nil
	case 1:
		return []byte{}
	case 2:
		return []byte(fmt.Sprintf(`{"n":%d}`, n))
	}
	return bytes.Repeat([]byte(fmt.Sprintf("%08d", n)), 128)
}

// stored notes the body of a job the store took (fresh).
func (w *workload) stored(j *domain.Job, body []byte) {
	if w.bodies == nil {
		w.bodies = map[domain.JobID][]byte{}
	}
	w.bodies[j.ID] = body
}

// checkBody fails the test unless j, read from the store, has the body it
// was inserted with (nil and empty told apart).
func (w *workload) checkBody(what string, j *domain.Job) {
	w.t.Helper()
	want, ok := w.bodies[j.ID]
	if ok && (!bytes.Equal(j.Body, want) || (j.Body == nil) != (want == nil)) {
		w.t.Fatalf("%s: job %s has body %q (nil %v), want %q (nil %v)", what, j.ID, j.Body, j.Body == nil, want, want == nil)
	}
}

// options gives j, at random, a schedule (a little ahead, so some become
// due while the workload runs), a deadline, a priority and the unindexed
// options; about half the jobs stay plain.
func (w *workload) options(j *domain.Job) {
	if w.rng.IntN(4) == 0 {
		j.NotBefore = time.UnixMilli(time.Now().Add(time.Duration(w.rng.IntN(400)) * time.Millisecond).UnixMilli())
		j.ReadyQueue, j.ExpiresAt = "", j.NotBefore.Add(domain.QueuedTTL)
	}
	if w.rng.IntN(3) == 0 {
		j.Deadline = time.UnixMilli(time.Now().Add(time.Duration(w.rng.IntN(2000)-1000) * time.Millisecond).UnixMilli())
	}
	j.Priority = domain.Priorities[w.rng.IntN(3)]
	if w.rng.IntN(4) == 0 {
		j.Timeout, j.TraceParent = time.Second, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	}
}

var workUsers = []string{"alice", "bob", domain.Scope("acme", "alice"), domain.Scope("acme", "carol"), domain.Scope("zeta", "dan")}

func (w *workload) insert() {
	lanes := []domain.QueueKey{"a.test:80", "b.test:443", "pool:p1", "a.test:80|acme"}
	lane := lanes[w.rng.IntN(len(lanes))]
	w.n++
	req := &domain.JobRequest{UserID: workUsers[w.rng.IntN(len(workUsers))], IdempotentKey: fmt.Sprint("k", w.rng.IntN(400)),
		URL: "http://" + string(lane.Upstream()) + "/v1/path", Method: "POST", WebhookURL: "http://hooks.test/h"}
	j := domain.NewJob(w.ids.New(), req, lane, time.Now().Add(-time.Duration(w.rng.IntN(3600))*time.Second))
	if lane == "pool:p1" {
		j.PoolID = "p1"
	}
	if w.opts {
		w.options(j)
	}
	if w.rng.IntN(8) == 0 {
		j.ExpiresAt = time.Now().Add(-time.Minute) // expired at once: listed never, purged soon
	}
	j.Body = w.body(w.n)
	stored, fresh, err := w.s.Insert(w.t.Context(), j)
	if err != nil {
		w.t.Fatal(err)
	}
	if fresh {
		w.stored(stored, j.Body)
	}
	w.checkBody("Insert", stored)
	w.jobs = append(w.jobs, stored.ID)
}

func (w *workload) pick() domain.JobID { return w.jobs[w.rng.IntN(len(w.jobs))] }

// step does one random write; errors that the write's preconditions explain
// (not found, not finished) are expected.
func (w *workload) step() {
	ctx, now, id := w.t.Context(), time.Now(), w.pick()
	var err error
	kinds := 12
	if w.opts {
		kinds = 14
	}
	switch w.rng.IntN(kinds) {
	case 0, 1:
		w.insert()
	case 2:
		err = w.s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: id, At: now})
	case 3:
		err = w.s.Requeue(ctx, &ports.RequeueParams{ID: id, Phase: domain.PhaseDispatch, Attempts: 1,
			History: []domain.Attempt{{At: now, Duration: time.Second, Status: 503}}, Now: now})
	case 4:
		st := []domain.Status{domain.StatusCompleted, domain.StatusFailed}[w.rng.IntN(2)]
		deliver := domain.QueueKey("")
		if w.rng.IntN(2) == 0 {
			deliver = "hooks.test:80"
		}
		_, err = w.s.Finish(ctx, &ports.FinishParams{ID: id, Status: st, Attempts: 1, Now: now, DeliverIn: deliver,
			Result: &domain.Result{ResponseStatus: []int{0, 200, 500}[w.rng.IntN(3)], Reason: "r"}})
	case 5:
		err = w.s.FinishDelivery(ctx, &ports.FinishDeliveryParams{ID: id, Delivered: true, Attempts: 1, Response: 200, Now: now})
	case 6:
		var j *domain.Job
		if j, err = w.s.Retry(ctx, &ports.RetryParams{ID: id, Now: now}); err == nil {
			w.checkBody("Retry", j)
		}
	case 7:
		kind := []domain.OperationKind{domain.OpKindRetry, domain.OpKindCancel}[w.rng.IntN(2)]
		op := &domain.Operation{ID: fmt.Sprint("op", w.n), Kind: kind, State: domain.OpRunning, CreatedAt: now, UpdatedAt: now}
		if err = w.s.SaveOperation(ctx, op); err == nil {
			next := *op
			next.Processed = 3
			_, err = w.s.RunBatch(ctx, &ports.RunBatchParams{Op: &next, Now: now,
				Items: []ports.BatchItem{{ID: id}, {ID: w.pick(), DeliverIn: "hooks.test:80"}, {ID: id}}})
		}
	case 8:
		err = w.s.Delete(ctx, id)
	case 9:
		_, err = w.s.Purge(ctx, &ports.PurgeParams{Now: now, Limit: 5})
	case 10:
		var reset []*domain.Job
		reset, err = w.s.ResetStale(ctx, &ports.ResetStaleParams{DispatchedBefore: now, Now: now})
		for _, j := range reset {
			w.checkBody("ResetStale", j)
		}
	case 11:
		_, err = w.s.DeleteFinished(ctx, 1<<62, 3)
	case 12:
		var promoted []*domain.Job
		promoted, err = w.s.PromoteDue(ctx, &ports.PromoteParams{Now: now, Limit: 1 + w.rng.IntN(4)})
		for _, j := range promoted {
			w.checkBody("PromoteDue", j)
		}
	case 13:
		var batch []*domain.Job
		if j, gerr := w.s.Get(ctx, id); gerr == nil && w.rng.IntN(2) == 0 {
			batch = append(batch, j) // a duplicate of a stored job
		}
		for range 1 + w.rng.IntN(3) {
			req := &domain.JobRequest{UserID: "batch", IdempotentKey: fmt.Sprint("b", w.rng.IntN(50)), URL: "http://a.test/b", Method: "GET"}
			j := domain.NewJob(w.ids.New(), req, "a.test:80", now)
			w.options(j)
			w.n++
			j.Body = w.body(w.n)
			batch = append(batch, j)
		}
		var out []ports.InsertOutcome
		if out, err = w.s.InsertBatch(ctx, batch); err == nil {
			for i, o := range out {
				if o.Fresh {
					w.stored(o.Job, batch[i].Body)
				}
				w.checkBody("InsertBatch", o.Job)
				w.jobs = append(w.jobs, o.Job.ID)
			}
		}
	}
	if err != nil && domain.CodeOf(err) != domain.CodeNotFound && domain.CodeOf(err) != domain.CodeConflict {
		w.t.Fatalf("step: %v", err)
	}
}

// reference returns every live job, newest first, read one by one.
func (w *workload) reference() []*domain.Job {
	var out []*domain.Job
	for _, id := range w.jobs {
		if j, err := w.s.Get(w.t.Context(), id); err == nil && !slices.ContainsFunc(out, func(x *domain.Job) bool { return x.ID == j.ID }) {
			w.checkBody("Get", j)
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *domain.Job) int { return int(b.Seq - a.Seq) })
	return out
}

var workFilters = []domain.JobFilter{
	{},
	{Statuses: []domain.Status{domain.StatusFailed}},
	{Statuses: []domain.Status{domain.StatusQueued, domain.StatusInFlight}},
	{Statuses: []domain.Status{domain.StatusInFlight}},
	{UserID: "alice"},
	{UserID: domain.Scope("acme", "alice"), Statuses: []domain.Status{domain.StatusCompleted}},
	{Tenant: "acme"},
	{Tenant: "acme", UserID: "alice"}, // a user outside the tenant: nothing
	{Tenant: "acme", Destination: "a.test:80"},
	{Destination: "pool:p1", Statuses: []domain.Status{domain.StatusFailed, domain.StatusCompleted}},
	{Destination: "b.test:443", ResponseStatus: 500},
	{PoolID: "p1"},
	{Q: "PATH", Tenant: "zeta"},
	{Statuses: []domain.Status{"bogus"}},
}

// checkQueries compares listings and counts with the reference, and
// checks the bodies of the jobs ListReady returns.
func (w *workload) checkQueries(filters []domain.JobFilter) {
	t := w.t
	all := w.reference()
	for _, lane := range []domain.QueueKey{"a.test:80", "b.test:443", "pool:p1", "a.test:80|acme", "hooks.test:80"} {
		for _, p := range domain.Priorities {
			page, err := w.s.ListReady(t.Context(), &ports.ListReadyParams{Queue: lane, Priority: p, Limit: 1000, Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page {
				w.checkBody("ListReady", j)
			}
		}
	}
	for _, f := range filters {
		var want []domain.JobID
		wantCounts := map[domain.Status]int64{}
		for _, j := range all {
			if f.Matches(j) {
				want = append(want, j.ID)
			}
			if f.MatchesIgnoringStatus(j) {
				wantCounts[j.Status]++
			}
		}
		var got []domain.JobID
		for before := int64(0); ; {
			page, err := w.s.ListJobs(t.Context(), &ports.ListJobsParams{Filter: f, BeforeSeq: before, Limit: 3, Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page {
				w.checkBody("ListJobs", j)
				got = append(got, j.ID)
			}
			if len(page) < 3 {
				break
			}
			before = page[len(page)-1].Seq
		}
		if !slices.Equal(got, want) {
			t.Fatalf("filter %+v: listed %v, want %v", f, got, want)
		}
		counts, err := w.s.CountJobs(t.Context(), &ports.CountJobsParams{Filter: f, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(counts) != fmt.Sprint(wantCounts) {
			t.Fatalf("filter %+v: counts %v, want %v", f, counts, wantCounts)
		}
	}
}

// TestIndexesFollowEveryWrite: after any mix of writes, of plain jobs and
// jobs with options, the r/, s/, d/, x/, i/ and c/ entries are exactly
// what the records call for, and listings and counts
// agree with reading every job.
func TestIndexesFollowEveryWrite(t *testing.T) {
	s := openTemp(t)
	w := &workload{t: t, s: s, rng: rand.New(rand.NewPCG(17, 1)), ids: domain.NewIDGenerator(nil), opts: true}
	for range 20 {
		w.insert()
	}
	for round := range 15 {
		for range 40 {
			w.step()
		}
		w.insert() // commits any MarkInFlight still on its way
		checkIndexes(t, s)
		if round%3 == 0 {
			w.checkQueries(workFilters)
		}
	}
	w.checkQueries(workFilters)
}

// TestSingleDeletesMeetOneWrite: after a mix of writes, flushed and
// compacted to the bottom, Pebble reports no single delete that met other
// than one write, and the indexes are still exact.
func TestSingleDeletesMeetOneWrite(t *testing.T) {
	core, logs := observer.New(zapcore.ErrorLevel)
	s, err := Open(t.Context(), Options{Dir: t.TempDir(), Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := &workload{t: t, s: s, rng: rand.New(rand.NewPCG(5, 3)), ids: domain.NewIDGenerator(nil), opts: true}
	for range 30 {
		w.insert()
	}
	for round := range 4 {
		for range 300 {
			w.step()
		}
		w.insert()
		if err := s.read(func() error { return s.db.Compact(t.Context(), []byte("a"), []byte("z"), false) }); err != nil {
			t.Fatal(err)
		}
		checkIndexes(t, s)
		if logs.Len() > 0 {
			t.Fatalf("round %d: %s: %v", round, logs.All()[0].Message, logs.All()[0].ContextMap())
		}
	}
	w.checkQueries(workFilters)
}

// TestPlanPicksTheDenseRange: a filter on a small user is served by the
// user's range, a status that few jobs have by its x/ range.
func TestPlanPicksTheDenseRange(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	ids := domain.NewIDGenerator(nil)
	for i := range 300 {
		user := "crowd"
		if i%100 == 0 {
			user = "rare"
		}
		j := domain.NewJob(ids.New(), &domain.JobRequest{UserID: user, IdempotentKey: fmt.Sprint(i), URL: "http://a.test/x", Method: "GET"},
			"a.test:80", time.Now())
		stored, _, err := s.Insert(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		if i%50 == 1 {
			if _, err := s.Finish(ctx, &ports.FinishParams{ID: stored.ID, Status: domain.StatusFailed, Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		f    domain.JobFilter
		want dimRef
	}{
		{domain.JobFilter{UserID: "rare"}, dimRef{dimUser, "rare"}},
		{domain.JobFilter{UserID: "rare", Statuses: []domain.Status{domain.StatusQueued}}, dimRef{dimUser, "rare"}},
		{domain.JobFilter{UserID: "crowd", Statuses: []domain.Status{domain.StatusFailed}}, dimRef{}},
		{domain.JobFilter{Destination: "a.test:80"}, dimRef{dimDest, "a.test:80"}},
		{domain.JobFilter{}, dimRef{}},
	} {
		var got dimRef
		if err := s.read(func() error {
			var err error
			got, err = newQuery(&tc.f).plan(s.db, 100)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Fatalf("plan for %+v = %+v, want %+v", tc.f, got, tc.want)
		}
	}
}

// TestSummaryRoundTrip: an x/ value gives back what the filters read, and
// ids round-trip through the index values packed or not.
func TestSummaryRoundTrip(t *testing.T) {
	j := fullJob()
	var sum summary
	if !sum.parse(appendStatusValue(nil, j)) || string(sum.id) != string(j.ID) || string(sum.user) != j.UserID ||
		string(sum.upstream) != string(j.Queue.Upstream()) || string(sum.pool) != j.PoolID ||
		sum.created != storekit.Millis(j.CreatedAt) || sum.resp != 502 {
		t.Fatalf("summary = %+v", sum)
	}
	if v := appendID(nil, j.ID); len(v) != 17 {
		t.Fatalf("a generated id takes %d bytes in an index value, want 17", len(v))
	}
	for _, id := range []domain.JobID{j.ID, "ffffffffffffffffffffffffffffffff", "short", "0190A1B2C3D4E5F60718293A4B5C6D7E", ""} {
		var buf [32]byte
		got, ok := parseIndexValue(appendID(nil, id), &buf)
		if !ok || string(got) != string(id) {
			t.Fatalf("id %q round trip = %q, %v", id, got, ok)
		}
	}
	if sum.parse(bytes.Repeat([]byte{0xff}, 3)) {
		t.Fatal("garbage parsed as a summary")
	}
	var buf [32]byte
	if _, ok := parseIndexValue([]byte{1, 2, 3}, &buf); ok {
		t.Fatal("a truncated packed id parsed")
	}
}
