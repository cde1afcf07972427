// Command genlayout5 wrote testdata/layout5, the fixture of
// TestMigrateLayout5: a pebble job store in key layout 5, as the store at
// commit 860000e wrote it (version 3 records, request bodies inline). It
// only makes sense built at such a commit (the store of today writes
// layout 6); it lives under testdata, out of the build, as the record of
// how the fixture was made:
//
//	git worktree add --detach /tmp/gen 860000e
//	mkdir /tmp/gen/cmd/genlayout5 && cp main.go /tmp/gen/cmd/genlayout5/
//	cd /tmp/gen && go run ./cmd/genlayout5 <dir>
//
// It writes what genlayout4 did, but with request bodies that vary with
// i%4 (as bodyOf says: 1 KiB, 7 bytes, none, empty). It writes 48 jobs: users alice, acme/bob, acme/carol and dave; queues
// a.test:80, b.test:443, pool:p1 and a.test:80|acme; priorities high,
// normal and low by i%3; and by i%8 a job queued (every other one
// scheduled for 2099, the rest with a deadline then), queued again after
// an attempt, in flight, completed with its delivery pending, failed with
// its delivery pending, completed, failed and delivered, and finished long
// ago: i%16 == 7 without a webhook, i%16 == 15 with its delivery pending
// (both expired). Jobs 11, 23, 35 and 47 are deleted after that. It prints
// the store's Counts and CountJobs.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/pebble"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

func main() {
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// bodyOf is job i's request body: 1 KiB of its number for i%4 == 0, a
// small JSON body for 1, none (nil) for 2, an empty one for 3.
// TestMigrateLayout5 has the same function.
func bodyOf(i int) []byte {
	switch i % 4 {
	case 0:
		return []byte(strings.Repeat(fmt.Sprintf("%04d", i), 256))
	case 1:
		return []byte(`{"i":5}`)
	case 2:
		return nil
	}
	return []byte{}
}

func run(dir string) error {
	ctx := context.Background()
	s, err := pebble.Open(ctx, pebble.Options{Dir: dir})
	if err != nil {
		return err
	}
	defer s.Close()
	users := []string{"alice", domain.Scope("acme", "bob"), domain.Scope("acme", "carol"), "dave"}
	lanes := []domain.QueueKey{"a.test:80", "b.test:443", "pool:p1", "a.test:80|acme"}
	paths := []string{"/v1/chat", "/v1/embed", "/hooks/in"}
	ids := domain.NewIDGenerator(nil)
	base := time.Date(2025, 9, 1, 12, 0, 0, 0, time.UTC)
	live := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC) // "now" of every write meant to stay live
	for i := range 48 {
		lane := lanes[(i/4)%4]
		req := &domain.JobRequest{UserID: users[i%4], IdempotentKey: fmt.Sprint("key-", i), Method: "POST",
			URL:     "http://" + string(lane.Upstream()) + paths[i%3] + "?token=s",
			Headers: map[string]string{"Content-Type": "application/json"}, WebhookURL: "http://hooks.test/h"}
		j := domain.NewJob(ids.New(), req, lane, base.Add(time.Duration(i)*time.Minute))
		j.ExpiresAt = live.Add(domain.QueuedTTL)
		j.Body = bodyOf(i)
		j.Priority = domain.Priorities[i%3]
		if lane == "pool:p1" {
			j.PoolID, j.URL = "p1", ""
		}
		if i%8 == 0 {
			if i%16 == 0 {
				j.NotBefore, j.ReadyQueue = live, ""
			} else {
				j.Deadline = live
			}
		}
		stored, _, err := s.Insert(ctx, j)
		if err != nil {
			return err
		}
		finish := func(st domain.Status, r *domain.Result, now time.Time, deliver domain.QueueKey) error {
			_, err := s.Finish(ctx, &ports.FinishParams{ID: stored.ID, Status: st, Attempts: 1, Result: r, Now: now, DeliverIn: deliver,
				History: []domain.Attempt{{At: base, Duration: 20 * time.Millisecond, Status: r.ResponseStatus}}})
			return err
		}
		switch i % 8 {
		case 1:
			err = s.Requeue(ctx, &ports.RequeueParams{ID: stored.ID, Phase: domain.PhaseDispatch, Attempts: 1, Now: live,
				History: []domain.Attempt{{At: base, Duration: 30 * time.Millisecond, Status: 503, Signal: domain.SignalRetryAfter}}})
		case 2:
			err = s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: stored.ID, At: base})
		case 3:
			err = finish(domain.StatusCompleted, &domain.Result{ResponseStatus: 201, Body: []byte("made")}, live, "hooks.test:80")
		case 4:
			err = finish(domain.StatusFailed, &domain.Result{ResponseStatus: 503, Reason: "upstream returned 503"}, live, "hooks.test:80")
		case 5:
			err = finish(domain.StatusCompleted, &domain.Result{ResponseStatus: 200, Body: []byte("ok")}, live, "")
		case 6:
			if err = finish(domain.StatusFailed, &domain.Result{Reason: "connection refused"}, live, "hooks.test:80"); err == nil {
				err = s.FinishDelivery(ctx, &ports.FinishDeliveryParams{ID: stored.ID, Delivered: true, Attempts: 1, Response: 204, Now: live})
			}
		case 7:
			deliver := domain.QueueKey("")
			if i%16 == 15 {
				deliver = "hooks.test:80"
			}
			err = finish(domain.StatusCompleted, &domain.Result{ResponseStatus: 200}, base, deliver)
		}
		if err == nil && i%12 == 11 {
			err = s.Delete(ctx, stored.ID)
		}
		if err != nil {
			return err
		}
	}
	c, err := s.Counts(ctx)
	if err != nil {
		return err
	}
	all, err := s.CountJobs(ctx, &ports.CountJobsParams{Now: time.Now()})
	if err != nil {
		return err
	}
	fmt.Printf("Counts %+v\nCountJobs %v\n", c, all)
	return nil
}
