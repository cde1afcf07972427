package pebble

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// TestCountsLeaveOutExpired: Counts reads the counters, which count a job
// until it is purged; it leaves out the jobs that have expired but are not
// purged yet, whatever they wait for (dispatch, an attempt in flight, the
// delivery of their result), and answers the same once they are purged.
// Scheduled jobs count as queued. It never reads the record of a finished
// job.
func TestCountsLeaveOutExpired(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	ids := domain.NewIDGenerator(nil)
	now := time.Now()
	past := now.Add(-time.Minute)
	insert := func(key string, edit func(*domain.Job)) *domain.Job {
		j := domain.NewJob(ids.New(), &domain.JobRequest{UserID: "u", IdempotentKey: key, URL: "http://a.test/x", Method: "POST",
			WebhookURL: "http://hooks.test/h"}, "a.test:80", now)
		if edit != nil {
			edit(j)
		}
		stored, fresh, err := s.Insert(ctx, j)
		if err != nil || !fresh {
			t.Fatalf("Insert(%s) = fresh %v, %v", key, fresh, err)
		}
		return stored
	}
	expire := func(j *domain.Job) { j.ExpiresAt = past }
	markInFlight := func(j *domain.Job) {
		if err := s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: j.ID, At: now}); err != nil {
			t.Fatal(err)
		}
	}
	// finish finishes j at "at": its delivery (if deliver) or its
	// retention starts then.
	finish := func(j *domain.Job, at time.Time, deliver bool) {
		p := &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Attempts: 1, Now: at}
		if deliver {
			p.DeliverIn = "hooks.test:80"
		}
		if _, err := s.Finish(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	longAgo := now.Add(-domain.QueuedTTL - time.Minute) // a delivery due then has expired

	insert("queued", nil)
	insert("scheduled", func(j *domain.Job) {
		j.NotBefore = now.Add(time.Hour)
		j.ReadyQueue, j.ExpiresAt = "", j.NotBefore.Add(domain.QueuedTTL)
	})
	markInFlight(insert("in-flight", nil))
	finish(insert("delivering", nil), now, true)
	finish(insert("done", nil), now, false)

	insert("queued-expired", expire)
	insert("scheduled-expired", func(j *domain.Job) {
		j.NotBefore = now.Add(time.Hour)
		j.ReadyQueue, j.ExpiresAt = "", past
	})
	markInFlight(insert("in-flight-expired", expire))
	finish(insert("delivering-expired", nil), longAgo, true)
	finish(insert("done-expired", nil), longAgo, false)

	want := ports.Counts{Queued: 2, InFlight: 1, Deliveries: 1}
	if c, err := s.Counts(ctx); err != nil || c != want {
		t.Fatalf("Counts = %+v, %v; want %+v", c, err, want)
	}
	checkIndexes(t, s)
	n, err := s.Purge(ctx, &ports.PurgeParams{Now: time.Now(), Limit: 100})
	if err != nil || n != 5 {
		t.Fatalf("Purge = %d, %v; want the 5 expired jobs", n, err)
	}
	if c, err := s.Counts(ctx); err != nil || c != want {
		t.Fatalf("Counts after the purge = %+v, %v; want %+v", c, err, want)
	}
	checkIndexes(t, s)

	// Counts reads no record of a finished job, however many expire
	// between two purge sweeps: one it read would fail it here.
	gone := insert("done-expired-again", nil)
	finish(gone, longAgo, false)
	if err := s.db.Set(jobKey(nil, gone.ID), []byte{0xff}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Counts(ctx); err != nil || c != want {
		t.Fatalf("Counts beside an expired finished job = %+v, %v; want %+v", c, err, want)
	}
}
