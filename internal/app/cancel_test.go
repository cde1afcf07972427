package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

func wantCode(t *testing.T, err error, code domain.Code, what string) {
	t.Helper()
	if domain.CodeOf(err) != code {
		t.Fatalf("%s: %v, want a %s error", what, err, code)
	}
}

func TestCancelQueuedJob(t *testing.T) {
	release := newGate(t)
	target := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/slow" {
			release.Wait(r.Context())
		}
		w.WriteHeader(http.StatusOK)
	})
	hooks := newHooks(t)
	b := setup(t, func(c *app.Config) {
		c.Rates = app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 1}}
	})

	running := b.enqueue(t, req("running", target.URL+"/slow"))
	waitFor(t, "the first job to run", func() bool { return target.count() == 1 })
	r := req("waiting", target.URL+"/never")
	r.WebhookURL = hooks.URL + "/hook"
	waiting := b.enqueue(t, r)

	_, err := b.svc.Cancel(t.Context(), running)
	wantCode(t, err, domain.CodeConflict, "cancel a running job")
	if !strings.Contains(err.Error(), "already dispatched") {
		t.Fatalf("running job: %q does not say it was dispatched", err)
	}

	j, err := b.svc.Cancel(t.Context(), waiting)
	if err != nil {
		t.Fatalf("cancel a queued job: %v", err)
	}
	if j.Status != domain.StatusFailed || !j.Canceled() {
		t.Fatalf("cancelled job: status %s result %+v", j.Status, j.Result)
	}
	_, err = b.svc.Cancel(t.Context(), waiting)
	wantCode(t, err, domain.CodeConflict, "cancel twice")
	_, err = b.svc.Cancel(t.Context(), "0123456789abcdef0123456789abcdef")
	wantCode(t, err, domain.CodeNotFound, "cancel an unknown job")

	release.Open()
	b.waitStatus(t, running, domain.StatusCompleted)
	// The webhook reports the cancellation; the upstream never saw the job.
	waitFor(t, "the cancellation's webhook", func() bool { return hooks.count() == 1 })
	p := hooks.payloads(t)[string(waiting)]
	if p.Status != "failed" || p.Reason != domain.ReasonCanceled {
		t.Fatalf("webhook payload %+v, want failed/canceled", p)
	}
	elapse(t, time.Minute) // long past any retry or redelivery
	for _, h := range target.snapshot() {
		if h.path == "/never" {
			t.Fatal("a cancelled job was dispatched")
		}
	}
	_, err = b.svc.Cancel(t.Context(), running)
	wantCode(t, err, domain.CodeConflict, "cancel a completed job")
}

func TestCancelJobWaitingToRetry(t *testing.T) {
	target := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	b := setup(t, func(c *app.Config) {
		c.Retry = app.RetryPolicy{Attempts: 5, Backoff: []time.Duration{300 * time.Millisecond}}
	})
	id := b.enqueue(t, req("retrying", target.URL+"/x"))
	waitFor(t, "the first attempt", func() bool { return target.count() == 1 })
	var j *domain.Job
	waitFor(t, "the job to wait for its retry", func() bool {
		var err error
		j, err = b.svc.Cancel(t.Context(), id)
		return err == nil
	})
	if !j.Canceled() || j.Attempts != 1 {
		t.Fatalf("cancelled retrying job: %+v result %+v", j, j.Result)
	}
	elapse(t, time.Minute) // far past the 300 ms backoff
	if n := target.count(); n != 1 {
		t.Fatalf("%d attempts after cancelling during the backoff, want 1", n)
	}
}

func TestCancelJobDeepInTheBacklog(t *testing.T) {
	release := newGate(t)
	target := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		release.Wait(r.Context())
		w.WriteHeader(http.StatusOK)
	})
	b := setup(t, func(c *app.Config) {
		c.Rates = app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 1}}
		c.WindowJobs = 2 // most of the backlog stays in the store
	})
	var ids []domain.JobID
	for i := range 10 {
		ids = append(ids, b.enqueue(t, req(fmt.Sprint("k", i), target.URL+fmt.Sprintf("/%d", i))))
	}
	waitFor(t, "the first job to run", func() bool { return target.count() == 1 })
	for _, i := range []int{1, 5, 9} { // in memory, in the store, the last
		if _, err := b.svc.Cancel(t.Context(), ids[i]); err != nil {
			t.Fatalf("cancel job %d: %v", i, err)
		}
	}
	release.Open()
	for i, id := range ids {
		if i == 1 || i == 5 || i == 9 {
			continue
		}
		b.waitStatus(t, id, domain.StatusCompleted)
	}
	for _, h := range target.snapshot() {
		if h.path == "/1" || h.path == "/5" || h.path == "/9" {
			t.Fatalf("cancelled job %s was dispatched", h.path)
		}
	}
}

// TestCancelRacesDispatch cancels jobs while they are being dispatched:
// every job is either cancelled and never sent, or sent and the cancel
// refused — never both, never neither.
//
// wall clock: the race needs the lane to dispatch while the cancels run,
// which on a fake clock standing still it would not (it waits for its
// next slot).
func TestCancelRacesDispatch(t *testing.T) {
	wallClock(t)
	t.Parallel()
	target := newUpstream(t, nil)
	b := setup(t, func(c *app.Config) {
		c.Rates = app.RateTable{Defaults: domain.Rate{RPS: 2000, MaxConcurrent: 4}}
	})
	const n = 300
	ids := make([]domain.JobID, n)
	for i := range n {
		ids[i] = b.enqueue(t, req(fmt.Sprint("r", i), target.URL+fmt.Sprintf("/%d", i)))
	}
	canceled := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.svc.Cancel(t.Context(), ids[i])
			switch {
			case err == nil:
				canceled[i] = true
			case domain.CodeOf(err) != domain.CodeConflict:
				t.Errorf("cancel %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	for i, id := range ids {
		want := domain.StatusCompleted
		if canceled[i] {
			want = domain.StatusFailed
		}
		b.waitStatus(t, id, want)
	}
	// Stop waits for the attempts still running: every request that was
	// sent has arrived.
	if err := b.svc.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	sent := map[string]int{}
	for _, h := range target.snapshot() {
		sent[h.path]++
	}
	nc := 0
	for i := range n {
		p := fmt.Sprintf("/%d", i)
		switch {
		case canceled[i] && sent[p] > 0:
			t.Errorf("job %d was cancelled and dispatched", i)
		case !canceled[i] && sent[p] != 1:
			t.Errorf("job %d was not cancelled but dispatched %d times", i, sent[p])
		}
		if canceled[i] {
			nc++
		}
	}
	t.Logf("%d of %d cancelled", nc, n)
	if nc == 0 || nc == n {
		t.Logf("all or nothing cancelled (%d of %d); the race was not exercised this run", nc, n)
	}
}

func TestEnqueueWithAssignedID(t *testing.T) {
	target := newUpstream(t, nil)
	b := setup(t, nil)
	r := req("assigned", target.URL+"/a")
	r.ID = "0192f0c2a1b27c3d8e4f5a6b7c8d9e0f"
	if id := b.enqueue(t, r); id != r.ID {
		t.Fatalf("job id %s, want the assigned %s", id, r.ID)
	}
	bad := req("bad-id", target.URL+"/b")
	bad.ID = "0192F0C2-A1B2"
	_, err := b.svc.Enqueue(t.Context(), bad)
	wantCode(t, err, domain.CodeInvalid, "an assigned id that is not 32 lower-case hex")
}
