package sqlite_test

import (
	"slices"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// v3Rows are jobs as the version-3 store wrote them: one queued in its
// lane (with an attempt behind it), one failed with nothing left to do, and
// one completed whose delivery is pending in the webhook receiver's lane.
var v3Rows = []string{
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, method, headers, body, webhook_url, lane, status, attempts,
		created_at, updated_at, expires_at, ready_lane, ready_seq, history, upstream, url_path) VALUES (4,
		'00000000000000000000000000000004', 'alice', 'queued', 'http://a.test/x', 'POST', '{"Content-Type":"text/plain"}',
		X'6869', 'http://h.test/h', 'http://a.test:80', 'queued', 1, 1000, 2000, 99999999999999, 'http://a.test:80', 9,
		'[{"at":1500,"dur_us":2500,"status":503}]', 'http://a.test:80', '/x')`,
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, method, lane, status, attempts, created_at, updated_at,
		expires_at, response_status, reason, upstream, url_path) VALUES (5, '00000000000000000000000000000005', 'alice',
		'failed', 'http://a.test/y', 'GET', 'http://a.test:80', 'failed', 3, 1001, 2001, 99999999999999, 500, 'boom',
		'http://a.test:80', '/y')`,
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, method, webhook_url, lane, status, attempts, created_at,
		updated_at, expires_at, response_status, ready_lane, ready_seq, delivery_status, delivery_attempts, upstream,
		url_path) VALUES (6, '00000000000000000000000000000006', 'bob', 'pending', 'http://a.test/z', 'POST',
		'http://h.test/h', 'http://a.test:80', 'completed', 1, 1002, 2002, 99999999999999, 200, 'http://h.test:80', 10,
		'pending', 2, 'http://a.test:80', '/z')`,
}

// TestMigratesVersion3 opens a database written by schema version 3 and
// checks that its jobs come out intact, with normal priority and no
// options, still ready in their queues (and counted as before), and that
// new jobs, scheduled ones among them, work beside them.
func TestMigratesVersion3(t *testing.T) {
	t.Parallel()
	s := openOldDB(t, "v3", v3Rows...)
	ctx, now := t.Context(), time.Now()

	get := func(id domain.JobID) *domain.Job {
		t.Helper()
		j, err := s.Get(ctx, id)
		if err != nil {
			t.Fatalf("Get(%s) after migration: %v", id, err)
		}
		if j.JobOptions != (domain.JobOptions{}) {
			t.Fatalf("migrated job %s has options %+v, want none", id, j.JobOptions)
		}
		return j
	}
	queued := get("00000000000000000000000000000004")
	if queued.Status != domain.StatusQueued || queued.Seq != 4 || queued.ReadyQueue != "http://a.test:80" || queued.ReadySeq != 9 ||
		queued.Attempts != 1 || string(queued.Body) != "hi" || queued.Headers["Content-Type"] != "text/plain" ||
		len(queued.History) != 1 || queued.History[0].Status != 503 || queued.Scheduled() {
		t.Fatalf("migrated queued job: %+v", queued)
	}
	failed := get("00000000000000000000000000000005")
	if failed.Status != domain.StatusFailed || failed.Result == nil || failed.Result.ResponseStatus != 500 ||
		failed.Result.Reason != "boom" || failed.ReadyQueue != "" || failed.Attempts != 3 {
		t.Fatalf("migrated failed job: %+v", failed)
	}
	pending := get("00000000000000000000000000000006")
	if pending.Status != domain.StatusCompleted || pending.Delivery == nil || pending.Delivery.Status != domain.DeliveryPending ||
		pending.Delivery.Attempts != 2 || pending.ReadyQueue != "http://h.test:80" || pending.ReadySeq != 10 {
		t.Fatalf("migrated job with a pending delivery: %+v", pending)
	}

	ready := func(queue domain.QueueKey, p domain.Priority) []int64 {
		t.Helper()
		return readySeqs(t, s, queue, p, now)
	}
	if got := ready("http://a.test:80", domain.PriorityNormal); !slices.Equal(got, []int64{4}) {
		t.Fatalf("ready in the upstream's lane after migration: %v, want [4]", got)
	}
	if got := ready("http://h.test:80", domain.PriorityNormal); !slices.Equal(got, []int64{6}) {
		t.Fatalf("ready in the receiver's lane after migration: %v, want [6]", got)
	}
	for _, p := range []domain.Priority{domain.PriorityHigh, domain.PriorityLow} {
		if got := ready("http://a.test:80", p); len(got) != 0 {
			t.Fatalf("migrated jobs ready at priority %s: %v", p, got)
		}
	}
	c, err := s.Counts(ctx)
	if err != nil || c.Queued != 1 || c.InFlight != 0 || c.Deliveries != 1 {
		t.Fatalf("Counts after migration = %+v, %v", c, err)
	}
	if next, err := s.NextDue(ctx); err != nil || !next.IsZero() {
		t.Fatalf("NextDue after migration = %v, %v; want nothing scheduled", next, err)
	}
	if od, err := s.Overdue(ctx, &ports.OverdueParams{Now: now, Limit: 10}); err != nil || len(od) != 0 {
		t.Fatalf("Overdue after migration = %v, %v; want none", od, err)
	}

	// New jobs: numbered after the old ones (the counter covers their
	// ready_seqs), queued behind them, scheduled ones promoted.
	plain, fresh, err := s.Insert(ctx, storetest.NewJob("alice", "new", "http://a.test:80"))
	if err != nil || !fresh || plain.Seq <= 10 || plain.ReadySeq <= 10 {
		t.Fatalf("Insert after migration = %+v, %v, %v", plain, fresh, err)
	}
	if n, err := s.Position(ctx, "http://a.test:80", plain.ReadySeq); err != nil || n != 1 {
		t.Fatalf("Position of a new job behind a migrated one = %d, %v; want 1", n, err)
	}
	sched := storetest.NewJob("alice", "later", "http://a.test:80")
	sched.NotBefore, sched.ReadyQueue = time.UnixMilli(now.Add(time.Minute).UnixMilli()), ""
	sched.Priority, sched.Timeout = domain.PriorityHigh, 3*time.Second
	if _, _, err := s.Insert(ctx, sched); err != nil {
		t.Fatal(err)
	}
	promoted, err := s.PromoteDue(ctx, &ports.PromoteParams{Now: now.Add(time.Hour), Limit: 10})
	if err != nil || len(promoted) != 1 || promoted[0].ID != sched.ID || promoted[0].ReadySeq <= plain.ReadySeq ||
		promoted[0].Timeout != 3*time.Second {
		t.Fatalf("PromoteDue after migration = %+v, %v", promoted, err)
	}
	if got := ready("http://a.test:80", domain.PriorityHigh); !slices.Equal(got, []int64{promoted[0].Seq}) {
		t.Fatalf("ready at high priority: %v, want the promoted job", got)
	}
	if got := ready("http://a.test:80", domain.PriorityNormal); !slices.Equal(got, []int64{4, plain.Seq}) {
		t.Fatalf("ready at normal priority: %v, want [4 %d]", got, plain.Seq)
	}
	retried, err := s.Retry(ctx, &ports.RetryParams{ID: failed.ID, Now: now})
	if err != nil || retried.ReadySeq <= promoted[0].ReadySeq || retried.Priority != domain.PriorityNormal {
		t.Fatalf("Retry of a migrated job = %+v, %v", retried, err)
	}
}

// readySeqs returns the seqs of the first ten jobs ready in queue at
// priority p, in order.
func readySeqs(t *testing.T, s *sqlite.Store, queue domain.QueueKey, p domain.Priority, now time.Time) []int64 {
	t.Helper()
	js, err := s.ListReady(t.Context(), &ports.ListReadyParams{Queue: queue, Priority: p, Limit: 10, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, j := range js {
		seqs = append(seqs, j.Seq)
	}
	return seqs
}
