package pebble

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// copyLayout2 copies the layout 2 fixture (testdata/genlayout2 says how it
// was written) into a new directory: opening it migrates it in place.
func copyLayout2(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir("testdata/layout2")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("testdata/layout2", e.Name()))
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
// migrated to layout 3, lists and counts exactly, takes writes, and opens
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
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := storedFormat(t, dir); len(v) != 1 || v[0] != layoutVersion {
		t.Fatalf("format after migrating = %v, want %d", v, layoutVersion)
	}
	s, err = Open(t.Context(), Options{Dir: dir, Logger: zaptestLogger(t),
		migrateHook: func(int) error { return errors.New("a layout 3 store was migrated again") }, migrateChunk: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkIndexes(t, s)
	checkListing(t, s, layout2Filters)
}

// TestMigrateStartsOverAfterACrash: a migration stopped part way leaves
// layout 2, and the next open migrates from scratch, dropping what the
// stopped one wrote, also when an older build changed jobs in between.
func TestMigrateStartsOverAfterACrash(t *testing.T) {
	dir := copyLayout2(t)
	crash := errors.New("crash")
	_, err := Open(t.Context(), Options{Dir: dir, Logger: zaptestLogger(t), migrateChunk: 10,
		migrateHook: func(done int) error {
			if done == 20 {
				return crash
			}
			return nil
		}})
	if !errors.Is(err, crash) {
		t.Fatalf("open with a migration stopped part way = %v", err)
	}
	if v := storedFormat(t, dir); len(v) != 1 || v[0] != layoutVersionV2 {
		t.Fatalf("format after a stopped migration = %v, want layout 2", v)
	}
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
	if err := errors.Join(it.Close(), db.Delete(first, pebble.Sync)); err != nil {
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
