package schedule_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app/schedule"
	"github.com/aquiferhq/aquifer/internal/clocktest"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// dispatch records what the scheduler hands on.
type dispatch struct {
	mu      sync.Mutex
	offered []offer
	failed  []domain.JobID
	clock   *clocktest.Clock
	holds   func(domain.UpstreamKey) bool
	store   *memory.Store
}

type offer struct {
	key string
	at  time.Time
}

func (d *dispatch) Offer(j *domain.Job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.offered = append(d.offered, offer{j.IdempotentKey, d.clock.Now()})
}

func (d *dispatch) Holds(u domain.UpstreamKey) bool { return d.holds == nil || d.holds(u) }

func (d *dispatch) FailWaiting(ctx context.Context, j *domain.Job, reason string) error {
	_, err := d.store.Finish(ctx, &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusFailed,
		Result: &domain.Result{Reason: reason}, Now: d.clock.Now()})
	if err == nil {
		d.mu.Lock()
		d.failed = append(d.failed, j.ID)
		d.mu.Unlock()
	}
	return err
}

func (d *dispatch) snapshot() ([]offer, []domain.JobID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]offer(nil), d.offered...), append([]domain.JobID(nil), d.failed...)
}

var ids = domain.NewIDGenerator(nil)

func job(key string, clk *clocktest.Clock, notBefore, deadline time.Time) *domain.Job {
	req := &domain.JobRequest{UserID: "u", IdempotentKey: key, URL: "http://a.test/x", Method: "POST"}
	if err := req.Validate(); err != nil {
		panic(err)
	}
	req.Options.NotBefore, req.Options.Deadline = notBefore, deadline
	if err := req.ResolveOptions(clk.Now(), domain.OptionBounds{}); err != nil {
		panic(err)
	}
	return domain.NewJob(ids.New(), req, "a.test:80", clk.Now())
}

// flakyStore fails PromoteDue while failing is set.
type flakyStore struct {
	*memory.Store
	failing atomic.Bool
}

func (f *flakyStore) PromoteDue(ctx context.Context, p *ports.PromoteParams) ([]*domain.Job, error) {
	if f.failing.Load() {
		return nil, errors.New("disk on fire")
	}
	return f.Store.PromoteDue(ctx, p)
}

func start(t *testing.T, st ports.ScheduleStore, d *dispatch, clk *clocktest.Clock) *schedule.Scheduler {
	s := schedule.New(schedule.Config{Store: st, Clock: clk, Poll: time.Second, Batch: 2}, d)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func TestPromotesAtTheDueTimeInDueOrder(t *testing.T) {
	clk := clocktest.New(t0)
	drv := clocktest.NewDriver(t, clk)
	ms := memory.New(clk.Now)
	d := &dispatch{clock: clk, store: ms}
	// One job scheduled before the start: the scheduler finds it in the store.
	if _, _, err := ms.Insert(t.Context(), job("before-start", clk, t0.Add(5*time.Second), time.Time{})); err != nil {
		t.Fatal(err)
	}
	s := start(t, ms, d, clk)
	for i, off := range []time.Duration{3 * time.Second, 1500 * time.Millisecond, 3 * time.Second, 2 * time.Second, 2 * time.Second} {
		j := job(string(rune('a'+i)), clk, t0.Add(off), time.Time{})
		if _, _, err := ms.Insert(t.Context(), j); err != nil {
			t.Fatal(err)
		}
		s.Scheduled(j.NotBefore)
	}
	drv.Until("every job promoted", func() bool { o, _ := d.snapshot(); return len(o) == 6 })
	got, _ := d.snapshot()
	want := []offer{{"b", t0.Add(1500 * time.Millisecond)}, {"d", t0.Add(2 * time.Second)}, {"e", t0.Add(2 * time.Second)},
		{"a", t0.Add(3 * time.Second)}, {"c", t0.Add(3 * time.Second)}, {"before-start", t0.Add(5 * time.Second)}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("offers = %v, want %v (each at its due time, in due order)", got, want)
		}
	}
	if p, _ := s.Stats(); p != 6 {
		t.Fatalf("promoted = %d", p)
	}
}

func TestAFailedPromotionIsRetried(t *testing.T) {
	clk := clocktest.New(t0)
	drv := clocktest.NewDriver(t, clk)
	fs := &flakyStore{Store: memory.New(clk.Now)}
	fs.failing.Store(true)
	d := &dispatch{clock: clk, store: fs.Store}
	s := start(t, fs, d, clk)
	j := job("x", clk, t0.Add(time.Second), time.Time{})
	if _, _, err := fs.Insert(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	s.Scheduled(j.NotBefore)
	drv.For(3 * time.Second)
	if o, _ := d.snapshot(); len(o) != 0 {
		t.Fatalf("offered %v while the store failed", o)
	}
	fs.failing.Store(false)
	drv.Until("the promotion after the store recovered", func() bool { o, _ := d.snapshot(); return len(o) == 1 })
	if o, _ := d.snapshot(); o[0].at.After(t0.Add(5 * time.Second)) {
		t.Fatalf("promoted at %v: later than a retry after the store recovered", o[0].at)
	}
}

func TestFailsWaitingJobsPastTheirDeadlineInHeldLanesOnly(t *testing.T) {
	clk := clocktest.New(t0)
	drv := clocktest.NewDriver(t, clk)
	ms := memory.New(clk.Now)
	other := domain.UpstreamKey("b.test:80")
	d := &dispatch{clock: clk, store: ms, holds: func(u domain.UpstreamKey) bool { return u != other }}
	start(t, ms, d, clk)
	mine := job("mine", clk, time.Time{}, t0.Add(2*time.Second))
	theirs := job("theirs", clk, time.Time{}, t0.Add(2*time.Second))
	theirs.Queue, theirs.ReadyQueue = domain.QueueKey(other), domain.QueueKey(other)
	later := job("later", clk, time.Time{}, t0.Add(time.Hour))
	for _, j := range []*domain.Job{mine, theirs, later} {
		if _, _, err := ms.Insert(t.Context(), j); err != nil {
			t.Fatal(err)
		}
	}
	drv.Until("the overdue job failed", func() bool { _, f := d.snapshot(); return len(f) == 1 })
	drv.For(5 * time.Second)
	_, failed := d.snapshot()
	if len(failed) != 1 || failed[0] != mine.ID {
		t.Fatalf("failed %v, want only %s (the other lane is held elsewhere; the third is not due)", failed, mine.ID)
	}
	got, err := ms.Get(t.Context(), mine.ID)
	if err != nil || got.Result.Reason != domain.ReasonDeadlineExceeded || got.UpdatedAt.After(t0.Add(3*time.Second)) {
		t.Fatalf("overdue job = %+v, %v; want failed within a poll of its deadline", got, err)
	}
}
