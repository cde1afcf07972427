// Package storetest is the contract every ports.JobStore backend must pass.
// Each backend's tests call Exercise with a constructor that returns a fresh,
// empty store; the suite closes it.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// NewStore returns a fresh, empty store for one subtest.
type NewStore func(t *testing.T) ports.JobStore

var ids = domain.NewIDGenerator(nil)

// NewJob returns a queued forward job for tests, created now.
func NewJob(user, key, lane string) *domain.Job {
	now := time.Now()
	return domain.NewJob(ids.New(), &domain.JobRequest{
		UserID: user, IdempotentKey: key, URL: "http://" + lane + "/x", Method: "POST",
		Headers: map[string]string{"Content-Type": "application/json", "Authorization": "Bearer t"},
		Body:    `{"n":1}`, WebhookURL: "http://hooks.test/h",
	}, domain.LaneKey(lane), now)
}

// Exercise runs the whole contract against stores made by newStore.
func Exercise(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s ports.JobStore)
	}{
		{"InsertAndGet", testInsertAndGet},
		{"DuplicateReturnsExisting", testDuplicate},
		{"KindSeparatesKeys", testKindSeparatesKeys},
		{"ConcurrentUniqueKeysAllFresh", testConcurrentUnique},
		{"ConcurrentSameKeyExactlyOneFresh", testConcurrentSameKey},
		{"GetUnknownAndExpired", testGetUnknownAndExpired},
		{"ExpiredKeyIsReplaced", testExpiredKeyReplaced},
		{"DeleteFreesKey", testDeleteFreesKey},
		{"MarkInFlightAndRequeue", testMarkInFlightAndRequeue},
		{"FinishWithFollowUp", testFinishWithFollowUp},
		{"FinishUnknown", testFinishUnknown},
		{"ListQueuedIsCommitOrderedPaging", testListQueued},
		{"SeqFollowsCommitOrder", testSeqCommitOrder},
		{"QueuedLanes", testQueuedLanes},
		{"RecoverInFlight", testRecoverInFlight},
		{"ResetStale", testResetStale},
		{"PurgeExpiredInBatches", testPurge},
		{"Counts", testCounts},
		{"RoundTripsBinaryBodies", testBinaryRoundTrip},
		{"ClosedStoreFails", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

func ctx(t *testing.T) context.Context { return t.Context() }

func mustInsert(t *testing.T, s ports.JobStore, j *domain.Job) *domain.Job {
	t.Helper()
	stored, fresh, err := s.Insert(ctx(t), j)
	if err != nil {
		t.Fatalf("Insert: %v", err)
	}
	if !fresh {
		t.Fatalf("Insert(%s/%s): not fresh", j.UserID, j.IdempotentKey)
	}
	if stored.Seq <= 0 {
		t.Fatalf("Insert: Seq = %d, want > 0", stored.Seq)
	}
	return stored
}

func mustGet(t *testing.T, s ports.JobStore, id domain.JobID) *domain.Job {
	t.Helper()
	j, err := s.Get(ctx(t), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return j
}

func testInsertAndGet(t *testing.T, s ports.JobStore) {
	j := NewJob("u1", "k1", "a.test:80")
	j.PoolID, j.URL = "readers", "" // pool jobs must keep their pool_id through storage
	mustInsert(t, s, j)
	got := mustGet(t, s, j.ID)
	if got.UserID != "u1" || got.IdempotentKey != "k1" || got.PoolID != "readers" || got.Method != "POST" ||
		got.Status != domain.StatusQueued || got.Kind != domain.KindForward || got.Lane != "a.test:80" ||
		got.WebhookURL != "http://hooks.test/h" || string(got.Body) != `{"n":1}` ||
		got.Headers["Authorization"] != "Bearer t" || got.CreatedAt.UnixMilli() != j.CreatedAt.UnixMilli() {
		t.Fatalf("Get returned %+v, want the inserted job", got)
	}
	if got.Result != nil {
		t.Fatalf("queued job has a result: %+v", got.Result)
	}
}

func testDuplicate(t *testing.T, s ports.JobStore) {
	first := mustInsert(t, s, NewJob("u1", "same", "a.test:80"))
	second := NewJob("u1", "same", "a.test:80")
	stored, fresh, err := s.Insert(ctx(t), second)
	if err != nil || fresh {
		t.Fatalf("duplicate Insert: fresh=%v err=%v", fresh, err)
	}
	if stored.ID != first.ID {
		t.Fatalf("duplicate returned id %s, want %s", stored.ID, first.ID)
	}
	if _, err := s.Get(ctx(t), second.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("the rejected duplicate was stored: %v", err)
	}
	// Another user may use the same key.
	mustInsert(t, s, NewJob("u2", "same", "a.test:80"))
	// Keys that collide under the legacy "user:key" hash are distinct.
	mustInsert(t, s, NewJob("a:b", "c", "a.test:80"))
	mustInsert(t, s, NewJob("a", "b:c", "a.test:80"))
}

func testKindSeparatesKeys(t *testing.T, s ports.JobStore) {
	mustInsert(t, s, NewJob("u1", "webhook:x", "a.test:80"))
	w := NewJob("u1", "webhook:x", "hooks.test:80")
	w.Kind = domain.KindWebhook
	mustInsert(t, s, w)
}

func testConcurrentUnique(t *testing.T, s ports.JobStore) {
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, fresh, err := s.Insert(context.Background(), NewJob("u", fmt.Sprintf("k%d", i), "a.test:80"))
			if err != nil || !fresh {
				errs <- fmt.Errorf("key %d: fresh=%v err=%v", i, fresh, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c, err := s.Counts(ctx(t))
	if err != nil || c.Queued != n {
		t.Fatalf("Counts = %+v, %v; want %d queued", c, err, n)
	}
}

func testConcurrentSameKey(t *testing.T, s ports.JobStore) {
	const n = 50
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fresh int
		idSet = map[domain.JobID]bool{}
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stored, f, err := s.Insert(context.Background(), NewJob("u", "raced", "a.test:80"))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if f {
				fresh++
			}
			idSet[stored.ID] = true
		}()
	}
	wg.Wait()
	if fresh != 1 || len(idSet) != 1 {
		t.Fatalf("%d goroutines raced one key: %d fresh, %d distinct ids; want 1 and 1", n, fresh, len(idSet))
	}
}

func testGetUnknownAndExpired(t *testing.T, s ports.JobStore) {
	if _, err := s.Get(ctx(t), "00000000000000000000000000000000"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Get(unknown) = %v, want ErrNotFound", err)
	}
	j := NewJob("u", "old", "a.test:80")
	j.ExpiresAt = time.Now().Add(-time.Second)
	mustInsert(t, s, j)
	if _, err := s.Get(ctx(t), j.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Get(expired) = %v, want ErrNotFound", err)
	}
}

func testExpiredKeyReplaced(t *testing.T, s ports.JobStore) {
	old := NewJob("u", "reuse", "a.test:80")
	old.ExpiresAt = time.Now().Add(-time.Second)
	mustInsert(t, s, old)
	fresh := mustInsert(t, s, NewJob("u", "reuse", "a.test:80"))
	if fresh.ID == old.ID {
		t.Fatal("expired job was returned as a duplicate")
	}
}

func testDeleteFreesKey(t *testing.T, s ports.JobStore) {
	j := mustInsert(t, s, NewJob("u", "del", "a.test:80"))
	if err := s.Delete(ctx(t), j.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctx(t), j.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
	}
	again := mustInsert(t, s, NewJob("u", "del", "a.test:80")) // the index entry went with the row
	if again.ID == j.ID {
		t.Fatal("re-insert returned the deleted id")
	}
	if err := s.Delete(ctx(t), j.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Delete(deleted) = %v, want ErrNotFound", err)
	}
	c, _ := s.Counts(ctx(t))
	if c.Queued != 1 {
		t.Fatalf("Counts.Queued = %d after delete and re-insert, want 1", c.Queued)
	}
}

// flush waits until fire-and-forget writes issued before it are visible:
// a synchronous write issued after them commits after them.
func flush(t *testing.T, s ports.JobStore) {
	t.Helper()
	if _, _, err := s.Insert(ctx(t), NewJob("flush", fmt.Sprint(time.Now().UnixNano()), "flush.test:80")); err != nil {
		t.Fatalf("flush insert: %v", err)
	}
}

func testMarkInFlightAndRequeue(t *testing.T, s ports.JobStore) {
	j := mustInsert(t, s, NewJob("u", "run", "a.test:80"))
	at := time.Now()
	if err := s.MarkInFlight(ctx(t), &ports.MarkInFlightParams{ID: j.ID, At: at}); err != nil {
		t.Fatalf("MarkInFlight: %v", err)
	}
	flush(t, s)
	got := mustGet(t, s, j.ID)
	if got.Status != domain.StatusInFlight || got.DispatchedAt.UnixMilli() != at.UnixMilli() {
		t.Fatalf("after MarkInFlight: status=%s dispatched=%v", got.Status, got.DispatchedAt)
	}
	if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: j.ID, Attempts: 2, Now: time.Now()}); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	got = mustGet(t, s, j.ID)
	if got.Status != domain.StatusQueued || got.Attempts != 2 {
		t.Fatalf("after Requeue: status=%s attempts=%d", got.Status, got.Attempts)
	}
	if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: "ffffffffffffffffffffffffffffffff", Now: time.Now()}); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Requeue(unknown) = %v, want ErrNotFound", err)
	}
}

func webhookFor(j *domain.Job) *domain.Job {
	w := NewJob(j.UserID, "webhook:"+string(j.ID), "hooks.test:80")
	w.Kind, w.ParentID, w.WebhookURL = domain.KindWebhook, j.ID, ""
	return w
}

func testFinishWithFollowUp(t *testing.T, s ports.JobStore) {
	j := mustInsert(t, s, NewJob("u", "fin", "a.test:80"))
	res := &domain.Result{ResponseStatus: 201, Body: []byte("created"), ContentType: "text/plain", BodyTruncated: true}
	f, fresh, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Attempts: 1,
		Result: res, Now: time.Now(), FollowUp: webhookFor(j)})
	if err != nil || !fresh || f == nil || f.Seq <= j.Seq {
		t.Fatalf("Finish: followUp=%+v fresh=%v err=%v", f, fresh, err)
	}
	got := mustGet(t, s, j.ID)
	if got.Status != domain.StatusCompleted || got.Attempts != 1 || got.Result == nil ||
		got.Result.ResponseStatus != 201 || string(got.Result.Body) != "created" || !got.Result.BodyTruncated ||
		got.Result.ContentType != "text/plain" {
		t.Fatalf("finished job = %+v result %+v", got, got.Result)
	}
	if !got.ExpiresAt.After(time.Now().Add(domain.CompletedTTL - time.Minute)) {
		t.Fatalf("completed expiry %v not reset to ~%v", got.ExpiresAt, domain.CompletedTTL)
	}
	w := mustGet(t, s, f.ID)
	if w.Kind != domain.KindWebhook || w.ParentID != j.ID || w.Status != domain.StatusQueued {
		t.Fatalf("follow-up = %+v", w)
	}
	// Finishing again (a re-dispatch after a crash) must not enqueue a second webhook.
	f2, fresh, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Status: domain.StatusFailed, Attempts: 5,
		Result: &domain.Result{Reason: "upstream returned 503", ResponseStatus: 503}, Now: time.Now(), FollowUp: webhookFor(j)})
	if err != nil || fresh || f2.ID != f.ID {
		t.Fatalf("second Finish: followUp=%v fresh=%v err=%v; want the existing webhook, not fresh", f2, fresh, err)
	}
	got = mustGet(t, s, j.ID)
	if got.Status != domain.StatusFailed || got.Result.Reason != "upstream returned 503" {
		t.Fatalf("failed job = %+v %+v", got, got.Result)
	}
}

func testFinishUnknown(t *testing.T, s ports.JobStore) {
	ghost := NewJob("u", "ghost", "a.test:80")
	_, _, err := s.Finish(ctx(t), &ports.FinishParams{ID: ghost.ID, Status: domain.StatusCompleted, Now: time.Now(),
		FollowUp: webhookFor(ghost)})
	if !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Finish(unknown) = %v, want ErrNotFound", err)
	}
	c, _ := s.Counts(ctx(t))
	if c.Total() != 0 {
		t.Fatalf("Finish(unknown) inserted its follow-up: counts %+v", c)
	}
}

func testListQueued(t *testing.T, s ports.JobStore) {
	var lane []*domain.Job
	for i := range 7 {
		lane = append(lane, mustInsert(t, s, NewJob("u", fmt.Sprintf("l%d", i), "a.test:80")))
		mustInsert(t, s, NewJob("u", fmt.Sprintf("o%d", i), "b.test:80"))
	}
	if err := s.MarkInFlight(ctx(t), &ports.MarkInFlightParams{ID: lane[1].ID, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	flush(t, s)
	p := &ports.ListQueuedParams{Lane: "a.test:80", Limit: 3, Now: time.Now()}
	var got []domain.JobID
	for {
		page, err := s.ListQueued(ctx(t), p)
		if err != nil {
			t.Fatalf("ListQueued: %v", err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 3 {
			t.Fatalf("page of %d, limit 3", len(page))
		}
		for _, j := range page {
			if j.Lane != "a.test:80" || j.Status != domain.StatusQueued {
				t.Fatalf("ListQueued returned %s in lane %s status %s", j.ID, j.Lane, j.Status)
			}
			got = append(got, j.ID)
			p.AfterSeq = j.Seq
		}
	}
	want := []domain.JobID{lane[0].ID, lane[2].ID, lane[3].ID, lane[4].ID, lane[5].ID, lane[6].ID}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("paged %v, want %v (FIFO, in-flight skipped)", got, want)
	}
}

func testSeqCommitOrder(t *testing.T, s ports.JobStore) {
	var last int64
	for i := range 20 {
		j := mustInsert(t, s, NewJob("u", fmt.Sprintf("s%d", i), "a.test:80"))
		if j.Seq <= last {
			t.Fatalf("Seq %d after %d: not increasing", j.Seq, last)
		}
		last = j.Seq
	}
	// A purged highest row must not let its Seq be reused.
	top := NewJob("u", "top", "a.test:80")
	top.ExpiresAt = time.Now().Add(-time.Second)
	topStored := mustInsert(t, s, top)
	if _, err := s.Purge(ctx(t), &ports.PurgeParams{Now: time.Now(), Limit: 100}); err != nil {
		t.Fatal(err)
	}
	next := mustInsert(t, s, NewJob("u", "after-top", "a.test:80"))
	if next.Seq <= topStored.Seq {
		t.Fatalf("Seq %d reused after purge of %d", next.Seq, topStored.Seq)
	}
}

func testQueuedLanes(t *testing.T, s ports.JobStore) {
	mustInsert(t, s, NewJob("u", "1", "a.test:80"))
	mustInsert(t, s, NewJob("u", "2", "a.test:80"))
	b := mustInsert(t, s, NewJob("u", "3", "b.test:80"))
	if _, _, err := s.Finish(ctx(t), &ports.FinishParams{ID: b.ID, Status: domain.StatusCompleted, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	lanes, err := s.QueuedLanes(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(lanes) != 1 || lanes[0] != "a.test:80" {
		t.Fatalf("QueuedLanes = %v, want [a.test:80]", lanes)
	}
}

func testRecoverInFlight(t *testing.T, s ports.JobStore) {
	a := mustInsert(t, s, NewJob("u", "1", "a.test:80"))
	b := mustInsert(t, s, NewJob("u", "2", "a.test:80"))
	for _, j := range []*domain.Job{a, b} {
		if err := s.MarkInFlight(ctx(t), &ports.MarkInFlightParams{ID: j.ID, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, s)
	n, err := s.RecoverInFlight(ctx(t))
	if err != nil || n != 2 {
		t.Fatalf("RecoverInFlight = %d, %v; want 2", n, err)
	}
	page, err := s.ListQueued(ctx(t), &ports.ListQueuedParams{Lane: "a.test:80", Limit: 10, Now: time.Now()})
	if err != nil || len(page) != 2 || page[0].ID != a.ID {
		t.Fatalf("after recovery ListQueued = %v, %v", page, err)
	}
}

func testResetStale(t *testing.T, s ports.JobStore) {
	old := mustInsert(t, s, NewJob("u", "old", "a.test:80"))
	busy := mustInsert(t, s, NewJob("u", "busy", "a.test:80"))
	recent := mustInsert(t, s, NewJob("u", "recent", "a.test:80"))
	long := time.Now().Add(-10 * time.Minute)
	for _, p := range []*ports.MarkInFlightParams{{ID: old.ID, At: long}, {ID: busy.ID, At: long}, {ID: recent.ID, At: time.Now()}} {
		if err := s.MarkInFlight(ctx(t), p); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, s)
	reset, err := s.ResetStale(ctx(t), &ports.ResetStaleParams{DispatchedBefore: time.Now().Add(-5 * time.Minute),
		Exclude: map[domain.JobID]bool{busy.ID: true}, Now: time.Now()})
	if err != nil || len(reset) != 1 || reset[0].ID != old.ID {
		t.Fatalf("ResetStale = %v, %v; want only %s", reset, err, old.ID)
	}
	if mustGet(t, s, old.ID).Status != domain.StatusQueued || mustGet(t, s, busy.ID).Status != domain.StatusInFlight ||
		mustGet(t, s, recent.ID).Status != domain.StatusInFlight {
		t.Fatal("ResetStale changed the wrong jobs")
	}
}

func testPurge(t *testing.T, s ports.JobStore) {
	for i := range 5 {
		j := NewJob("u", fmt.Sprintf("e%d", i), "a.test:80")
		j.ExpiresAt = time.Now().Add(-time.Minute)
		mustInsert(t, s, j)
	}
	keep := mustInsert(t, s, NewJob("u", "keep", "a.test:80"))
	n, err := s.Purge(ctx(t), &ports.PurgeParams{Now: time.Now(), Limit: 3})
	if err != nil || n != 3 {
		t.Fatalf("Purge(limit 3) = %d, %v; want 3", n, err)
	}
	n, err = s.Purge(ctx(t), &ports.PurgeParams{Now: time.Now(), Limit: 3})
	if err != nil || n != 2 {
		t.Fatalf("second Purge = %d, %v; want 2", n, err)
	}
	if n, _ = s.Purge(ctx(t), &ports.PurgeParams{Now: time.Now(), Limit: 3}); n != 0 {
		t.Fatalf("third Purge deleted %d, want 0", n)
	}
	mustGet(t, s, keep.ID)
	mustInsert(t, s, NewJob("u", "e0", "a.test:80")) // purged keys are free again
}

func testCounts(t *testing.T, s ports.JobStore) {
	a := mustInsert(t, s, NewJob("u", "1", "a.test:80"))
	mustInsert(t, s, NewJob("u", "2", "a.test:80"))
	c := mustInsert(t, s, NewJob("u", "3", "a.test:80"))
	if err := s.MarkInFlight(ctx(t), &ports.MarkInFlightParams{ID: a.ID, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Finish(ctx(t), &ports.FinishParams{ID: c.ID, Status: domain.StatusFailed, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Counts(ctx(t))
	if err != nil || got.Queued != 1 || got.InFlight != 1 || got.Total() != 2 {
		t.Fatalf("Counts = %+v, %v; want 1 queued, 1 in flight", got, err)
	}
}

func testBinaryRoundTrip(t *testing.T, s ports.JobStore) {
	j := NewJob("u", "bin", "a.test:80")
	j.Body = []byte{0, 1, 2, 0xff, 0xfe}
	j.Headers = nil
	mustInsert(t, s, j)
	res := &domain.Result{ResponseStatus: 200, Body: []byte{0xc3, 0x28, 0}}
	if _, _, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Result: res, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, s, j.ID)
	if string(got.Body) != string(j.Body) || string(got.Result.Body) != string(res.Body) || len(got.Headers) != 0 {
		t.Fatalf("binary round trip: body %x result %x headers %v", got.Body, got.Result.Body, got.Headers)
	}
}

func testClosed(t *testing.T, s ports.JobStore) {
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := s.Insert(ctx(t), NewJob("u", "late", "a.test:80")); err == nil {
		t.Fatal("Insert after Close succeeded")
	}
}
