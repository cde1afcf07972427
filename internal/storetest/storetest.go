// Package storetest is the contract every ports.JobStore backend must pass.
// Each backend's tests call Exercise with a constructor that returns a fresh,
// empty store; the suite closes it.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
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
	}, domain.QueueKey(lane), now)
}

// Exercise runs the whole contract against stores made by newStore.
func Exercise(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s ports.JobStore)
	}{
		{"InsertAndGet", testInsertAndGet},
		{"DuplicateReturnsExisting", testDuplicate},
		{"ConcurrentUniqueKeysAllFresh", testConcurrentUnique},
		{"ConcurrentSameKeyExactlyOneFresh", testConcurrentSameKey},
		{"GetUnknownAndExpired", testGetUnknownAndExpired},
		{"ExpiredKeyIsReplaced", testExpiredKeyReplaced},
		{"DeleteFreesKey", testDeleteFreesKey},
		{"MarkInFlightAndRequeue", testMarkInFlightAndRequeue},
		{"FinishWithDelivery", testFinishWithDelivery},
		{"LargeBodiesRoundTrip", testLargeBodies},
		{"FinishWithoutWebhook", testFinishWithoutWebhook},
		{"FinishUnknown", testFinishUnknown},
		{"ListReadyIsCommitOrderedPaging", testListReady},
		{"SeqFollowsCommitOrder", testSeqCommitOrder},
		{"ReadyQueues", testReadyQueues},
		{"RecoverInFlight", testRecoverInFlight},
		{"ResetStale", testResetStale},
		{"PurgeExpiredInBatches", testPurge},
		{"Counts", testCounts},
		{"LookupByKey", testLookup},
		{"Position", testPosition},
		{"DeferralsAreKeptAndReset", testDeferrals},
		{"RoundTripsBinaryBodies", testBinaryRoundTrip},
		{"BodiesOfEverySizeSurviveTheLifecycle", testBodySizes},
		{"WritesReportHealthy", testWritesHealthy},
		{"ClosedStoreFails", testClosed},
	}
	tests = append(tests, scheduleTests...)
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
		got.Status != domain.StatusQueued || got.Queue != "a.test:80" || got.ReadyQueue != "a.test:80" ||
		got.ReadySeq != got.Seq || got.Delivery != nil ||
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
	if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: j.ID, Phase: domain.PhaseDispatch, Attempts: 2, Now: time.Now()}); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	got = mustGet(t, s, j.ID)
	if got.Status != domain.StatusQueued || got.Attempts != 2 {
		t.Fatalf("after Requeue: status=%s attempts=%d", got.Status, got.Attempts)
	}
	if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: "ffffffffffffffffffffffffffffffff", Phase: domain.PhaseDispatch, Now: time.Now()}); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Requeue(unknown) = %v, want ErrNotFound", err)
	}
}

func ready(t *testing.T, s ports.JobStore, lane string) []*domain.Job {
	t.Helper()
	jobs, err := s.ListReady(ctx(t), &ports.ListReadyParams{Queue: domain.QueueKey(lane), Limit: 100, Now: time.Now()})
	if err != nil {
		t.Fatalf("ListReady(%s): %v", lane, err)
	}
	return jobs
}

// testLargeBodies: request and response bodies of many KiB (which a store
// may keep apart from the job's row) come back whole from Get and from the
// lanes, through a delivery, a failed delivery attempt and a finish that
// did not apply; small ones beside them too.
func testLargeBodies(t *testing.T, s ports.JobStore) {
	big := func(n int, c byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = c + byte(i%7)
		}
		return b
	}
	reqBody, respBody := big(70<<10, 'a'), big(9<<10, 'k')
	j := NewJob("u", "large", "a.test:80")
	j.Body = reqBody
	j = mustInsert(t, s, j)
	small := mustInsert(t, s, NewJob("u", "small", "a.test:80"))
	if got := mustGet(t, s, j.ID); !bytes.Equal(got.Body, reqBody) {
		t.Fatalf("Get: request body of %d bytes, want %d", len(got.Body), len(reqBody))
	}
	r := ready(t, s, "a.test:80")
	if len(r) != 2 || !bytes.Equal(r[0].Body, reqBody) || string(r[1].Body) != `{"n":1}` {
		t.Fatalf("lane holds %d jobs; want the large one whole, then the small one", len(r))
	}
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusCompleted, Attempts: 1,
		Result: &domain.Result{ResponseStatus: 200, Body: respBody}, Now: time.Now(), DeliverIn: "hooks.test:80"}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	// A finish that does not apply (the job is no longer queued) leaves the
	// stored response alone.
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Status: domain.StatusFailed, Attempts: 2,
		Result: &domain.Result{ResponseStatus: 500, Body: big(5<<10, 'z')}, Now: time.Now(), DeliverIn: "hooks.test:80"}); err != nil {
		t.Fatalf("second Finish: %v", err)
	}
	if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: j.ID, Seq: j.Seq, Phase: domain.PhaseDeliver, Attempts: 1,
		Response: 502, Reason: "receiver returned 502", Now: time.Now()}); err != nil {
		t.Fatalf("Requeue(delivery): %v", err)
	}
	r = ready(t, s, "hooks.test:80")
	if len(r) != 1 || r[0].Result == nil || !bytes.Equal(r[0].Result.Body, respBody) || !bytes.Equal(r[0].Body, reqBody) {
		t.Fatalf("receiver lane = %d jobs; want the job with both bodies whole", len(r))
	}
	if err := s.FinishDelivery(ctx(t), &ports.FinishDeliveryParams{ID: j.ID, Seq: j.Seq, Delivered: true, Attempts: 2,
		Response: 204, Now: time.Now()}); err != nil {
		t.Fatalf("FinishDelivery: %v", err)
	}
	got := mustGet(t, s, j.ID)
	if !bytes.Equal(got.Body, reqBody) || got.Result == nil || got.Result.ResponseStatus != 200 || !bytes.Equal(got.Result.Body, respBody) {
		t.Fatalf("after delivery: request %d bytes, result %+v; want both bodies whole", len(got.Body), got.Result != nil)
	}
	if got := mustGet(t, s, small.ID); string(got.Body) != `{"n":1}` {
		t.Fatalf("small job's body = %q", got.Body)
	}
	if err := s.Delete(ctx(t), j.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctx(t), j.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
	}
}

func testFinishWithDelivery(t *testing.T, s ports.JobStore) {
	j := mustInsert(t, s, NewJob("u", "fin", "a.test:80"))
	res := &domain.Result{ResponseStatus: 201, Body: []byte("created"), ContentType: "text/plain", BodyTruncated: true}
	readySeq, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusCompleted, Attempts: 1,
		Result: res, Now: time.Now(), DeliverIn: "hooks.test:80"})
	if err != nil || readySeq <= j.ReadySeq {
		t.Fatalf("Finish = %d, %v; want a ReadySeq after %d", readySeq, err, j.ReadySeq)
	}
	got := mustGet(t, s, j.ID)
	if got.Status != domain.StatusCompleted || got.Attempts != 1 || got.Result == nil ||
		got.Result.ResponseStatus != 201 || string(got.Result.Body) != "created" || !got.Result.BodyTruncated ||
		got.Result.ContentType != "text/plain" {
		t.Fatalf("finished job = %+v result %+v", got, got.Result)
	}
	if got.Phase() != domain.PhaseDeliver || got.ReadyQueue != "hooks.test:80" || got.ReadySeq != readySeq ||
		got.Delivery.Status != domain.DeliveryPending {
		t.Fatalf("finished job delivery: phase %v lane %q seq %d delivery %+v", got.Phase(), got.ReadyQueue, got.ReadySeq, got.Delivery)
	}
	if !got.ExpiresAt.After(time.Now().Add(domain.QueuedTTL - time.Minute)) {
		t.Fatalf("expiry %v does not leave a day to deliver", got.ExpiresAt)
	}
	if r := ready(t, s, "a.test:80"); len(r) != 0 {
		t.Fatalf("finished job still ready in its upstream lane: %v", r)
	}
	if r := ready(t, s, "hooks.test:80"); len(r) != 1 || r[0].ID != j.ID || r[0].Phase() != domain.PhaseDeliver {
		t.Fatalf("receiver lane = %v, want the job's delivery", r)
	}
	// Finishing again (a re-dispatch after a crash) must not enqueue a second delivery.
	again, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Status: domain.StatusFailed, Attempts: 5, Now: time.Now(), DeliverIn: "hooks.test:80"})
	if err != nil || again != 0 {
		t.Fatalf("second Finish = %d, %v; want 0 (no second delivery)", again, err)
	}
	if got := mustGet(t, s, j.ID); got.Status != domain.StatusCompleted || got.ReadySeq != readySeq {
		t.Fatalf("second Finish changed the job: %+v", got)
	}
	// A failed delivery attempt that will be retried.
	if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: j.ID, Seq: j.Seq, Phase: domain.PhaseDeliver, Attempts: 1,
		Response: 502, Reason: "receiver returned 502", Now: time.Now()}); err != nil {
		t.Fatalf("Requeue(delivery): %v", err)
	}
	if d := mustGet(t, s, j.ID).Delivery; d.Status != domain.DeliveryPending || d.Attempts != 1 || d.ResponseStatus != 502 {
		t.Fatalf("after a failed delivery attempt: %+v", d)
	}
	if err := s.FinishDelivery(ctx(t), &ports.FinishDeliveryParams{ID: j.ID, Seq: j.Seq, Delivered: true, Attempts: 2,
		Response: 204, Now: time.Now()}); err != nil {
		t.Fatalf("FinishDelivery: %v", err)
	}
	got = mustGet(t, s, j.ID)
	if got.Phase() != domain.PhaseNone || got.ReadyQueue != "" || got.Delivery.Status != domain.DeliveryDelivered ||
		got.Delivery.Attempts != 2 || got.Delivery.ResponseStatus != 204 {
		t.Fatalf("after delivery: phase %v lane %q delivery %+v", got.Phase(), got.ReadyQueue, got.Delivery)
	}
	if got.ExpiresAt.After(time.Now().Add(domain.CompletedTTL + time.Minute)) {
		t.Fatalf("expiry %v not reset to the completed TTL after delivery", got.ExpiresAt)
	}
	if r := ready(t, s, "hooks.test:80"); len(r) != 0 {
		t.Fatalf("delivered job still ready: %v", r)
	}
	if err := s.FinishDelivery(ctx(t), &ports.FinishDeliveryParams{ID: j.ID, Delivered: true, Now: time.Now()}); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("second FinishDelivery = %v, want ErrNotFound", err)
	}
	if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: j.ID, Phase: domain.PhaseDeliver, Now: time.Now()}); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Requeue of a finished delivery = %v, want ErrNotFound", err)
	}
}

func testFinishWithoutWebhook(t *testing.T, s ports.JobStore) {
	j := mustInsert(t, s, NewJob("u", "nohook", "a.test:80"))
	seq, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Status: domain.StatusFailed, Attempts: 5,
		Result: &domain.Result{Reason: "upstream returned 503", ResponseStatus: 503}, Now: time.Now()})
	if err != nil || seq != 0 {
		t.Fatalf("Finish = %d, %v", seq, err)
	}
	got := mustGet(t, s, j.ID)
	if got.Status != domain.StatusFailed || got.Result.Reason != "upstream returned 503" || got.Delivery != nil ||
		got.ReadyQueue != "" || got.Phase() != domain.PhaseNone {
		t.Fatalf("failed job = %+v %+v", got, got.Result)
	}
	if got.ExpiresAt.After(time.Now().Add(domain.FailedTTL + time.Minute)) {
		t.Fatalf("failed expiry %v, want ~%v", got.ExpiresAt, domain.FailedTTL)
	}
}

func testFinishUnknown(t *testing.T, s ports.JobStore) {
	ghost := NewJob("u", "ghost", "a.test:80")
	_, err := s.Finish(ctx(t), &ports.FinishParams{ID: ghost.ID, Status: domain.StatusCompleted, Now: time.Now(), DeliverIn: "hooks.test:80"})
	if !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Finish(unknown) = %v, want ErrNotFound", err)
	}
	if err := s.FinishDelivery(ctx(t), &ports.FinishDeliveryParams{ID: ghost.ID, Now: time.Now()}); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("FinishDelivery(unknown) = %v, want ErrNotFound", err)
	}
	if c, _ := s.Counts(ctx(t)); c.Total() != 0 {
		t.Fatalf("counts after failed finishes: %+v", c)
	}
}

func testListReady(t *testing.T, s ports.JobStore) {
	var lane []*domain.Job
	for i := range 7 {
		lane = append(lane, mustInsert(t, s, NewJob("u", fmt.Sprintf("l%d", i), "a.test:80")))
		mustInsert(t, s, NewJob("u", fmt.Sprintf("o%d", i), "b.test:80"))
	}
	if err := s.MarkInFlight(ctx(t), &ports.MarkInFlightParams{ID: lane[1].ID, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	flush(t, s)
	p := &ports.ListReadyParams{Queue: "a.test:80", Limit: 3, Now: time.Now()}
	var got []domain.JobID
	for {
		page, err := s.ListReady(ctx(t), p)
		if err != nil {
			t.Fatalf("ListReady: %v", err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 3 {
			t.Fatalf("page of %d, limit 3", len(page))
		}
		for _, j := range page {
			if j.ReadyQueue != "a.test:80" || j.Status != domain.StatusQueued {
				t.Fatalf("ListReady returned %s in lane %s status %s", j.ID, j.ReadyQueue, j.Status)
			}
			got = append(got, j.ID)
			p.AfterSeq = j.ReadySeq
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

func testReadyQueues(t *testing.T, s ports.JobStore) {
	mustInsert(t, s, NewJob("u", "1", "a.test:80"))
	mustInsert(t, s, NewJob("u", "2", "a.test:80"))
	b := mustInsert(t, s, NewJob("u", "3", "b.test:80"))
	c := mustInsert(t, s, NewJob("u", "4", "c.test:80"))
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: b.ID, Status: domain.StatusCompleted, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: c.ID, Status: domain.StatusCompleted, Now: time.Now(), DeliverIn: "hooks.test:80"}); err != nil {
		t.Fatal(err)
	}
	lanes, err := s.ReadyQueues(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(lanes, func(i, j int) bool { return lanes[i] < lanes[j] })
	if fmt.Sprint(lanes) != "[a.test:80 hooks.test:80]" {
		t.Fatalf("ReadyQueues = %v, want [a.test:80 hooks.test:80]", lanes)
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
	page := ready(t, s, "a.test:80")
	if len(page) != 2 || page[0].ID != a.ID {
		t.Fatalf("after recovery ListReady = %v", page)
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
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: c.ID, Status: domain.StatusFailed, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	d := mustInsert(t, s, NewJob("u", "4", "a.test:80"))
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: d.ID, Status: domain.StatusCompleted, Now: time.Now(), DeliverIn: "hooks.test:80"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Counts(ctx(t))
	if err != nil || got.Queued != 1 || got.InFlight != 1 || got.Deliveries != 1 || got.Total() != 3 {
		t.Fatalf("Counts = %+v, %v; want 1 queued, 1 in flight, 1 delivery", got, err)
	}
}

func testBinaryRoundTrip(t *testing.T, s ports.JobStore) {
	j := NewJob("u", "bin", "a.test:80")
	j.Body = []byte{0, 1, 2, 0xff, 0xfe}
	j.Headers = nil
	mustInsert(t, s, j)
	res := &domain.Result{ResponseStatus: 200, Body: []byte{0xc3, 0x28, 0}}
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Result: res, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, s, j.ID)
	if string(got.Body) != string(j.Body) || string(got.Result.Body) != string(res.Body) || len(got.Headers) != 0 {
		t.Fatalf("binary round trip: body %x result %x headers %v", got.Body, got.Result.Body, got.Headers)
	}
}

// testBodySizes follows request bodies of the sizes a store may keep
// differently (none, empty, a few bytes, around Pebble's 64-byte limit for
// keeping a body in the record, several pages, binary) through every write
// of a lifecycle, Insert and InsertBatch, and checks each read returns the
// body unchanged: Get, Lookup and ListReady after every step.
func testBodySizes(t *testing.T, s ports.JobStore) {
	sizes := []int{-1, 0, 7, 64, 65, 1 << 10, 20 << 10}
	body := func(n int) []byte {
		if n < 0 {
			return nil
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + n) // binary, different for every size
		}
		return b
	}
	// The contract is the bytes: a store may give a nil body for an empty
	// one (nothing is sent either way).
	same := func(got, want []byte) bool { return string(got) == string(want) }
	const lane = "bodies.test:80"
	var jobs []*domain.Job
	var batch []*domain.Job
	for _, n := range sizes {
		j := NewJob("u", fmt.Sprint("one-", n), lane)
		j.Body = body(n)
		jobs = append(jobs, mustInsert(t, s, j))
		b := NewJob("u", fmt.Sprint("batch-", n), lane)
		b.Body = body(n)
		batch = append(batch, b)
	}
	out, err := s.InsertBatch(ctx(t), batch)
	if err != nil {
		t.Fatalf("InsertBatch: %v", err)
	}
	for i, o := range out {
		if !o.Fresh {
			t.Fatalf("InsertBatch: job %d not fresh", i)
		}
		jobs = append(jobs, o.Job)
	}
	want := func(i int) []byte { return body(sizes[i%len(sizes)]) }
	check := func(step string) {
		t.Helper()
		for i, j := range jobs {
			if got := mustGet(t, s, j.ID); !same(got.Body, want(i)) {
				t.Fatalf("%s: Get(%s) body of %d bytes (nil %v), want %d", step, j.IdempotentKey, len(got.Body), got.Body == nil, sizes[i%len(sizes)])
			}
			got, err := s.Lookup(ctx(t), j.UserID, j.IdempotentKey)
			if err != nil {
				t.Fatalf("%s: Lookup(%s): %v", step, j.IdempotentKey, err)
			}
			if !same(got.Body, want(i)) {
				t.Fatalf("%s: Lookup(%s) body of %d bytes (nil %v), want %d", step, j.IdempotentKey, len(got.Body), got.Body == nil, sizes[i%len(sizes)])
			}
		}
	}
	checkReady := func(step, lane string) {
		t.Helper()
		r := ready(t, s, lane)
		if len(r) != len(jobs) {
			t.Fatalf("%s: ListReady(%s) = %d jobs, want %d", step, lane, len(r), len(jobs))
		}
		byID := make(map[domain.JobID]int, len(jobs))
		for i, j := range jobs {
			byID[j.ID] = i
		}
		for _, j := range r {
			if i, ok := byID[j.ID]; !ok || !same(j.Body, want(i)) {
				t.Fatalf("%s: ListReady(%s) gave %s with a body of %d bytes", step, lane, j.IdempotentKey, len(j.Body))
			}
		}
	}
	check("inserted")
	checkReady("inserted", lane)
	now := time.Now()
	for _, j := range jobs {
		if err := s.MarkInFlight(ctx(t), &ports.MarkInFlightParams{ID: j.ID, Seq: j.Seq, At: now}); err != nil {
			t.Fatalf("MarkInFlight: %v", err)
		}
		if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: j.ID, Seq: j.Seq, Phase: domain.PhaseDispatch, Attempts: 1,
			Reason: "upstream returned 503", Now: now}); err != nil {
			t.Fatalf("Requeue: %v", err)
		}
	}
	check("requeued")
	checkReady("requeued", lane)
	for _, j := range jobs {
		res := &domain.Result{ResponseStatus: 200, Body: []byte("ok")}
		if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusCompleted, Attempts: 2,
			Result: res, Now: now, DeliverIn: "hooks.test:80"}); err != nil {
			t.Fatalf("Finish: %v", err)
		}
	}
	check("finished")
	checkReady("finished", "hooks.test:80")
	for _, j := range jobs {
		if err := s.FinishDelivery(ctx(t), &ports.FinishDeliveryParams{ID: j.ID, Seq: j.Seq, Delivered: true, Attempts: 1,
			Response: 204, Now: now}); err != nil {
			t.Fatalf("FinishDelivery: %v", err)
		}
	}
	check("delivered")
	for _, j := range jobs {
		if err := s.Delete(ctx(t), j.ID); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, err := s.Get(ctx(t), j.ID); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
		}
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

func testLookup(t *testing.T, s ports.JobStore) {
	j := mustInsert(t, s, NewJob("u", "look", "a.test:80"))
	got, err := s.Lookup(ctx(t), "u", "look")
	if err != nil || got.ID != j.ID {
		t.Fatalf("Lookup = %v, %v; want %s", got, err, j.ID)
	}
	for _, k := range [][2]string{{"u", "other"}, {"v", "look"}} {
		if _, err := s.Lookup(ctx(t), k[0], k[1]); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("Lookup(%v) = %v, want ErrNotFound", k, err)
		}
	}
	old := NewJob("u", "expired", "a.test:80")
	old.ExpiresAt = time.Now().Add(-time.Second)
	mustInsert(t, s, old)
	if _, err := s.Lookup(ctx(t), "u", "expired"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Lookup(expired) = %v, want ErrNotFound", err)
	}
	if c, _ := s.Counts(ctx(t)); c.Total() != 1 {
		t.Fatalf("Lookup wrote something: counts %+v", c)
	}
}

func testPosition(t *testing.T, s ports.JobStore) {
	var jobs []*domain.Job
	for i := range 5 {
		jobs = append(jobs, mustInsert(t, s, NewJob("u", fmt.Sprint("p", i), "a.test:80")))
		mustInsert(t, s, NewJob("u", fmt.Sprint("q", i), "b.test:80"))
	}
	if err := s.MarkInFlight(ctx(t), &ports.MarkInFlightParams{ID: jobs[0].ID, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: jobs[1].ID, Status: domain.StatusCompleted, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	flush(t, s)
	// Ahead of jobs[4]: jobs[2] and jobs[3] wait; jobs[0] runs, jobs[1] is done.
	n, err := s.Position(ctx(t), "a.test:80", jobs[4].ReadySeq)
	if err != nil || n != 2 {
		t.Fatalf("Position = %d, %v; want 2", n, err)
	}
	if n, _ := s.Position(ctx(t), "a.test:80", jobs[2].ReadySeq); n != 0 {
		t.Fatalf("Position of the first waiting job = %d, want 0", n)
	}
}

func testDeferrals(t *testing.T, s ports.JobStore) {
	j := mustInsert(t, s, NewJob("u", "later", "a.test:80"))
	if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: j.ID, Phase: domain.PhaseDispatch, Attempts: 0, Deferrals: 3, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, j.ID); got.Deferrals != 3 || got.Attempts != 0 {
		t.Fatalf("after a deferral: attempts %d deferrals %d", got.Attempts, got.Deferrals)
	}
	if _, err := s.Finish(ctx(t), &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Attempts: 1, Now: time.Now(),
		DeliverIn: "hooks.test:80"}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, j.ID); got.Deferrals != 0 {
		t.Fatalf("deferrals not reset for the delivery phase: %d", got.Deferrals)
	}
	if err := s.Requeue(ctx(t), &ports.RequeueParams{ID: j.ID, Phase: domain.PhaseDeliver, Deferrals: 2, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, j.ID); got.Deferrals != 2 {
		t.Fatalf("delivery deferrals = %d, want 2", got.Deferrals)
	}
}

// testWritesHealthy: a store that reports its write health says writes
// succeed while they do, idle (a probe) or not.
func testWritesHealthy(t *testing.T, s ports.JobStore) {
	wc, ok := s.(ports.WriteChecker)
	if !ok {
		t.Skipf("%T does not report write health (ports.WriteChecker)", s)
	}
	if err := wc.CheckWrites(ctx(t)); err != nil {
		t.Fatalf("CheckWrites on a new store: %v", err)
	}
	mustInsert(t, s, NewJob("u", "k", "a.test:80"))
	if err := wc.CheckWrites(ctx(t)); err != nil {
		t.Fatalf("CheckWrites after a write: %v", err)
	}
}
