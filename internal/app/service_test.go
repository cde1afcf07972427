package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

func TestEnqueueDispatchesAndDeliversWebhook(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"created":true}`)
	})
	hk := newHooks(t)
	b := setup(t, nil)
	r := req("k1", up.URL+"/things?x=1")
	r.Headers["Authorization"] = "Bearer s3cret"
	r.Headers["Host"] = "virtual.example"
	r.WebhookURL = hk.URL + "/hook"
	id := b.enqueue(t, r)

	j := b.waitStatus(t, id, domain.StatusCompleted)
	if j.Attempts != 1 || j.Result.ResponseStatus != 201 || string(j.Result.Body) != `{"created":true}` ||
		j.Result.ContentType != "application/json" {
		t.Fatalf("completed job = %+v, result %+v", j, j.Result)
	}
	h := up.snapshot()[0]
	if h.method != "POST" || h.path != "/things" || h.body != `{"k":"k1"}` || h.headers.Get("Authorization") != "Bearer s3cret" {
		t.Fatalf("upstream got %+v", h)
	}
	waitFor(t, "webhook", func() bool { return hk.count() == 1 })
	p := hk.payloads(t)[string(id)]
	if p.Status != "completed" || p.ResponseStatus != 201 || p.Body != `{"created":true}` || p.Reason != "" {
		t.Fatalf("webhook payload = %+v", p)
	}
	wh := hk.snapshot()[0]
	if wh.method != "POST" || wh.headers.Get("Content-Type") != "application/json" {
		t.Fatalf("webhook request = %s %v", wh.method, wh.headers)
	}
	waitFor(t, "delivery recorded", func() bool {
		j, err := b.svc.Get(t.Context(), id)
		return err == nil && j.Delivery != nil && j.Delivery.Status == domain.DeliveryDelivered
	})
	if j, _ := b.svc.Get(t.Context(), id); j.Delivery.Attempts != 1 || j.Delivery.ResponseStatus != 204 || j.Phase() != domain.PhaseNone {
		t.Fatalf("delivery = %+v, phase %v", j.Delivery, j.Phase())
	}
	// The payload's keys are sorted, as the original encoder produced them.
	if !strings.HasPrefix(wh.body, `{"body":`) || strings.Index(wh.body, `"job_id"`) > strings.Index(wh.body, `"status"`) {
		t.Fatalf("webhook body keys not in alphabetical order: %s", wh.body)
	}
}

func TestHostHeaderSetsRequestHost(t *testing.T) {
	var gotHost atomic.Value
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) { gotHost.Store(r.Host) })
	b := setup(t, nil)
	r := req("h", up.URL)
	r.Headers["Host"] = "virtual.example"
	b.waitStatus(t, b.enqueue(t, r), domain.StatusCompleted)
	if gotHost.Load() != "virtual.example" {
		t.Fatalf("upstream saw Host %v", gotHost.Load())
	}
}

func TestDuplicateReturnsExistingJobWithRealStatus(t *testing.T) {
	up := newUpstream(t, nil)
	b := setup(t, nil)
	id := b.enqueue(t, req("dup", up.URL))
	b.waitStatus(t, id, domain.StatusCompleted)
	res, err := b.svc.Enqueue(t.Context(), req("dup", up.URL))
	if err != nil || !res.Duplicate || res.JobID != id || res.Status != domain.StatusCompleted {
		t.Fatalf("duplicate Enqueue = %+v, %v; want job %s completed", res, err, id)
	}
	if up.count() != 1 {
		t.Fatalf("upstream hit %d times, want 1", up.count())
	}
}

func TestValidationErrorWritesNothing(t *testing.T) {
	b := setup(t, nil)
	_, err := b.svc.Enqueue(t.Context(), &domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "ftp://x/"})
	if domain.CodeOf(err) != domain.CodeInvalid {
		t.Fatalf("Enqueue(ftp) error = %v, want invalid", err)
	}
	if c, _ := b.store.Counts(t.Context()); c.Total() != 0 {
		t.Fatalf("a rejected request left %d rows", c.Total())
	}
}

func TestRetriesServerErrorsThenFails(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		w.WriteHeader(500 + n) // 501, 502, ... so the final reason is visible
		fmt.Fprintf(w, "boom %d", n)
	})
	hk := newHooks(t)
	b := setup(t, nil)
	r := req("fail", up.URL)
	r.WebhookURL = hk.URL
	id := b.enqueue(t, r)
	j := b.waitStatus(t, id, domain.StatusFailed)
	if up.count() != 5 {
		t.Fatalf("upstream hit %d times, want 5 attempts", up.count())
	}
	// The reason comes from the final attempt (the original kept the first one).
	if j.Attempts != 5 || j.Result.ResponseStatus != 505 || j.Result.Reason != "upstream returned 505" || string(j.Result.Body) != "boom 5" {
		t.Fatalf("failed job = attempts %d result %+v", j.Attempts, j.Result)
	}
	// Backoff between attempts grows (5, 10, 20, 40 ms here), exactly.
	hits := up.snapshot()
	for i := 1; i < len(hits); i++ {
		want := []time.Duration{5, 10, 20, 40}[i-1] * time.Millisecond
		if gap := hits[i].at.Sub(hits[i-1].at); gap != want {
			t.Errorf("gap before attempt %d = %v, want %v", i+1, gap, want)
		}
	}
	waitFor(t, "failure webhook", func() bool { return hk.count() == 1 })
	p := hk.payloads(t)[string(id)]
	if p.Status != "failed" || p.Reason != "upstream returned 505" || p.ResponseStatus != 505 || p.Body != "boom 5" {
		t.Fatalf("failure webhook = %+v", p)
	}
}

func TestClientErrorsCompleteWithoutRetry(t *testing.T) {
	for _, code := range []int{400, 404, 422} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(code) })
			b := setup(t, nil)
			j := b.waitStatus(t, b.enqueue(t, req("c", up.URL)), domain.StatusCompleted)
			if j.Result.ResponseStatus != code || up.count() != 1 {
				t.Fatalf("status %d: result %+v after %d hits", code, j.Result, up.count())
			}
		})
	}
}

func TestTransportErrorsRetryThenFail(t *testing.T) {
	up := newUpstream(t, nil)
	url := up.URL
	up.Close() // connection refused from now on
	b := setup(t, nil)
	j := b.waitStatus(t, b.enqueue(t, req("down", url)), domain.StatusFailed)
	if j.Attempts != 5 || j.Result.ResponseStatus != 0 || !strings.Contains(j.Result.Reason, "connect") {
		t.Fatalf("failed job: attempts %d result %+v", j.Attempts, j.Result)
	}
}

func TestRecoversAfterTransientFailure(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "finally")
	})
	b := setup(t, nil)
	j := b.waitStatus(t, b.enqueue(t, req("flaky", up.URL)), domain.StatusCompleted)
	if j.Attempts != 3 || string(j.Result.Body) != "finally" {
		t.Fatalf("job = attempts %d result %+v", j.Attempts, j.Result)
	}
}

func TestResponseBodyIsTruncatedAtLimit(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { fmt.Fprint(w, strings.Repeat("a", 5000)) })
	b := setup(t, func(c *app.Config) { c.MaxResponseBytes = 100 })
	j := b.waitStatus(t, b.enqueue(t, req("big", up.URL)), domain.StatusCompleted)
	if len(j.Result.Body) != 100 || !j.Result.BodyTruncated {
		t.Fatalf("kept %d bytes, truncated=%v; want 100, true", len(j.Result.Body), j.Result.BodyTruncated)
	}
}

// The request timeout is a real context deadline: the first
// attempt's request stays in flight, holding the test's clock, until it
// runs out. (250 ms: the second attempt, which answers at once, must not
// run out too on a busy machine.)
func TestRequestTimeoutIsRetryable(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			<-r.Context().Done()
			return
		}
		fmt.Fprint(w, "second time lucky")
	})
	b := setup(t, func(c *app.Config) { c.RequestTimeout = 250 * time.Millisecond })
	j := b.waitStatus(t, b.enqueue(t, req("slow", up.URL)), domain.StatusCompleted)
	if j.Attempts != 2 {
		t.Fatalf("attempts = %d, want 2 (first timed out)", j.Attempts)
	}
}

func TestPacingSpacesStartsAndBoundsConcurrency(t *testing.T) {
	block := newGate(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) { block.Wait(r.Context()) })
	host := strings.TrimPrefix(up.URL, "http://")
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{host: {RPS: 50, MaxConcurrent: 3}}
	})
	for i := range 10 {
		b.enqueue(t, req(fmt.Sprint("p", i), up.URL))
	}
	waitFor(t, "3 running", func() bool { return up.count() == 3 })
	elapse(t, time.Second) // fifty slots: a broken gate would start a 4th
	if n := up.count(); n != 3 {
		t.Fatalf("%d requests running with max_concurrent 3", n)
	}
	released := now(t)
	block.Open()
	waitFor(t, "all 10", func() bool { return up.count() == 10 })
	if m := up.maxConc.Load(); m > 3 {
		t.Fatalf("max concurrency observed %d, limit 3", m)
	}
	// Starts 1-3 are paced before the gate closes, one slot (20 ms) apart;
	// 4-10 after the release: the first at once (the lane was idle for
	// longer than a slot, so there is no backlog of slots to catch up on),
	// then one slot apart again.
	hits := up.snapshot()
	interval := time.Second / 50
	for i := 1; i < len(hits); i++ {
		want, from, after := interval, hits[i-1].at, "the previous one"
		if i == 3 {
			want, from, after = 0, released, "the release"
		}
		if gap := hits[i].at.Sub(from); gap != want {
			t.Errorf("start %d came %v after %s, want %v at 50 rps", i+1, gap, after, want)
		}
	}
}

// TestWallClockPacing is the real-time sanity check of pacing: the fake
// clock proves the lane asks for the right waits; this proves real timers
// give it them. (Not parallel: a busy machine delays single arrivals.)
//
// wall clock: it measures real time on purpose.
func TestWallClockPacing(t *testing.T) {
	wallClock(t)
	up := newUpstream(t, nil)
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 20, MaxConcurrent: 1}}
		c.Rand = nil // the default jitter
	})
	for i := range 8 {
		b.enqueue(t, req(fmt.Sprint("w", i), up.URL))
	}
	waitFor(t, "all 8", func() bool { return up.count() == 8 })
	// Starts keep to a grid 50 ms apart: a loaded machine delays arrivals
	// but cannot make them early (the first one, which also connects, may
	// be delayed most: a slot of slack). A limiter that did not pace would
	// squeeze the span to ~0.
	hits := up.snapshot()
	interval := time.Second / 20
	if span := hits[7].at.Sub(hits[0].at); span < 6*interval {
		t.Errorf("starts 1-8 spanned %v, want >= %v (7 slots of %v, less one)", span, 6*interval, interval)
	}
}

// markSpy records, on the test's clock, when jobs are recorded in_flight.
type markSpy struct {
	*memory.Store
	now   func() time.Time
	mu    sync.Mutex
	marks map[domain.JobID]time.Time
}

func (s *markSpy) MarkInFlight(ctx context.Context, p *ports.MarkInFlightParams) error {
	s.mu.Lock()
	s.marks[p.ID] = s.now()
	s.mu.Unlock()
	return s.Store.MarkInFlight(ctx, p)
}

func (s *markSpy) Unwrap() *memory.Store { return s.Store }

func (s *markSpy) markedAt(id domain.JobID) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.marks[id]
	return at, ok
}

// TestInFlightIsRecordedOnlyForLongAttempts: an attempt is written to the
// store as in_flight once it has run for PersistInFlightAfter (1 s), and a
// shorter one never is.
func TestInFlightIsRecordedOnlyForLongAttempts(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/long" {
			sleep(t, r.Context(), 3*time.Second)
		} else {
			sleep(t, r.Context(), 999*time.Millisecond)
		}
	})
	spy := &markSpy{Store: newStore(t), now: clockOf(t).now, marks: map[domain.JobID]time.Time{}}
	b := setup(t, func(c *app.Config) { c.Store = spy })
	short := b.enqueue(t, req("short", up.URL+"/short"))
	long := b.enqueue(t, req("long", up.URL+"/long"))
	b.waitStatus(t, short, domain.StatusCompleted)
	if at, ok := spy.markedAt(short); ok {
		t.Fatalf("a 999 ms attempt was recorded in_flight at +%v", at.Sub(testT0))
	}
	waitFor(t, "the long attempt to be recorded", func() bool { _, ok := spy.markedAt(long); return ok })
	var started time.Time
	for _, h := range up.snapshot() {
		if h.path == "/long" {
			started = h.at
		}
	}
	if at, _ := spy.markedAt(long); at.Sub(started) != time.Second {
		t.Fatalf("the long attempt was recorded in_flight %v after it started, want 1s", at.Sub(started))
	}
	if j, _ := b.store.Get(t.Context(), long); j.Status != domain.StatusInFlight {
		t.Fatalf("the long attempt is %s in the store after 1 s", j.Status)
	}
	b.waitStatus(t, long, domain.StatusCompleted)
}

func TestWindowPagesBacklogInFIFOOrder(t *testing.T) {
	up := newUpstream(t, nil)
	host := strings.TrimPrefix(up.URL, "http://")
	// With a window of 4, most jobs cannot be handed to the lane directly and
	// must be paged in from the store.
	b := setup(t, func(c *app.Config) {
		c.WindowJobs = 4
		c.Rates.Hosts = map[string]domain.Rate{host: {RPS: 1000, MaxConcurrent: 1}}
	})
	const n = 40
	var ids []domain.JobID
	for i := range n {
		ids = append(ids, b.enqueue(t, req(fmt.Sprintf("w%02d", i), up.URL)))
	}
	waitFor(t, "all dispatched", func() bool { return up.count() == n })
	for i, h := range up.snapshot() {
		if want := fmt.Sprintf(`{"k":"w%02d"}`, i); h.body != want {
			t.Fatalf("dispatch %d was %s, want %s (FIFO)", i, h.body, want)
		}
	}
	for _, id := range ids {
		b.waitStatus(t, id, domain.StatusCompleted)
	}
}

func TestStartRecoversQueuedAndInFlightJobsInOrder(t *testing.T) {
	up := newUpstream(t, nil)
	host := strings.TrimPrefix(up.URL, "http://")
	// Rows left by a crashed run, some of them in flight.
	store := newStore(t)
	u, _ := domain.UpstreamOf(up.URL)
	gen := domain.NewIDGenerator(nil)
	var ids []domain.JobID
	for i := range 6 {
		j := domain.NewJob(gen.New(), req(fmt.Sprintf("r%d", i), up.URL), domain.SharedQueue(u), now(t))
		stored, _, err := store.Insert(t.Context(), j)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			_ = store.MarkInFlight(t.Context(), &ports.MarkInFlightParams{ID: stored.ID, At: now(t)})
		}
		ids = append(ids, stored.ID)
	}
	b := setup(t, func(c *app.Config) {
		c.Store = store
		c.Rates.Hosts = map[string]domain.Rate{host: {RPS: 1000, MaxConcurrent: 1}}
	})
	waitFor(t, "recovered jobs dispatched", func() bool { return up.count() == 6 })
	for i, h := range up.snapshot() {
		if want := fmt.Sprintf(`{"k":"r%d"}`, i); h.body != want {
			t.Fatalf("recovered dispatch %d = %s, want %s (FIFO, in-flight ones included)", i, h.body, want)
		}
	}
	for _, id := range ids {
		b.waitStatus(t, id, domain.StatusCompleted)
	}
}

func TestPanicFailsOnlyThatJob(t *testing.T) {
	up := newUpstream(t, nil)
	hk := newHooks(t)
	b := setup(t, func(c *app.Config) {
		c.Doer = panicky{next: &http.Client{}}
	})
	bad := req("bad", up.URL)
	bad.Headers["X-Panic"] = "1"
	bad.WebhookURL = hk.URL
	badID := b.enqueue(t, bad)
	goodID := b.enqueue(t, req("good", up.URL))
	j := b.waitStatus(t, badID, domain.StatusFailed)
	if j.Result.Reason != "internal panic" {
		t.Fatalf("panicked job reason = %q", j.Result.Reason)
	}
	b.waitStatus(t, goodID, domain.StatusCompleted)
	waitFor(t, "panic webhook", func() bool { return hk.count() == 1 })
	if p := hk.payloads(t)[string(badID)]; p.Status != "failed" || p.Reason != "internal panic" {
		t.Fatalf("panic webhook = %+v", p)
	}
	// The lane is still alive.
	b.waitStatus(t, b.enqueue(t, req("after", up.URL)), domain.StatusCompleted)
}

type panicky struct{ next ports.Doer }

func (p panicky) Do(r *http.Request) (*http.Response, error) {
	if r.Header.Get("X-Panic") != "" {
		panic("simulated bug")
	}
	return p.next.Do(r)
}

func TestWebhookEnqueuedOncePerJob(t *testing.T) {
	up := newUpstream(t, nil)
	hk := newHooks(t)
	b := setup(t, nil)
	var ids []domain.JobID
	for i := range 20 {
		r := req(fmt.Sprint("once", i), up.URL)
		r.WebhookURL = hk.URL
		ids = append(ids, b.enqueue(t, r))
	}
	waitFor(t, "20 webhooks", func() bool { return hk.count() >= 20 })
	elapse(t, time.Minute) // long past any retry: a second delivery would be in
	got := hk.payloads(t)  // fails the test on a duplicate delivery
	for _, id := range ids {
		if _, ok := got[string(id)]; !ok {
			t.Errorf("no webhook for %s", id)
		}
	}
}

func TestWebhookRetriesOnServerError(t *testing.T) {
	up := newUpstream(t, nil)
	var calls atomic.Int64
	hk := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		calls.Add(1)
		if n < 3 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	b := setup(t, nil)
	r := req("hookretry", up.URL)
	r.WebhookURL = hk.URL
	id := b.enqueue(t, r)
	b.waitStatus(t, id, domain.StatusCompleted)
	waitFor(t, "webhook delivered on third try", func() bool {
		j, err := b.svc.Get(t.Context(), id)
		return err == nil && j.Delivery != nil && j.Delivery.Status == domain.DeliveryDelivered
	})
	if j, _ := b.svc.Get(t.Context(), id); calls.Load() != 3 || j.Delivery.Attempts != 3 || j.Delivery.ResponseStatus != 200 {
		t.Fatalf("after %d calls: delivery %+v", calls.Load(), j.Delivery)
	}
}

func TestWebhookGivesUpAfterRetries(t *testing.T) {
	up := newUpstream(t, nil)
	hk := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusServiceUnavailable) })
	b := setup(t, nil)
	r := req("hookfail", up.URL)
	r.WebhookURL = hk.URL
	id := b.enqueue(t, r)
	waitFor(t, "delivery to fail", func() bool {
		j, err := b.svc.Get(t.Context(), id)
		return err == nil && j.Delivery != nil && j.Delivery.Status == domain.DeliveryFailed
	})
	j, _ := b.svc.Get(t.Context(), id)
	if hk.count() != 5 || j.Status != domain.StatusCompleted || j.Delivery.Attempts != 5 ||
		j.Delivery.Reason != "upstream returned 503" || j.Phase() != domain.PhaseNone {
		t.Fatalf("after %d deliveries: job %s, delivery %+v", hk.count(), j.Status, j.Delivery)
	}
}

func TestWebhookToSameHostAsTarget(t *testing.T) {
	// Dispatch and delivery wait in the same lane, one after the other.
	var hooks atomic.Int64
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/hook" {
			hooks.Add(1)
		}
	})
	host := strings.TrimPrefix(up.URL, "http://")
	b := setup(t, func(c *app.Config) { c.Rates.Hosts = map[string]domain.Rate{host: {RPS: 1000, MaxConcurrent: 1}} })
	for i := range 10 {
		r := req(fmt.Sprint("same", i), up.URL+"/work")
		r.WebhookURL = up.URL + "/hook"
		b.enqueue(t, r)
	}
	waitFor(t, "10 webhooks through the shared lane", func() bool { return hooks.Load() == 10 })
}

func TestSecretsNeverLogged(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(503) })
	b := setup(t, func(c *app.Config) { c.Retry.Attempts = 2 })
	r := req("secret", up.URL)
	r.Headers["Authorization"] = "Bearer TOPSECRET-1"
	r.Headers["X-Api-Key"] = "TOPSECRET-2"
	b.waitStatus(t, b.enqueue(t, r), domain.StatusFailed)
	for _, e := range b.logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		if strings.Contains(line, "TOPSECRET") {
			t.Fatalf("secret logged: %s", line)
		}
	}
}

// TestStopAbortsRunningAttemptsAndARestartRunsThemAgain: Stop waits for
// running attempts until its context ends, then aborts them; their jobs
// stay unfinished, and the next process on the store runs them again.
//
// wall clock: Stop's deadline is a real context deadline, and the kill and
// restart are those of a process.
func TestStopAbortsRunningAttemptsAndARestartRunsThemAgain(t *testing.T) {
	wallClock(t)
	t.Parallel()
	release := newGate(t)
	var calls atomic.Int64
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if calls.Add(1) == 1 {
			release.Wait(r.Context()) // the first attempt never ends by itself
			return
		}
		fmt.Fprint(w, "second process")
	})
	store := newStore(t)
	b := setup(t, func(c *app.Config) { c.Store = store })
	id := b.enqueue(t, req("stuck", up.URL))
	waitFor(t, "attempt running", func() bool { return up.count() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := b.svc.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want deadline exceeded (attempt aborted)", err)
	}
	// The aborted job is not recorded as failed: it runs again after restart.
	j, err := b.store.Get(t.Context(), id)
	if err != nil || j.Status.Terminal() {
		t.Fatalf("aborted job = %+v, %v; want it still pending", j, err)
	}
	late, err := b.svc.Enqueue(t.Context(), req("late", up.URL))
	if err != nil {
		// Enqueue after Stop still stores the job (it is recovered at the
		// next start); only dispatch stops.
		t.Fatalf("Enqueue after Stop: %v", err)
	}
	// A new process on the same store runs both.
	again := setup(t, func(c *app.Config) { c.Store = store })
	for _, id := range []domain.JobID{id, late.JobID} {
		if j := again.waitStatus(t, id, domain.StatusCompleted); string(j.Result.Body) != "second process" {
			t.Fatalf("job %s after the restart: %+v", id, j.Result)
		}
	}
}

func TestIdleLanesAreCollected(t *testing.T) {
	up := newUpstream(t, nil)
	const idle = 30 * time.Second
	b := setup(t, func(c *app.Config) { c.LaneIdleTimeout = idle })
	b.waitStatus(t, b.enqueue(t, req("a", up.URL)), domain.StatusCompleted)
	done := up.snapshot()[0].at
	// An empty lane lives for the idle timeout (its queue idles out first,
	// then the lane itself), not less, and is collected by twice it.
	elapse(t, idle-time.Millisecond)
	if n := len(b.svc.Health(t.Context()).Lanes); n != 1 {
		t.Fatalf("%d lanes %v after the job: collected before its idle timeout", n, since(t))
	}
	waitFor(t, "lane collected", func() bool { return len(b.svc.Health(t.Context()).Lanes) == 0 })
	if at := now(t).Sub(done); at > 2*idle {
		t.Fatalf("lane collected %v after its last work, want within %v", at, 2*idle)
	}
	// A new job recreates it.
	b.waitStatus(t, b.enqueue(t, req("b", up.URL)), domain.StatusCompleted)
}

// purgeSpy counts the rows the sweep purges.
type purgeSpy struct {
	*memory.Store
	purged atomic.Int64
}

func (s *purgeSpy) Purge(ctx context.Context, p *ports.PurgeParams) (int, error) {
	n, err := s.Store.Purge(ctx, p)
	s.purged.Add(int64(n))
	return n, err
}

func (s *purgeSpy) Unwrap() *memory.Store { return s.Store }

func TestSweepPurgesExpiredAndRequeuesStale(t *testing.T) {
	up := newUpstream(t, nil)
	ps := &purgeSpy{Store: newStore(t)}
	b := setup(t, func(c *app.Config) { c.Store = ps; c.StaleAfter = time.Minute }) // the default sweep: every minute
	u, _ := domain.UpstreamOf(up.URL)
	gen := domain.NewIDGenerator(nil)
	// An expired row…
	old := domain.NewJob(gen.New(), req("old", up.URL), domain.SharedQueue(u), now(t).Add(-25*time.Hour))
	old.ExpiresAt = now(t).Add(-time.Hour)
	old.Status = domain.StatusCompleted
	if _, _, err := b.store.Insert(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	// …and one stuck in flight for ten minutes that no attempt is running.
	stuck := domain.NewJob(gen.New(), req("stuck", up.URL), domain.SharedQueue(u), now(t))
	stuck.Status = domain.StatusInFlight
	stuck.DispatchedAt = now(t).Add(-10 * time.Minute)
	if _, _, err := b.store.Insert(t.Context(), stuck); err != nil {
		t.Fatal(err)
	}
	elapse(t, time.Minute-time.Millisecond)
	if j, _ := b.store.Get(t.Context(), stuck.ID); j.Status != domain.StatusInFlight || up.count() != 0 || ps.purged.Load() != 0 {
		t.Fatalf("before the first sweep: stuck job %s, %d dispatches, %d rows purged", j.Status, up.count(), ps.purged.Load())
	}
	waitFor(t, "purge", func() bool { return ps.purged.Load() == 1 })
	if since(t) != time.Minute {
		t.Fatalf("the sweep ran at +%v, want +1m (SweepInterval)", since(t))
	}
	if _, err := b.store.Get(t.Context(), old.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("purged row: %v", err)
	}
	b.waitStatus(t, stuck.ID, domain.StatusCompleted)
}

func TestGetAndSubscribe(t *testing.T) {
	release := newGate(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) { release.Wait(r.Context()); fmt.Fprint(w, "done") })
	b := setup(t, nil)
	if _, err := b.svc.Get(t.Context(), "nope"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Get(malformed) = %v", err)
	}
	if _, _, err := b.svc.Subscribe(t.Context(), "0123456789abcdef0123456789abcdef"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Subscribe(unknown) = %v", err)
	}
	id := b.enqueue(t, req("sub", up.URL))
	waitFor(t, "dispatch", func() bool { return up.count() == 1 })
	j, sub, err := b.svc.Subscribe(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if j.Status != domain.StatusInFlight {
		t.Fatalf("running job reported as %s", j.Status)
	}
	release.Open()
	if ev := recv(t, "the completed event", sub.C); ev.Type != domain.EventCompleted || string(ev.Result.Body) != "done" {
		t.Fatalf("event = %+v", ev)
	}
}

func TestHealth(t *testing.T) {
	up := newUpstream(t, nil)
	b := setup(t, func(c *app.Config) { c.MaxBodyBytes = 1234 })
	b.waitStatus(t, b.enqueue(t, req("h", up.URL)), domain.StatusCompleted)
	h := b.svc.Health(t.Context())
	if h.Status != "ok" || !h.Store.OK || h.Admission == nil || h.Admission.MaxBodyBytes != 1234 {
		t.Fatalf("health = %+v", h)
	}
	_ = b.store.Close()
	if h := b.svc.Health(t.Context()); h.Status != "degraded" || h.Store.OK || h.Store.Error == "" {
		t.Fatalf("health with a closed store = %+v", h)
	}
}

func TestStoreFailureIsUnavailable(t *testing.T) {
	b := setup(t, nil)
	_ = b.store.Close()
	_, err := b.svc.Enqueue(t.Context(), req("x", "http://127.0.0.1:1/"))
	if domain.CodeOf(err) != domain.CodeUnavailable {
		t.Fatalf("Enqueue on a closed store = %v (code %s), want unavailable", err, domain.CodeOf(err))
	}
}
