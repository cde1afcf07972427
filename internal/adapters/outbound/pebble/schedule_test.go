package pebble

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// TestScheduleReadsDoNotScan pins the plans of the reads job options
// added: beside 600 plain jobs (queued, in flight, finished) whose records
// are then made unreadable, PromoteDue, NextDue, Overdue, Counts and
// ListReady of one priority still answer exactly. They read only their own
// ranges (s/, d/, one priority's r/ range) and the records those name, so
// a plain job costs them nothing; and a plain job has no s/ or d/ entry at
// all.
func TestScheduleReadsDoNotScan(t *testing.T) {
	s := openTemp(t)
	ctx, now := t.Context(), time.Now()
	ids := domain.NewIDGenerator(nil)
	mk := func(key string) *domain.Job {
		return domain.NewJob(ids.New(), &domain.JobRequest{UserID: "u", IdempotentKey: key, Method: "GET", URL: "http://a.test/x"},
			"a.test:80", now)
	}
	var plain []*domain.Job
	for i := range 600 {
		j, _, err := s.Insert(ctx, mk(fmt.Sprint("plain-", i)))
		if err != nil {
			t.Fatal(err)
		}
		switch i % 3 {
		case 1:
			err = s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: j.ID, At: now})
		case 2:
			_, err = s.Finish(ctx, &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Now: now, DeliverIn: "hooks.test:80"})
		}
		if err != nil {
			t.Fatal(err)
		}
		plain = append(plain, j)
	}
	if err := s.read(func() error {
		if n, d := len(scanPrefix(t, s.db, prefixSched)), len(scanPrefix(t, s.db, prefixDue)); n != 0 || d != 0 {
			t.Fatalf("plain jobs wrote %d s/ and %d d/ entries, want none", n, d)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sched := mk("scheduled")
	sched.NotBefore = time.UnixMilli(now.Add(time.Second).UnixMilli())
	sched.ReadyQueue, sched.ExpiresAt = "", sched.NotBefore.Add(domain.QueuedTTL)
	late := mk("late")
	late.Deadline = time.UnixMilli(now.Add(-time.Second).UnixMilli())
	high := mk("high")
	high.Priority = domain.PriorityHigh
	if _, err := s.InsertBatch(ctx, []*domain.Job{sched, late, high}); err != nil {
		t.Fatal(err)
	}
	// Make every plain job's record unreadable: a read that loads one
	// fails.
	if err := s.read(func() error {
		for _, j := range plain {
			if err := s.db.Set(jobKey(nil, j.ID), []byte{0xee}, pebble.NoSync); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, plain[0].ID); err == nil {
		t.Fatal("a spoilt record read back")
	}
	if n, err := s.NextDue(ctx); err != nil || !n.Equal(sched.NotBefore) {
		t.Fatalf("NextDue = %v, %v", n, err)
	}
	if d, err := s.Overdue(ctx, &ports.OverdueParams{Now: now, Limit: 10}); err != nil || len(d) != 1 || d[0].ID != late.ID {
		t.Fatalf("Overdue = %v, %v", d, err)
	}
	if h, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: "a.test:80", Priority: domain.PriorityHigh, Limit: 10, Now: now}); err != nil ||
		len(h) != 1 || h[0].ID != high.ID {
		t.Fatalf("ListReady(high) = %v, %v", h, err)
	}
	if c, err := s.Counts(ctx); err != nil || c != (ports.Counts{Queued: 200 + 3, InFlight: 200, Deliveries: 200}) {
		t.Fatalf("Counts = %+v, %v", c, err)
	}
	if p, err := s.PromoteDue(ctx, &ports.PromoteParams{Now: now.Add(time.Minute), Limit: 10}); err != nil || len(p) != 1 || p[0].ID != sched.ID {
		t.Fatalf("PromoteDue = %v, %v", p, err)
	}
	// A plain job's ListReady reads its records, so it fails now: the
	// ranges above were the only reason the others did not.
	if _, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: "a.test:80", Limit: 10, Now: now}); err == nil {
		t.Fatal("ListReady of the normal range read no spoilt record")
	}
}

// TestPriorityOutsideTheThree: a job's priority is stored as the nearest of
// the three that ListReady lists and Position counts, so that no job waits
// where nothing reads (as in the other stores).
func TestPriorityOutsideTheThree(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	for _, tc := range []struct {
		p, want domain.Priority
	}{{5, domain.PriorityHigh}, {-3, domain.PriorityLow}} {
		j := domain.NewJob(domain.NewIDGenerator(nil).New(), &domain.JobRequest{UserID: "u", IdempotentKey: fmt.Sprint("odd", int(tc.p)),
			Method: "GET", URL: "http://a.test/x"}, "a.test:80", time.Now())
		j.Priority = tc.p
		stored, _, err := s.Insert(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		if stored.Priority != tc.want {
			t.Fatalf("Insert's job has priority %d, want %s", stored.Priority, tc.want)
		}
		js, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: "a.test:80", Priority: tc.want, Limit: 10, Now: time.Now()})
		if err != nil || len(js) != 1 || js[0].ID != j.ID {
			t.Fatalf("ListReady(%s) = %v, %v", tc.want, js, err)
		}
	}
	checkIndexes(t, s)
}
