package pebble

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// rawRecord reads the stored record of a job, as bytes.
func rawRecord(t *testing.T, s *Store, id domain.JobID) []byte {
	t.Helper()
	v, err := get(s.db, jobKey(nil, id))
	if err != nil || v == nil {
		t.Fatalf("record of %s: %q, %v", id, v, err)
	}
	return v
}

// bodyKeys counts the keys under b/.
func bodyKeys(t *testing.T, s *Store) int {
	t.Helper()
	return len(scanPrefix(t, s.db, prefixBody))
}

// TestBodyIsWrittenOnce: a job's request body is written under b/ by the
// insert and never again — no lifecycle write puts it in the record or
// rewrites its key — every read returns it, and deleting or purging the
// job, or an insert taking an expired job's key, deletes it with the
// record. Jobs with a short body (at most maxInlineBody bytes), an empty
// one or none write no body key, and read back as they were stored (nil
// and empty told apart).
func TestBodyIsWrittenOnce(t *testing.T) {
	s, err := Open(t.Context(), Options{Dir: t.TempDir(), Logger: zaptestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	body := bytes.Repeat([]byte("the body of one job, 0123456789."), 32) // 1 KiB
	j := storetest.NewJob("u", "k", "a.test:80")
	j.Body = body
	stored, _, err := s.Insert(ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string) {
		t.Helper()
		if rec := rawRecord(t, s, stored.ID); rec[0] != recordVersion || bytes.Contains(rec, body[:64]) {
			t.Fatalf("after %s: the record (version %d, %d bytes) holds the body", step, rec[0], len(rec))
		}
		v, err := get(s.db, bodyKey(nil, stored.ID))
		if err != nil || !bytes.Equal(v, body) {
			t.Fatalf("after %s: the body key holds %d bytes, %v", step, len(v), err)
		}
		got, err := s.Get(ctx, stored.ID)
		if err != nil || !bytes.Equal(got.Body, body) {
			t.Fatalf("after %s: Get = %+v, %v", step, got, err)
		}
		if n := bodyKeys(t, s); n != 1 {
			t.Fatalf("after %s: %d body keys, want 1", step, n)
		}
		checkIndexes(t, s)
	}
	check("Insert")
	if page, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: "a.test:80", Priority: domain.PriorityNormal, Limit: 10,
		Now: time.Now()}); err != nil || len(page) != 1 || !bytes.Equal(page[0].Body, body) {
		t.Fatalf("ListReady = %+v, %v", page, err)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"MarkInFlight", func() error { return s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: stored.ID, At: time.Now()}) }},
		{"Requeue", func() error {
			return s.Requeue(ctx, &ports.RequeueParams{ID: stored.ID, Phase: domain.PhaseDispatch, Attempts: 1, Now: time.Now()})
		}},
		{"MarkInFlight again", func() error { return s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: stored.ID, At: time.Now()}) }},
		{"Finish", func() error {
			_, err := s.Finish(ctx, &ports.FinishParams{ID: stored.ID, Status: domain.StatusCompleted, Attempts: 2,
				Result: &domain.Result{ResponseStatus: 200, Body: []byte("done")}, Now: time.Now(), DeliverIn: "hooks.test:80"})
			return err
		}},
		{"FinishDelivery", func() error {
			return s.FinishDelivery(ctx, &ports.FinishDeliveryParams{ID: stored.ID, Delivered: true, Attempts: 1, Response: 204, Now: time.Now()})
		}},
		{"Retry", func() error {
			r, err := s.Retry(ctx, &ports.RetryParams{ID: stored.ID, Now: time.Now()})
			if err == nil && !bytes.Equal(r.Body, body) {
				err = fmt.Errorf("Retry returned body %q", r.Body)
			}
			return err
		}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		check(st.name)
	}
	// Listing and the lookup by key return the body too.
	if page, err := s.ListJobs(ctx, &ports.ListJobsParams{Limit: 10, Now: time.Now()}); err != nil || len(page) != 1 || !bytes.Equal(page[0].Body, body) {
		t.Fatalf("ListJobs = %+v, %v", page, err)
	}
	if got, err := s.Lookup(ctx, "u", "k"); err != nil || !bytes.Equal(got.Body, body) {
		t.Fatalf("Lookup = %+v, %v", got, err)
	}
	if err := s.Delete(ctx, stored.ID); err != nil {
		t.Fatal(err)
	}
	if n := bodyKeys(t, s); n != 0 {
		t.Fatalf("%d body keys after Delete, want 0", n)
	}

	// Short, empty and missing bodies write no key and keep their nil-ness.
	for i, b := range [][]byte{nil, {}, []byte(`{"n":1}`), bytes.Repeat([]byte("x"), maxInlineBody)} {
		j := storetest.NewJob("u", fmt.Sprint("short-", i), "a.test:80")
		j.Body = b
		stored, _, err := s.Insert(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: stored.ID, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, stored.ID)
		if err != nil || !bytes.Equal(got.Body, b) || (got.Body == nil) != (b == nil) {
			t.Fatalf("job stored with body %#v reads back %#v, %v", b, got.Body, err)
		}
	}
	if n := bodyKeys(t, s); n != 0 {
		t.Fatalf("%d body keys for jobs without a long body, want 0", n)
	}

	// An expired job gives up its key, and its body goes with it; a purge
	// takes the next one's.
	oldBody, newBody := bytes.Repeat([]byte("old body "), 10), bytes.Repeat([]byte("new body "), 10)
	old := storetest.NewJob("u", "reused", "a.test:80")
	old.Body, old.ExpiresAt = oldBody, time.Now().Add(-time.Minute)
	if _, _, err := s.Insert(ctx, old); err != nil {
		t.Fatal(err)
	}
	next := storetest.NewJob("u", "reused", "a.test:80")
	next.Body, next.ExpiresAt = newBody, time.Now().Add(time.Second)
	if _, fresh, err := s.Insert(ctx, next); err != nil || !fresh {
		t.Fatalf("insert over an expired job: fresh %v, %v", fresh, err)
	}
	if keys := scanPrefix(t, s.db, prefixBody); len(keys) != 1 || keys[string(bodyKey(nil, next.ID))] != string(newBody) {
		t.Fatalf("body keys after the expired job's key was taken: %q", keys)
	}
	if n, err := s.Purge(ctx, &ports.PurgeParams{Now: time.Now().Add(3 * domain.QueuedTTL), Limit: 100}); err != nil || n != 5 {
		t.Fatalf("Purge = %d, %v; want the five jobs", n, err)
	}
	if n := bodyKeys(t, s); n != 0 {
		t.Fatalf("%d body keys after Purge, want 0", n)
	}
	checkIndexes(t, s)
}

// TestGetOfAJobDeletedMeanwhile: a job deleted between the read of its
// record and that of its body reads as gone, not as a corrupt store; a
// record whose body key is missing while the record stays is corrupt.
func TestGetOfAJobDeletedMeanwhile(t *testing.T) {
	s, err := Open(t.Context(), Options{Dir: t.TempDir(), Logger: zaptestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j := storetest.NewJob("u", "k", "a.test:80")
	j.Body = bytes.Repeat([]byte("b"), 1000)
	if _, _, err := s.Insert(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	rec := rawRecord(t, s, j.ID)
	// A getter that serves the record as it was and everything else from
	// the store: the record read first, then the job deleted.
	if err := s.Delete(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	got, err := loadJob(&staleRecord{s, jobKey(nil, j.ID), rec, 1}, j.ID)
	if err != nil || got != nil {
		t.Fatalf("load of a job deleted after its record was read = %+v, %v; want none", got, err)
	}
	// The record stays, its body is gone: corrupt.
	if err := s.db.Set(jobKey(nil, j.ID), rec, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), j.ID); domain.CodeOf(err) != domain.CodeUnavailable {
		t.Fatalf("Get of a record without its body = %v, want unavailable", err)
	}
}

// staleRecord is a getter that answers the first n reads of key with rec,
// and every other read from the store.
type staleRecord struct {
	s   *Store
	key []byte
	rec []byte
	n   int
}

func (g *staleRecord) Get(k []byte) ([]byte, io.Closer, error) {
	if g.n > 0 && bytes.Equal(k, g.key) {
		g.n--
		return g.rec, io.NopCloser(nil), nil
	}
	return g.s.db.Get(k)
}
