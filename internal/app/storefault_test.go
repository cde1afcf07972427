package app_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// faultyStore fails the result writes a number of times with the error a
// Postgres restart gives (57P01), then lets them through.
type faultyStore struct {
	*memory.Store
	failFinish, failRequeue, failDelivery    atomic.Int64 // failures left; <0: fail forever
	finishCalls, requeueCalls, deliveryCalls atomic.Int64
}

var errTerminated = domain.Unavailable("job store write failed",
	errors.New("FATAL: terminating connection due to administrator command (SQLSTATE 57P01)"))

func failOnce(left *atomic.Int64) bool {
	for {
		n := left.Load()
		if n == 0 {
			return false
		}
		if n < 0 || left.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (s *faultyStore) Finish(ctx context.Context, p *ports.FinishParams) (int64, error) {
	s.finishCalls.Add(1)
	if failOnce(&s.failFinish) {
		return 0, errTerminated
	}
	return s.Store.Finish(ctx, p)
}

func (s *faultyStore) Requeue(ctx context.Context, p *ports.RequeueParams) error {
	s.requeueCalls.Add(1)
	if failOnce(&s.failRequeue) {
		return errTerminated
	}
	return s.Store.Requeue(ctx, p)
}

func (s *faultyStore) FinishDelivery(ctx context.Context, p *ports.FinishDeliveryParams) error {
	s.deliveryCalls.Add(1)
	if failOnce(&s.failDelivery) {
		return errTerminated
	}
	return s.Store.FinishDelivery(ctx, p)
}

func (s *faultyStore) Unwrap() *memory.Store { return s.Store }

// storeFaultSetup runs the service on a faultyStore whose in-flight marks
// are written at once and whose stale sweep runs every 10 ms with a tiny
// StaleAfter: a job left in_flight would be dispatched again at once (many
// times during the write retries, 50 ms doubling), unless the process
// still counts it as executing.
func storeFaultSetup(t *testing.T, fs *faultyStore) *bundle {
	return setup(t, func(c *app.Config) {
		c.Store = fs
		c.PersistInFlightAfter = -1
		c.StaleAfter = time.Millisecond
		c.SweepInterval = 10 * time.Millisecond
	})
}

// A result write that fails is retried until it commits: the job completes
// once, is not sent again meanwhile, and its webhook goes out once.
func TestFailedResultWriteIsRetriedNotRedispatched(t *testing.T) {
	up := newUpstream(t, nil)
	hk := newHooks(t)
	fs := &faultyStore{Store: newStore(t)}
	fs.failFinish.Store(4)
	b := storeFaultSetup(t, fs)
	r := req("k1", up.URL+"/x")
	r.WebhookURL = hk.URL + "/hook"
	id := b.enqueue(t, r)

	j := b.waitStatus(t, id, domain.StatusCompleted)
	if j.Attempts != 1 {
		t.Fatalf("attempts = %d, want 1", j.Attempts)
	}
	waitFor(t, "delivery recorded", func() bool {
		j, err := b.store.Get(t.Context(), id)
		return err == nil && j.Delivery != nil && j.Delivery.Status == domain.DeliveryDelivered
	})
	if n := fs.finishCalls.Load(); n != 5 {
		t.Fatalf("Finish called %d times, want 5 (4 failures, then the commit)", n)
	}
	elapse(t, 50*time.Millisecond) // the sweep runs five more times over the finished job
	if n := up.count(); n != 1 {
		t.Fatalf("upstream got %d requests, want 1: the job was dispatched again while its result was being recorded", n)
	}
	if n := hk.count(); n != 1 {
		t.Fatalf("%d webhooks, want 1", n)
	}
	if b.logs.FilterMessage("job result recorded after the store failed").Len() != 1 {
		t.Errorf("no log line says the result was recorded after retries")
	}
}

// A retry that cannot be recorded is retried too, and so is a delivery's
// outcome: the job runs twice (a 500, then a 200) and its webhook goes out
// once.
func TestFailedRetryAndDeliveryWritesAreRetried(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	hk := newHooks(t)
	fs := &faultyStore{Store: newStore(t)}
	fs.failRequeue.Store(3)
	fs.failDelivery.Store(3)
	b := storeFaultSetup(t, fs)
	r := req("k1", up.URL+"/x")
	r.WebhookURL = hk.URL + "/hook"
	id := b.enqueue(t, r)

	b.waitStatus(t, id, domain.StatusCompleted)
	waitFor(t, "delivery recorded", func() bool {
		j, err := b.store.Get(t.Context(), id)
		return err == nil && j.Delivery != nil && j.Delivery.Status == domain.DeliveryDelivered
	})
	j, _ := b.store.Get(t.Context(), id)
	if j.Attempts != 2 {
		t.Fatalf("attempts = %d, want 2 (the retry was recorded)", j.Attempts)
	}
	if n := fs.requeueCalls.Load(); n != 4 {
		t.Fatalf("Requeue called %d times, want 4", n)
	}
	if n := fs.deliveryCalls.Load(); n != 4 {
		t.Fatalf("FinishDelivery called %d times, want 4", n)
	}
	elapse(t, 50*time.Millisecond) // five more sweeps
	if n := up.count(); n != 2 {
		t.Fatalf("upstream got %d requests, want 2", n)
	}
	if n := hk.count(); n != 1 {
		t.Fatalf("%d webhooks, want 1: a delivery whose outcome was being recorded was sent again", n)
	}
}

// Stopping while a result write is being retried does not wait for the
// store: the attempt gives up (the job stays unfinished in the store, for
// the next start) and Stop returns without hitting its deadline.
func TestStopWhileRetryingAResultWriteIsPrompt(t *testing.T) {
	up := newUpstream(t, nil)
	fs := &faultyStore{Store: newStore(t)}
	fs.failFinish.Store(-1)
	b := storeFaultSetup(t, fs)
	id := b.enqueue(t, req("k1", up.URL+"/x"))
	waitFor(t, "result write retried", func() bool { return fs.finishCalls.Load() >= 3 })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.svc.Stop(ctx); err != nil {
		t.Fatalf("Stop = %v: it waited for the retrying write instead of leaving it to the next start", err)
	}
	j, err := b.store.Get(t.Context(), id)
	if err != nil || j.Status.Terminal() {
		t.Fatalf("job after stop = %+v, %v; want it unfinished", j, err)
	}
	if up.count() != 1 {
		t.Fatalf("upstream got %d requests, want 1", up.count())
	}
	if b.logs.FilterMessage("job result not recorded: stopping; the job runs again after restart").Len() != 1 {
		t.Errorf("no log line says the result was left for the next start")
	}
}

// writeFailingStore answers reads but reports that its writes fail.
type writeFailingStore struct {
	*memory.Store
	err atomic.Pointer[error]
}

func (s *writeFailingStore) CheckWrites(context.Context) error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *writeFailingStore) Unwrap() *memory.Store { return s.Store }

// Health is degraded, with the reason, while the store's writes fail, even
// though it answers reads; and ok again once they commit.
func TestHealthShowsAStoreThatCannotWrite(t *testing.T) {
	fs := &writeFailingStore{Store: newStore(t)}
	b := setup(t, func(c *app.Config) { c.Store = fs })
	h := b.svc.Health(t.Context())
	if h.Status != "ok" || !h.Store.OK || !h.Store.Writable || h.Store.Error != "" {
		t.Fatalf("healthy store: %+v", h.Store)
	}
	full := error(errors.New("writes failing since 2026-01-02T03:04:05Z: no space left on device"))
	fs.err.Store(&full)
	h = b.svc.Health(t.Context())
	if h.Status != "degraded" || !h.Store.OK || h.Store.Writable || h.Store.Error != full.Error() {
		t.Fatalf("store that cannot write: status %q, store %+v", h.Status, h.Store)
	}
	fs.err.Store(nil)
	if h = b.svc.Health(t.Context()); h.Status != "ok" || !h.Store.Writable {
		t.Fatalf("store writing again: status %q, store %+v", h.Status, h.Store)
	}
}
