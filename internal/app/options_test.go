package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

func secs(v float64) *float64 { return &v }

// laneBuffered is how much work u's lane holds in memory.
func laneBuffered(t *testing.T, b *bundle, u domain.UpstreamKey) int {
	t.Helper()
	for _, ls := range b.svc.Health(t.Context()).Lanes {
		if ls.Lane == string(u) {
			return ls.Buffered
		}
	}
	return 0
}

func TestScheduledJobsWaitOutsideTheirLaneAndRunOnTime(t *testing.T) {
	up := newUpstream(t, nil)
	b := setup(t, nil)
	t0 := now(t)
	late := req("in-60s", up.URL)
	late.Options.DelaySeconds = secs(60)
	lateID := b.enqueue(t, late)
	soon := req("in-30s", up.URL)
	soon.Options.NotBefore = t0.Add(30 * time.Second)
	soonID := b.enqueue(t, soon)
	b.enqueue(t, req("now", up.URL))
	waitFor(t, "the job without a delay", func() bool { return up.count() == 1 })

	j, err := b.svc.Get(t.Context(), lateID)
	if err != nil {
		t.Fatal(err)
	}
	if !j.Scheduled() || j.Status != domain.StatusQueued || !j.NotBefore.Equal(t0.Add(time.Minute)) {
		t.Fatalf("scheduled job = %+v", j)
	}
	if pos, err := b.svc.Position(t.Context(), j); err != nil || pos != 0 {
		t.Fatalf("Position of a scheduled job = %d, %v; want 0", pos, err)
	}
	if n := laneBuffered(t, b, upstreamOf(t, up.URL)); n != 0 {
		t.Fatalf("the lane holds %d jobs in memory while the others are scheduled", n)
	}
	b.waitStatus(t, soonID, domain.StatusCompleted)
	b.waitStatus(t, lateID, domain.StatusCompleted)
	hits := up.snapshot()
	if len(hits) != 3 || hits[1].body != `{"k":"in-30s"}` || !hits[1].at.Equal(t0.Add(30*time.Second)) ||
		hits[2].body != `{"k":"in-60s"}` || !hits[2].at.Equal(t0.Add(time.Minute)) {
		for _, h := range hits {
			t.Logf("%s at +%v", h.body, h.at.Sub(t0))
		}
		t.Fatal("scheduled jobs did not run exactly when due")
	}
}

func TestDueJobsEnterTheirLaneInDueOrderAndObeyItsPace(t *testing.T) {
	up := newUpstream(t, nil)
	host := strings.TrimPrefix(up.URL, "http://")
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{host: {RPS: 10, MaxConcurrent: 1}}
	})
	t0 := now(t)
	// Submitted in reverse: due order is not submission order.
	for i := 4; i >= 0; i-- {
		r := req(fmt.Sprint("d", i), up.URL)
		r.Options.NotBefore = t0.Add(10*time.Second + time.Duration(i)*time.Millisecond)
		b.enqueue(t, r)
	}
	waitFor(t, "all five", func() bool { return up.count() == 5 })
	hits := up.snapshot()
	for i, h := range hits {
		if h.body != fmt.Sprintf(`{"k":"d%d"}`, i) {
			t.Fatalf("dispatch %d was %s: not in due order", i, h.body)
		}
		if i > 0 {
			if gap := h.at.Sub(hits[i-1].at); gap < 100*time.Millisecond {
				t.Fatalf("gap before dispatch %d = %v: the lane's pace (10/s) was not kept", i, gap)
			}
		}
	}
	if !hits[0].at.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("first due job ran at +%v, want +10s", hits[0].at.Sub(t0))
	}
}

func TestScheduledJobsSurviveARestart(t *testing.T) {
	up := newUpstream(t, nil)
	store := newStore(t)
	b := setup(t, func(c *app.Config) { c.Store = store })
	t0 := now(t)
	r := req("after-restart", up.URL)
	r.Options.DelaySeconds = secs(5)
	id := b.enqueue(t, r)
	stopService(t, b.svc)

	b2 := setup(t, func(c *app.Config) { c.Store = store })
	j := b2.waitStatus(t, id, domain.StatusCompleted)
	if hits := up.snapshot(); len(hits) != 1 || !hits[0].at.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("after the restart the job ran %d times, at %v; want once at +5s", len(hits), hits)
	}
	if j.Attempts != 1 {
		t.Fatalf("attempts = %d", j.Attempts)
	}
}

func TestDeadlineFailsAWaitingJobWithItsWebhook(t *testing.T) {
	up := newUpstream(t, nil)
	hk := newHooks(t)
	b := setup(t, nil)
	if _, err := b.svc.PauseLane(t.Context(), up.URL, "hold"); err != nil {
		t.Fatal(err)
	}
	t0 := now(t)
	r := req("worthless-later", up.URL)
	r.WebhookURL = hk.URL
	r.Options.MaxWaitSeconds = secs(3)
	id := b.enqueue(t, r)
	keep := b.enqueue(t, req("no-deadline", up.URL))
	j := b.waitStatus(t, id, domain.StatusFailed)
	if j.Result == nil || j.Result.Reason != domain.ReasonDeadlineExceeded || j.Attempts != 0 {
		t.Fatalf("job past its deadline = %+v, result %+v", j, j.Result)
	}
	if at := j.UpdatedAt.Sub(t0); at < 3*time.Second || at > 4*time.Second+time.Millisecond {
		t.Fatalf("failed at +%v; want within a poll of the deadline (+3s)", at)
	}
	waitFor(t, "its webhook", func() bool { return hk.count() == 1 })
	if p := hk.payloads(t)[string(id)]; p.Status != "failed" || p.Reason != domain.ReasonDeadlineExceeded {
		t.Fatalf("webhook = %+v", p)
	}
	if _, err := b.svc.ResumeLane(t.Context(), up.URL); err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, keep, domain.StatusCompleted)
	if hits := up.snapshot(); len(hits) != 1 || hits[0].body != `{"k":"no-deadline"}` {
		t.Fatalf("the target got %d requests; the job past its deadline must never go out", len(hits))
	}
}

func TestALaneNeverStartsAJobPastItsDeadline(t *testing.T) {
	// The lane is busy with a slow job when the other one's deadline
	// passes; the deadline poll is slower than the lane here, so the lane
	// itself must refuse to send it.
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			sleep(t, r.Context(), 3*time.Second)
		}
		w.WriteHeader(http.StatusOK)
	})
	host := strings.TrimPrefix(up.URL, "http://")
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{host: {RPS: 1000, MaxConcurrent: 1}}
		c.ScheduleLookahead = time.Hour
	})
	first := b.enqueue(t, req("slow", up.URL))
	r := req("tight", up.URL)
	r.Options.MaxWaitSeconds = secs(1)
	id := b.enqueue(t, r)
	b.waitStatus(t, first, domain.StatusCompleted)
	j := b.waitStatus(t, id, domain.StatusFailed)
	if j.Result.Reason != domain.ReasonDeadlineExceeded || up.count() != 1 {
		t.Fatalf("job = %+v (result %+v); target hit %d times", j, j.Result, up.count())
	}
}

func TestARetryThatWouldMissTheDeadlineFailsAtOnce(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusBadGateway) })
	b := setup(t, func(c *app.Config) { c.Outage.FailureThreshold = -1 })
	t0 := now(t)
	r := req("no-time-to-retry", up.URL)
	r.Options.MaxWaitSeconds = secs(5)
	r.Options.Retry = &domain.RetryRequest{BackoffSeconds: secs(10)}
	j := b.waitStatus(t, b.enqueue(t, r), domain.StatusFailed)
	if j.Attempts != 1 || j.Result.ResponseStatus != http.StatusBadGateway || j.Result.Reason != domain.ReasonDeadlineExceeded {
		t.Fatalf("job = attempts %d, result %+v", j.Attempts, j.Result)
	}
	if !j.UpdatedAt.Equal(t0) {
		t.Fatalf("failed at +%v, want at once", j.UpdatedAt.Sub(t0))
	}
}

func TestPerJobRetryPolicy(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	b := setup(t, func(c *app.Config) { c.Outage.FailureThreshold = -1 })
	r := req("own-policy", up.URL)
	r.Options.Retry = &domain.RetryRequest{MaxAttempts: new(int), BackoffSeconds: secs(1), MaxBackoffSeconds: secs(1.5)}
	*r.Options.Retry.MaxAttempts = 3
	j := b.waitStatus(t, b.enqueue(t, r), domain.StatusFailed)
	hits := up.snapshot()
	if j.Attempts != 3 || len(hits) != 3 {
		t.Fatalf("attempts = %d, hits = %d; want 3 (the job's own max_attempts)", j.Attempts, len(hits))
	}
	if g1, g2 := hits[1].at.Sub(hits[0].at), hits[2].at.Sub(hits[1].at); g1 != time.Second || g2 != 1500*time.Millisecond {
		t.Fatalf("gaps = %v, %v; want 1s, then 1.5s (doubled, capped)", g1, g2)
	}
	// A job without a policy of its own keeps the server's (5 attempts).
	j = b.waitStatus(t, b.enqueue(t, req("server-policy", up.URL)), domain.StatusFailed)
	if j.Attempts != 5 {
		t.Fatalf("server policy: attempts = %d, want 5", j.Attempts)
	}
}

func TestPerJobTimeout(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		<-r.Context().Done() // never answers
	})
	b := setup(t, nil) // the server's timeout is 30 s
	r := req("short-fuse", up.URL)
	r.Options.TimeoutSeconds = secs(0.2)
	r.Options.Retry = &domain.RetryRequest{MaxAttempts: new(int)}
	*r.Options.Retry.MaxAttempts = 1
	j := b.waitStatus(t, b.enqueue(t, r), domain.StatusFailed)
	if !strings.Contains(j.Result.Reason, "timed out") {
		t.Fatalf("reason = %q, want a timeout", j.Result.Reason)
	}
}

func TestPriorityOrdersALane(t *testing.T) {
	up := newUpstream(t, nil)
	host := strings.TrimPrefix(up.URL, "http://")
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{host: {RPS: 1000, MaxConcurrent: 1}}
	})
	if _, err := b.svc.PauseLane(t.Context(), up.URL, "fill"); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"low", "normal", "high", "normal", "high", "low", ""} {
		r := req(fmt.Sprintf("%d-%s", i, p), up.URL)
		r.Options.Priority = p
		b.enqueue(t, r)
	}
	settle(t) // the lane has taken in every job
	if _, err := b.svc.ResumeLane(t.Context(), up.URL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all seven", func() bool { return up.count() == 7 })
	var got []string
	for _, h := range up.snapshot() {
		got = append(got, strings.TrimSuffix(strings.TrimPrefix(h.body, `{"k":"`), `"}`))
	}
	want := "[2-high 4-high 1-normal 3-normal 6- 0-low 5-low]"
	if fmt.Sprint(got) != want {
		t.Fatalf("dispatch order %v, want %s", got, want)
	}
}

func TestLowPriorityIsNotStarvedByAStreamOfHighJobs(t *testing.T) {
	up := newUpstream(t, nil)
	host := strings.TrimPrefix(up.URL, "http://")
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{host: {RPS: 10, MaxConcurrent: 1}}
		c.PriorityAging = time.Second
	})
	t0 := now(t)
	// High jobs arrive as fast as the lane sends (10/s), with a backlog of
	// 20 from the start: strictly by priority the low job would never go.
	n := 0
	high := func() {
		r := req(fmt.Sprint("high-", n), up.URL)
		r.Options.Priority = "high"
		b.enqueue(t, r)
		n++
	}
	for range 20 {
		high()
	}
	low := req("low", up.URL)
	low.Options.Priority = "low"
	lowID := b.enqueue(t, low)
	for range 100 {
		elapse(t, 100*time.Millisecond)
		high()
	}
	j := b.waitStatus(t, lowID, domain.StatusCompleted)
	var lowAt time.Time
	before := 0
	for _, h := range up.snapshot() {
		if h.body == `{"k":"low"}` {
			lowAt = h.at
			break
		}
		before++
	}
	// The rule: a low job is passed only by high jobs that became due less
	// than 2 × aging (2 s) after it. The backlog is 2 s deep, so it goes
	// once the high jobs waiting were due after t0+2s: at about t0+4s.
	t.Logf("the low job went after %d high jobs, at +%v", before, lowAt.Sub(t0))
	if before < 20 || lowAt.Sub(t0) > 5*time.Second {
		t.Fatalf("the low job went after %d high jobs, at +%v (job %+v); want after the first 20, by +5s", before, lowAt.Sub(t0), j.ID)
	}
}

// batchSpy counts the store's inserts.
type batchSpy struct {
	*memory.Store
	single, batches atomic.Int64
}

func (s *batchSpy) Insert(ctx context.Context, j *domain.Job) (*domain.Job, bool, error) {
	s.single.Add(1)
	return s.Store.Insert(ctx, j)
}

func (s *batchSpy) InsertBatch(ctx context.Context, jobs []*domain.Job) ([]ports.InsertOutcome, error) {
	s.batches.Add(1)
	return s.Store.InsertBatch(ctx, jobs)
}

func (s *batchSpy) Unwrap() *memory.Store { return s.Store }

func TestEnqueueBatch(t *testing.T) {
	up := newUpstream(t, nil)
	spy := &batchSpy{Store: newStore(t)}
	b := setup(t, func(c *app.Config) { c.Store = spy })
	taken := b.enqueue(t, req("taken", up.URL))
	later := req("later", up.URL)
	later.Options.DelaySeconds = secs(10)
	bad := req("bad", "ftp://nope")
	badPrio := req("bad-prio", up.URL)
	badPrio.Options.Priority = "urgent"
	items, err := b.svc.EnqueueBatch(t.Context(), []*domain.JobRequest{
		req("a", up.URL), bad, req("taken", up.URL), later, req("a", up.URL), badPrio, req("b", up.URL),
	})
	if err != nil {
		t.Fatalf("EnqueueBatch: %v", err)
	}
	if spy.batches.Load() != 1 || spy.single.Load() != 1 {
		t.Fatalf("store calls: %d batches, %d single inserts; want one batch (and the earlier single)", spy.batches.Load(), spy.single.Load())
	}
	fieldOf := func(err error) string {
		var e *domain.Error
		if errors.As(err, &e) {
			return e.Field
		}
		return "?"
	}
	if len(items) != 7 {
		t.Fatalf("%d items", len(items))
	}
	if items[0].Err != nil || items[0].Result.Duplicate || fieldOf(items[1].Err) != "url" ||
		items[2].Err != nil || !items[2].Result.Duplicate || items[2].Result.JobID != taken ||
		items[3].Err != nil || items[3].Result.Duplicate ||
		items[4].Err != nil || !items[4].Result.Duplicate || items[4].Result.JobID != items[0].Result.JobID ||
		fieldOf(items[5].Err) != "priority" || items[6].Err != nil || items[6].Result.Duplicate {
		for i, it := range items {
			t.Logf("item %d: %+v %v", i, it.Result, it.Err)
		}
		t.Fatal("batch items are not what each request asked")
	}
	b.waitStatus(t, items[0].Result.JobID, domain.StatusCompleted)
	b.waitStatus(t, items[6].Result.JobID, domain.StatusCompleted)
	j := b.waitStatus(t, items[3].Result.JobID, domain.StatusCompleted)
	if at := j.History[0].At.Sub(j.CreatedAt); at != 10*time.Second {
		t.Fatalf("the delayed job of the batch ran at +%v, want +10s", at)
	}
	if _, err := b.svc.EnqueueBatch(t.Context(), make([]*domain.JobRequest, app.MaxBatch+1)); err == nil {
		t.Fatal("a batch over the limit was taken")
	}
}

func TestEnqueueBatchShedUnderPressureWritesNothing(t *testing.T) {
	up := newUpstream(t, nil)
	var pressure atomic.Bool
	b := setup(t, func(c *app.Config) {
		c.Admission.MemoryLimitMB, c.Admission.SampleEvery = 64, time.Nanosecond
		c.Admission.Memory = func() int64 {
			if pressure.Load() {
				return 1 << 30
			}
			return 1 << 20
		}
	})
	if _, err := b.svc.PauseLane(t.Context(), up.URL, "fill"); err != nil {
		t.Fatal(err)
	}
	first := b.enqueue(t, req("first", up.URL))
	pressure.Store(true)
	elapse(t, time.Millisecond) // past the admission sample
	_, err := b.svc.EnqueueBatch(t.Context(), []*domain.JobRequest{req("x", up.URL), req("y", up.URL)})
	var rej *domain.RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("EnqueueBatch over the limit = %v, want a rejection", err)
	}
	if n, err := b.store.Counts(t.Context()); err != nil || n.Queued != 1 {
		t.Fatalf("after the rejected batch the store holds %+v (%v); want only the first job", n, err)
	}
	// A batch of duplicates only is still answered.
	items, err := b.svc.EnqueueBatch(t.Context(), []*domain.JobRequest{req("first", up.URL)})
	if err != nil || len(items) != 1 || !items[0].Result.Duplicate || items[0].Result.JobID != first {
		t.Fatalf("duplicate batch under pressure = %+v, %v", items, err)
	}
}

func TestOperatorRetryOfAJobPastItsDeadlineRunsIt(t *testing.T) {
	up := newUpstream(t, nil)
	b := setup(t, nil)
	if _, err := b.svc.PauseLane(t.Context(), up.URL, "hold"); err != nil {
		t.Fatal(err)
	}
	r := req("retry-me", up.URL)
	r.Options.MaxWaitSeconds = secs(1)
	id := b.enqueue(t, r)
	b.waitStatus(t, id, domain.StatusFailed)
	if _, err := b.svc.ResumeLane(t.Context(), up.URL); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Retry(t.Context(), id); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	j := b.waitStatus(t, id, domain.StatusCompleted)
	if !j.Deadline.IsZero() || up.count() != 1 {
		t.Fatalf("retried job = %+v; target hit %d times", j, up.count())
	}
}
