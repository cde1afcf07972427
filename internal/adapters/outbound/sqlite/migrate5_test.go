package sqlite_test

import (
	"slices"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// v4Rows are jobs as the version-4 store wrote them: two queued in their
// lane (one at high priority), one in flight, one completed with its
// delivery pending in the receiver's lane, one failed with nothing left to
// do, one scheduled, and one queued whose time ran out.
var v4Rows = []string{
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, method, lane, status, created_at, updated_at, expires_at,
		ready_lane, ready_seq, upstream, url_path) VALUES
		(1, '00000000000000000000000000000001', 'u', 'queued', 'http://a.test/q', 'POST', 'a.test:80', 'queued', 1000, 1000,
			99999999999999, 'a.test:80', 1, 'a.test:80', '/q'),
		(3, '00000000000000000000000000000003', 'u', 'flight', 'http://a.test/f', 'POST', 'a.test:80', 'in_flight', 1000, 1000,
			99999999999999, 'a.test:80', 3, 'a.test:80', '/f'),
		(7, '00000000000000000000000000000007', 'u', 'expired', 'http://a.test/e', 'POST', 'a.test:80', 'queued', 1000, 1000,
			1000, 'a.test:80', 7, 'a.test:80', '/e')`,
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, method, lane, status, created_at, updated_at, expires_at,
		ready_lane, ready_seq, upstream, url_path, priority) VALUES (2, '00000000000000000000000000000002', 'u', 'high',
		'http://a.test/h', 'POST', 'a.test:80', 'queued', 1000, 1000, 99999999999999, 'a.test:80', 2, 'a.test:80', '/h', 1)`,
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, method, webhook_url, lane, status, attempts, created_at,
		updated_at, expires_at, response_status, ready_lane, ready_seq, delivery_status, upstream, url_path) VALUES (4,
		'00000000000000000000000000000004', 'u', 'pending', 'http://a.test/p', 'POST', 'http://h.test/h', 'a.test:80',
		'completed', 1, 1000, 1000, 99999999999999, 200, 'h.test:80', 8, 'pending', 'a.test:80', '/p')`,
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, method, lane, status, attempts, created_at, updated_at,
		expires_at, response_status, upstream, url_path) VALUES (5, '00000000000000000000000000000005', 'u', 'failed',
		'http://a.test/x', 'POST', 'a.test:80', 'failed', 3, 1000, 1000, 99999999999999, 500, 'a.test:80', '/x')`,
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, method, lane, status, created_at, updated_at, expires_at,
		upstream, url_path, not_before) VALUES (6, '00000000000000000000000000000006', 'u', 'later', 'http://a.test/l', 'POST',
		'a.test:80', 'queued', 1000, 1000, 99999999999999, 'a.test:80', '/l', 99999999999)`,
}

// TestMigratesVersion4 opens a database written by schema version 4, whose
// jobs_ready holds no status: the rebuilt index must count and order the
// migrated jobs as the rows say, and keep doing so as they move on.
func TestMigratesVersion4(t *testing.T) {
	t.Parallel()
	s := openOldDB(t, "v4", v4Rows...)
	ctx, now := t.Context(), time.Now()
	counts := func(queued, inFlight, deliveries int) {
		t.Helper()
		c, err := s.Counts(ctx)
		if err != nil || c.Queued != int64(queued) || c.InFlight != int64(inFlight) || c.Deliveries != int64(deliveries) {
			t.Fatalf("Counts = %+v, %v; want %d queued (the scheduled one included), %d in flight, %d deliveries",
				c, err, queued, inFlight, deliveries)
		}
	}
	counts(3, 1, 1)
	ready := func(queue domain.QueueKey, p domain.Priority) []int64 {
		t.Helper()
		return readySeqs(t, s, queue, p, now)
	}
	if got := ready("a.test:80", domain.PriorityNormal); !slices.Equal(got, []int64{1}) {
		t.Fatalf("ready at normal priority: %v, want [1] (not the one in flight, nor the expired one)", got)
	}
	if got := ready("a.test:80", domain.PriorityHigh); !slices.Equal(got, []int64{2}) {
		t.Fatalf("ready at high priority: %v, want [2]", got)
	}
	if got := ready("h.test:80", domain.PriorityNormal); !slices.Equal(got, []int64{4}) {
		t.Fatalf("ready in the receiver's lane: %v, want [4]", got)
	}
	// Ahead of a job at ready_seq 9: the two queued and live ones.
	if n, err := s.Position(ctx, "a.test:80", 9); err != nil || n != 2 {
		t.Fatalf("Position = %d, %v; want 2", n, err)
	}

	// The migrated jobs move on: the delivery ends, the queued one is
	// marked in flight, the one in flight is finished with a delivery due.
	if err := s.FinishDelivery(ctx, &ports.FinishDeliveryParams{ID: "00000000000000000000000000000004", Seq: 4,
		Delivered: true, Attempts: 1, Now: now}); err != nil {
		t.Fatal(err)
	}
	counts(3, 1, 0)
	// MarkInFlight is not waited for; the Finish after it is, and the
	// writer keeps their order.
	if err := s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: "00000000000000000000000000000001", Seq: 1, At: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, &ports.FinishParams{ID: "00000000000000000000000000000003", Seq: 3, Status: domain.StatusCompleted,
		Attempts: 1, Result: &domain.Result{ResponseStatus: 200}, Now: now, DeliverIn: "h.test:80"}); err != nil {
		t.Fatal(err)
	}
	counts(2, 1, 1)
	if n, err := s.Position(ctx, "a.test:80", 9); err != nil || n != 1 {
		t.Fatalf("Position after a mark in flight = %d, %v; want 1", n, err)
	}
}
