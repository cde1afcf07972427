package pebble

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// copyLayout2 copies the layout 2 fixture (testdata/genlayout2 says how it
// was written) into a new directory: opening it migrates it in place.
func copyLayout2(t *testing.T) string { return copyFixture(t, "testdata/layout2") }

// copyLayout3 does the same with the layout 3 fixture (testdata/genlayout3).
func copyLayout3(t *testing.T) string { return copyFixture(t, "testdata/layout3") }

// copyLayout4 does the same with the layout 4 fixture (testdata/genlayout4).
func copyLayout4(t *testing.T) string { return copyFixture(t, "testdata/layout4") }

func copyFixture(t *testing.T, from string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// zaptestLogger sends the store's warnings and errors to the test log.
func zaptestLogger(t *testing.T) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
}

// storedFormat reads m/format of a closed store.
func storedFormat(t *testing.T, dir string) []byte {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: zapLogger{zaptestLogger(t)}, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, err := get(db, keyFormat)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// everyJob reads every live job by paging the ledger, newest first.
func everyJob(t *testing.T, s *Store) []*domain.Job {
	t.Helper()
	var out []*domain.Job
	after := ""
	for {
		page, err := s.Ledger(t.Context(), &ports.LedgerParams{After: after, Limit: 7, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			j, err := s.Get(t.Context(), e.ID)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, j)
		}
		if len(page) < 7 {
			break
		}
		after = page[len(page)-1].Cursor
	}
	slices.SortFunc(out, func(a, b *domain.Job) int { return int(b.Seq - a.Seq) })
	return out
}

// checkListing compares listings and counts of s for every filter with
// the jobs everyJob reads.
func checkListing(t *testing.T, s *Store, filters []domain.JobFilter) {
	t.Helper()
	w := &workload{t: t, s: s}
	for _, j := range everyJob(t, s) {
		w.jobs = append(w.jobs, j.ID)
	}
	w.checkQueries(filters)
}

var layout2Filters = []domain.JobFilter{
	{},
	{Statuses: []domain.Status{domain.StatusFailed}},
	{Statuses: []domain.Status{domain.StatusInFlight}},
	{UserID: "alice"},
	{Tenant: "acme"},
	{Tenant: "acme", Statuses: []domain.Status{domain.StatusCompleted}},
	{Destination: "pool:p1"},
	{Destination: "a.test:80", ResponseStatus: 503},
	{Q: "refused"},
}

// TestMigrateLayout2: a store written by the layout 2 build opens, is
// migrated to layout 3 and then 4, lists and counts exactly, takes writes, and opens
// again without migrating twice.
func TestMigrateLayout2(t *testing.T) {
	dir := copyLayout2(t)
	if v := storedFormat(t, dir); len(v) != 1 || v[0] != layoutVersionV2 {
		t.Fatalf("fixture has format %v, want layout 2", v)
	}
	s, err := Open(t.Context(), Options{Dir: dir, Logger: zaptestLogger(t)})
	if err != nil {
		t.Fatalf("open a layout 2 store: %v", err)
	}
	checkIndexes(t, s)
	counts, err := s.CountJobs(t.Context(), &ports.CountJobsParams{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	want := map[domain.Status]int64{domain.StatusQueued: 6, domain.StatusInFlight: 6, domain.StatusCompleted: 12, domain.StatusFailed: 12}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Fatalf("counts after migrating = %v, want %v (the fixture's live jobs)", counts, want)
	}
	checkListing(t, s, layout2Filters)
	all := everyJob(t, s)
	for _, j := range all {
		if j.History != nil {
			t.Fatalf("job %s from a layout 2 record has history %+v", j.ID, j.History)
		}
	}

	// Old records take every write, and their indexes follow.
	ctx := t.Context()
	var queued, failed *domain.Job
	for _, j := range all {
		switch {
		case j.Status == domain.StatusQueued && queued == nil:
			queued = j
		case j.Status == domain.StatusFailed && j.Retryable() && failed == nil:
			failed = j
		}
	}
	h := []domain.Attempt{{At: time.UnixMilli(time.Now().UnixMilli()), Duration: 40 * time.Millisecond, Status: 500}}
	if _, err := s.Finish(ctx, &ports.FinishParams{ID: queued.ID, Status: domain.StatusFailed, Attempts: 1,
		Result: &domain.Result{ResponseStatus: 500, Reason: "boom"}, History: h, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Retry(ctx, &ports.RetryParams{ID: failed.ID, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, queued.ID); err != nil || len(got.History) != 1 {
		t.Fatalf("history of a migrated job after Finish: %+v, %v", got, err)
	}
	checkIndexes(t, s)
	checkListing(t, s, layout2Filters)
	s = reopenMigrated(t, s, dir)
	checkIndexes(t, s)
	checkListing(t, s, layout2Filters)
}

// TestMigrateStartsOverAfterACrash: a migration stopped part way leaves
// layout 2, and the next open migrates from scratch, dropping what the
// stopped one wrote, also when an older build changed jobs in between.
func TestMigrateStartsOverAfterACrash(t *testing.T) {
	dir := copyLayout2(t)
	crashMigration(t, dir, 10, 20, layoutVersionV2)
	// What an older build could do meanwhile: delete a job the stopped
	// migration indexed (records are in id order, so the first one).
	db, err := pebble.Open(dir, &pebble.Options{Logger: zapLogger{zaptestLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefixJob, UpperBound: prefixEnd(prefixJob)})
	if err != nil {
		t.Fatal(err)
	}
	it.First()
	first := append([]byte(nil), it.Key()...)
	gone, _, err := decodeJob(it.Value())
	if err != nil {
		t.Fatal(err)
	}
	// As the layout 2 build's Delete: the record, its key and its
	// ready-index entry (layout 2 keys: lane, then the ready seq).
	del := db.NewBatch()
	for _, k := range [][]byte{first, idemKey(nil, gone.UserID, gone.IdempotentKey),
		binary.BigEndian.AppendUint64(lanePrefix(nil, gone.ReadyQueue), uint64(gone.ReadySeq)),
		expiryKey(nil, storekit.Millis(gone.ExpiresAt), gone.ID)} {
		if err := del.Delete(k, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(it.Close(), del.Commit(pebble.Sync)); err != nil {
		t.Fatal(err)
	}
	if n := len(scanPrefix(t, db, prefixStatus)); n < 20 {
		t.Fatalf("the stopped migration left %d x/ entries, want its first chunks", n)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), Options{Dir: dir, Logger: zaptestLogger(t), migrateChunk: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkIndexes(t, s)
	checkListing(t, s, layout2Filters)
}

// TestRefusesUnknownLayouts: layout 1 and layouts of a newer build are not
// opened.
func TestRefusesUnknownLayouts(t *testing.T) {
	for _, v := range []byte{1, layoutVersion + 1} {
		dir := t.TempDir()
		db, err := pebble.Open(dir, &pebble.Options{Logger: zapLogger{zaptestLogger(t)}})
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(db.Set(keyFormat, []byte{v}, pebble.Sync), db.Close()); err != nil {
			t.Fatal(err)
		}
		if s, err := Open(t.Context(), Options{Dir: dir, Logger: zaptestLogger(t)}); err == nil {
			s.Close()
			t.Fatalf("a store of layout %d was opened", v)
		}
	}
}

// TestMigrateLayout3: a store written by the layout 3 build opens and is
// migrated to layout 4: its jobs are intact, of normal priority and without
// options, the queued jobs and pending deliveries are still ready in their
// lanes in the same order, and new jobs with options work beside them.
func TestMigrateLayout3(t *testing.T) {
	dir := copyLayout3(t)
	if v := storedFormat(t, dir); len(v) != 1 || v[0] != layoutVersionV3 {
		t.Fatalf("fixture has format %v, want layout 3", v)
	}
	// What the layout 3 store holds, read before the migration from its
	// records and its ready index (lane and ready seq from the old keys).
	type entry struct {
		lane  string
		seq   int64
		state byte
	}
	var before []entry
	db, err := pebble.Open(dir, &pebble.Options{Logger: zapLogger{zaptestLogger(t)}, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range scanPrefix(t, db, prefixReady) {
		n, start, ok := readyLane([]byte(k))
		if !ok || uint64(len(k)-start) != n+8 {
			t.Fatalf("fixture ready key %q is not of layout 3", k)
		}
		before = append(before, entry{k[start : start+int(n)], int64(binary.BigEndian.Uint64([]byte(k[start+int(n):]))), v[0]})
	}
	records := len(scanPrefix(t, db, prefixJob))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if len(before) != 28 || records != 44 { // 12 queued, 6 in flight, 10 deliveries; 48 jobs less 4 deleted
		t.Fatalf("fixture: %d ready entries, %d records; want 28 and 44", len(before), records)
	}

	s, err := Open(t.Context(), Options{Dir: dir, Logger: zaptestLogger(t), migrateChunk: 5})
	if err != nil {
		t.Fatalf("open a layout 3 store: %v", err)
	}
	checkIndexes(t, s)
	ctx := t.Context()
	counts, err := s.CountJobs(ctx, &ports.CountJobsParams{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	want := map[domain.Status]int64{domain.StatusQueued: 12, domain.StatusInFlight: 6, domain.StatusCompleted: 10, domain.StatusFailed: 12}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Fatalf("counts after migrating = %v, want %v (the fixture's live jobs)", counts, want)
	}
	c, err := s.Counts(ctx)
	if err != nil || c != (ports.Counts{Queued: 12, InFlight: 6, Deliveries: 10}) {
		t.Fatalf("Counts after migrating = %+v, %v", c, err)
	}
	checkListing(t, s, layout2Filters)
	all := everyJob(t, s)
	history := 0
	for _, j := range all {
		if j.JobOptions != (domain.JobOptions{}) {
			t.Fatalf("job %s from a layout 3 record has options %+v", j.ID, j.JobOptions)
		}
		if j.Body == nil || j.Headers["Content-Type"] != "application/json" {
			t.Fatalf("job %s lost its request: %+v", j.ID, j)
		}
		if len(j.History) > 0 {
			history++
		}
	}
	if history != 6+10+12 { // the requeued jobs and every finished live one
		t.Fatalf("%d jobs kept their history, want 28", history)
	}
	// Every ready entry is still there, of normal priority, in its order.
	for _, lane := range []domain.QueueKey{"a.test:80", "b.test:443", "pool:p1", "a.test:80|acme", "hooks.test:80"} {
		var wantSeqs []int64
		for _, e := range before {
			if e.lane == string(lane) && e.state != stInFlight {
				wantSeqs = append(wantSeqs, e.seq)
			}
		}
		slices.Sort(wantSeqs)
		page, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: lane, Priority: domain.PriorityNormal, Limit: 100, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, j := range page {
			got = append(got, j.ReadySeq)
		}
		if !slices.Equal(got, wantSeqs) {
			t.Fatalf("ListReady(%s) after migrating = %v, want %v", lane, got, wantSeqs)
		}
		if len(got) > 0 {
			if n, err := s.Position(ctx, lane, got[len(got)-1]); err != nil || n != len(got)-1 {
				t.Fatalf("Position in %s = %d, %v; want %d", lane, n, err, len(got)-1)
			}
		}
		if high, _ := s.ListReady(ctx, &ports.ListReadyParams{Queue: lane, Priority: domain.PriorityHigh, Limit: 100, Now: time.Now()}); len(high) != 0 {
			t.Fatalf("migrated jobs of %s are high priority", lane)
		}
	}

	// New jobs, plain and with options, work beside the migrated ones.
	ids := domain.NewIDGenerator(nil)
	mk := func(key string) *domain.Job {
		return domain.NewJob(ids.New(), &domain.JobRequest{UserID: "alice", IdempotentKey: key, Method: "GET", URL: "http://a.test/new"},
			"a.test:80", time.Now())
	}
	plain := mk("new-plain")
	high := mk("new-high")
	high.Priority = domain.PriorityHigh
	later := mk("new-later")
	later.NotBefore = time.UnixMilli(time.Now().Add(time.Minute).UnixMilli())
	later.ReadyQueue, later.ExpiresAt = "", later.NotBefore.Add(domain.QueuedTTL)
	out, err := s.InsertBatch(ctx, []*domain.Job{plain, high, later, mk("key-0")}) // key-0: a migrated job's key
	if err != nil || len(out) != 4 || !out[0].Fresh || !out[1].Fresh || !out[2].Fresh || out[3].Fresh {
		t.Fatalf("InsertBatch after migrating = %+v, %v", out, err)
	}
	if out[0].Job.ReadySeq <= slices.MaxFunc(before, func(a, b entry) int { return int(a.seq - b.seq) }).seq {
		t.Fatalf("a new job's ready seq %d is not after the migrated ones", out[0].Job.ReadySeq)
	}
	if h, _ := s.ListReady(ctx, &ports.ListReadyParams{Queue: "a.test:80", Priority: domain.PriorityHigh, Limit: 10, Now: time.Now()}); len(h) != 1 || h[0].ID != high.ID {
		t.Fatalf("high priority after migrating = %v", h)
	}
	if p, err := s.PromoteDue(ctx, &ports.PromoteParams{Now: time.Now().Add(2 * time.Minute), Limit: 10}); err != nil || len(p) != 1 || p[0].ID != later.ID {
		t.Fatalf("PromoteDue after migrating = %v, %v", p, err)
	}
	checkIndexes(t, s)
	s = reopenMigrated(t, s, dir)
	checkIndexes(t, s)
}

// TestMigrateLayout3AfterACrash: a migration to layout 4 stopped part way
// leaves layout 3 with some ready keys converted; the next open converts
// the rest and leaves every entry exactly once.
func TestMigrateLayout3AfterACrash(t *testing.T) {
	dir := copyLayout3(t)
	crashMigration(t, dir, 10, 20, layoutVersionV3)
	s, err := Open(t.Context(), Options{Dir: dir, Logger: zaptestLogger(t), migrateChunk: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkIndexes(t, s)
	if c, err := s.Counts(t.Context()); err != nil || c != (ports.Counts{Queued: 12, InFlight: 6, Deliveries: 10}) {
		t.Fatalf("Counts after the second migration = %+v, %v", c, err)
	}
}

// TestMigrateLayout4: a store written by the layout 4 build opens and is
// migrated to layout 5: the expiry entries of its waiting jobs (queued,
// scheduled, in flight, delivering) are under w/ and the others still
// under e/ (checkIndexes), and the deliveries counter holds every pending
// delivery, the two expired ones included, so Counts (which leaves those
// out) answers what the layout 4 build's Counts did, and keeps answering
// right as deliveries finish and new ones start.
func TestMigrateLayout4(t *testing.T) {
	dir := copyLayout4(t)
	if v := storedFormat(t, dir); len(v) != 1 || v[0] != layoutVersionV4 {
		t.Fatalf("fixture has format %v, want layout 4", v)
	}
	s, err := Open(t.Context(), Options{Dir: dir, Logger: zaptestLogger(t)})
	if err != nil {
		t.Fatalf("open a layout 4 store: %v", err)
	}
	ctx := t.Context()
	checkIndexes(t, s) // the deliveries counter among them
	if n := counterValue(t, s, deliveries); n != 12 {
		t.Fatalf("deliveries counter after migrating = %d, want 12 (10 live, 2 expired)", n)
	}
	// What genlayout4 printed, from the layout 4 build's Counts.
	want := ports.Counts{Queued: 12, InFlight: 6, Deliveries: 10}
	if c, err := s.Counts(ctx); err != nil || c != want {
		t.Fatalf("Counts after migrating = %+v, %v; want %+v", c, err, want)
	}
	counts, err := s.CountJobs(ctx, &ports.CountJobsParams{Now: time.Now()})
	wantJobs := map[domain.Status]int64{domain.StatusQueued: 12, domain.StatusInFlight: 6, domain.StatusCompleted: 10, domain.StatusFailed: 12}
	if err != nil || fmt.Sprint(counts) != fmt.Sprint(wantJobs) {
		t.Fatalf("CountJobs after migrating = %v, %v; want %v", counts, err, wantJobs)
	}
	// A migrated delivery finishes; a new job's starts.
	page, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: "hooks.test:80", Priority: domain.PriorityHigh, Limit: 1, Now: time.Now()})
	if err != nil || len(page) != 1 {
		t.Fatalf("ListReady(hooks.test:80) = %v, %v", page, err)
	}
	if err := s.FinishDelivery(ctx, &ports.FinishDeliveryParams{ID: page[0].ID, Delivered: true, Attempts: 1, Response: 204, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	j := domain.NewJob(domain.NewIDGenerator(nil).New(), &domain.JobRequest{UserID: "alice", IdempotentKey: "new", Method: "GET",
		URL: "http://a.test/new", WebhookURL: "http://hooks.test/h"}, "a.test:80", time.Now())
	if _, _, err := s.Insert(ctx, j); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Attempts: 1, Now: time.Now(), DeliverIn: "hooks.test:80"}); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Counts(ctx); err != nil || c != want {
		t.Fatalf("Counts after one delivery finished and one started = %+v, %v; want %+v", c, err, want)
	}
	checkIndexes(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := storedFormat(t, dir); len(v) != 1 || v[0] != layoutVersion {
		t.Fatalf("format after migrating = %v, want %d", v, layoutVersion)
	}
	s, err = Open(ctx, Options{Dir: dir, Logger: zaptestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if c, err := s.Counts(ctx); err != nil || c != want {
		t.Fatalf("Counts after reopening = %+v, %v; want %+v", c, err, want)
	}
	checkIndexes(t, s)
}

// counterValue reads one c/ counter of an open store.
func counterValue(t *testing.T, s *Store, c counter) int64 {
	t.Helper()
	v, err := get(s.db, countKey(nil, c.dim, c.value, c.st))
	if err != nil {
		t.Fatal(err)
	}
	n, ok := parseCount(v)
	if !ok {
		t.Fatalf("counter %v = %x", c, v)
	}
	return n
}

// TestMigrateLayout4AfterACrash: a migration to layout 5 stopped part way
// leaves layout 4 with some expiry entries moved to w/; the next open moves
// the rest, counts the deliveries afresh and leaves every entry once.
func TestMigrateLayout4AfterACrash(t *testing.T) {
	dir := copyLayout4(t)
	crashMigration(t, dir, 5, 15, layoutVersionV4)
	db, err := pebble.Open(dir, &pebble.Options{Logger: zapLogger{zaptestLogger(t)}, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(scanPrefix(t, db, prefixWait)); n != 15 {
		t.Fatalf("the stopped migration moved %d expiry entries, want its first 3 chunks (15)", n)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), Options{Dir: dir, Logger: zaptestLogger(t), migrateChunk: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkIndexes(t, s)
	if c, err := s.Counts(t.Context()); err != nil || c != (ports.Counts{Queued: 12, InFlight: 6, Deliveries: 10}) {
		t.Fatalf("Counts after the second migration = %+v, %v", c, err)
	}
}

// copyLayout5 copies the layout 5 fixture (testdata/genlayout5).
func copyLayout5(t *testing.T) string { return copyFixture(t, "testdata/layout5") }

// layout5Body is the request body genlayout5 gave job i (its bodyOf).
func layout5Body(i int) []byte {
	switch i % 4 {
	case 0:
		return []byte(strings.Repeat(fmt.Sprintf("%04d", i), 256))
	case 1:
		return []byte(`{"i":5}`)
	case 2:
		return nil
	}
	return []byte{}
}

// checkLayout5Bodies fails unless every live job of the layout 5 fixture
// in s reads with the body genlayout5 gave it, nil and empty told apart.
func checkLayout5Bodies(t *testing.T, s *Store) []*domain.Job {
	t.Helper()
	all := everyJob(t, s)
	for _, j := range all {
		var i int
		if _, err := fmt.Sscanf(j.IdempotentKey, "key-%d", &i); err != nil {
			t.Fatalf("job %s has key %q", j.ID, j.IdempotentKey)
		}
		if want := layout5Body(i); !bytes.Equal(j.Body, want) || (j.Body == nil) != (want == nil) {
			t.Fatalf("job %d has body %q (nil %v), want %q (nil %v)", i, j.Body, j.Body == nil, want, want == nil)
		}
	}
	return all
}

// TestMigrateLayout5: a store written by the layout 5 build opens and is
// migrated to layout 6 by its format key alone: its version 3 records,
// bodies inline, stay byte for byte and read with their bodies. A write
// to such a job rewrites its record as version 4 and moves a body longer
// than maxInlineBody out to b/ (once: the writes after that leave it
// there; a short one stays in the record); deletes and purges leave no
// body behind, of old records or new.
func TestMigrateLayout5(t *testing.T) {
	dir := copyLayout5(t)
	if v := storedFormat(t, dir); len(v) != 1 || v[0] != layoutVersionV5 {
		t.Fatalf("fixture has format %v, want layout 5", v)
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: zapLogger{zaptestLogger(t)}, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	records := scanPrefix(t, db, prefixJob)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if len(records) != 44 {
		t.Fatalf("fixture holds %d records, want 44", len(records))
	}
	for k, v := range records {
		if v[0] != recordVersionV3 {
			t.Fatalf("fixture record %q is of version %d", k, v[0])
		}
	}

	s, err := Open(t.Context(), Options{Dir: dir, Logger: zaptestLogger(t)})
	if err != nil {
		t.Fatalf("open a layout 5 store: %v", err)
	}
	ctx := t.Context()
	after := scanPrefix(t, s.db, prefixJob)
	if len(after) != len(records) || bodyKeys(t, s) != 0 {
		t.Fatalf("migrating changed the records: %d records, %d body keys", len(after), bodyKeys(t, s))
	}
	for k, v := range records {
		if after[k] != v {
			t.Fatalf("migrating rewrote record %q", k)
		}
	}
	checkIndexes(t, s)
	// What genlayout5 printed, from the layout 5 build's Counts.
	want := ports.Counts{Queued: 12, InFlight: 6, Deliveries: 10}
	if c, err := s.Counts(ctx); err != nil || c != want {
		t.Fatalf("Counts after migrating = %+v, %v; want %+v", c, err, want)
	}
	checkListing(t, s, layout2Filters)
	all := checkLayout5Bodies(t, s)

	// One write to every live job but one (v3, with a body), each by its
	// state; two to the queued jobs, whose bodies are under b/ after the
	// first.
	var moved []*domain.Job
	var v3 *domain.Job
	now := time.Now()
	for _, j := range all {
		var err error
		switch {
		case v3 == nil && len(j.Body) > maxInlineBody:
			v3 = j
			continue
		case j.Status == domain.StatusQueued && j.Scheduled():
			_, err = s.Finish(ctx, &ports.FinishParams{ID: j.ID, Status: domain.StatusFailed, Attempts: j.Attempts,
				Result: &domain.Result{Reason: domain.ReasonCanceled}, Now: now})
		case j.Status == domain.StatusQueued:
			if err = s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: j.ID, At: now}); err == nil {
				err = s.Requeue(ctx, &ports.RequeueParams{ID: j.ID, Phase: domain.PhaseDispatch, Attempts: j.Attempts + 1, Now: now})
			}
		case j.Status == domain.StatusInFlight:
			err = s.Requeue(ctx, &ports.RequeueParams{ID: j.ID, Phase: domain.PhaseDispatch, Attempts: j.Attempts, Now: now})
		case j.ReadyQueue != "":
			err = s.FinishDelivery(ctx, &ports.FinishDeliveryParams{ID: j.ID, Delivered: true, Attempts: 1, Response: 204, Now: now})
		case j.Retryable():
			var r *domain.Job
			if r, err = s.Retry(ctx, &ports.RetryParams{ID: j.ID, Now: now}); err == nil && !bytes.Equal(r.Body, j.Body) {
				t.Fatalf("Retry of a migrated job returned body %q, want %q", r.Body, j.Body)
			}
		default:
			continue
		}
		if err != nil {
			t.Fatalf("write to migrated job %s (%s): %v", j.ID, j.Status, err)
		}
		moved = append(moved, j)
	}
	if len(moved) < 30 {
		t.Fatalf("only %d of %d migrated jobs were written", len(moved), len(all))
	}
	wantKeys := 0
	for _, j := range moved {
		rec := rawRecord(t, s, j.ID)
		if rec[0] != recordVersion {
			t.Fatalf("record of a rewritten job is of version %d", rec[0])
		}
		if len(j.Body) > maxInlineBody {
			wantKeys++
			if bytes.Contains(rec, j.Body) {
				t.Fatalf("the rewritten record of %s still holds its body", j.ID)
			}
		}
	}
	if n := bodyKeys(t, s); n != wantKeys {
		t.Fatalf("%d body keys after the writes, want %d (the rewritten jobs with a long body)", n, wantKeys)
	}
	checkIndexes(t, s)
	checkLayout5Bodies(t, s)
	checkListing(t, s, layout2Filters)

	// Deletes of a moved job and of a job still in version 3, then a purge
	// of everything (the fixture's expired jobs are version 3 records).
	if rawRecord(t, s, v3.ID)[0] != recordVersionV3 {
		t.Fatal("the job left alone was rewritten")
	}
	i := slices.IndexFunc(moved, func(j *domain.Job) bool { return len(j.Body) > maxInlineBody })
	for _, id := range []domain.JobID{moved[i].ID, v3.ID} {
		if err := s.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := bodyKeys(t, s); n != wantKeys-1 {
		t.Fatalf("%d body keys after deleting one moved job, want %d", n, wantKeys-1)
	}
	checkIndexes(t, s)
	s = reopenMigrated(t, s, dir)
	checkLayout5Bodies(t, s)
	checkIndexes(t, s)
	for {
		n, err := s.Purge(ctx, &ports.PurgeParams{Now: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if n, recs := bodyKeys(t, s), len(scanPrefix(t, s.db, prefixJob)); n != 0 || recs != 0 {
		t.Fatalf("after purging everything: %d body keys, %d records", n, recs)
	}
	checkIndexes(t, s)
}

// reopenMigrated closes s, a store a test migrated, checks that dir holds
// the current layout, and opens it again, failing if that migrates it a
// second time. The store returned is closed when the test ends.
func reopenMigrated(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := storedFormat(t, dir); len(v) != 1 || v[0] != layoutVersion {
		t.Fatalf("format after migrating = %v, want %d", v, layoutVersion)
	}
	s, err := Open(t.Context(), Options{Dir: dir, Logger: zaptestLogger(t),
		migrateHook: func(int) error { return errors.New("a migrated store was migrated again") }, migrateChunk: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// crashMigration opens the store in dir with a migration of chunk-sized
// batches that stops once at jobs done, as a crash would, and checks that
// the store is still at layout was.
func crashMigration(t *testing.T, dir string, chunk, at int, was byte) {
	t.Helper()
	crash := errors.New("crash")
	_, err := Open(t.Context(), Options{Dir: dir, Logger: zaptestLogger(t), migrateChunk: chunk,
		migrateHook: func(done int) error {
			if done == at {
				return crash
			}
			return nil
		}})
	if !errors.Is(err, crash) {
		t.Fatalf("open with a migration stopped part way = %v", err)
	}
	if v := storedFormat(t, dir); len(v) != 1 || v[0] != was {
		t.Fatalf("format after a stopped migration = %v, want layout %d", v, was)
	}
}
