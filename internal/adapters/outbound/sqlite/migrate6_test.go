package sqlite_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// v5Rows are jobs as the version-5 store wrote them, every body in its row
// however large: one queued with a 4 KiB request, one completed with a
// 4 KiB response.
var v5Rows = []string{
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, method, body, lane, status, created_at, updated_at, expires_at,
		ready_lane, ready_seq, upstream, url_path) VALUES
		(1, '00000000000000000000000000000001', 'u', 'queued', 'http://a.test/q', 'POST', zeroblob(4096), 'a.test:80', 'queued',
			1000, 1000, 99999999999999, 'a.test:80', 1, 'a.test:80', '/q')`,
	`INSERT INTO jobs (seq, id, user_id, idempotent_key, url, method, lane, status, attempts, created_at, updated_at,
		expires_at, response_status, response_body, upstream, url_path) VALUES (2, '00000000000000000000000000000002', 'u',
		'done', 'http://a.test/d', 'POST', 'a.test:80', 'completed', 1, 1000, 1000, 99999999999999, 200,
		cast(printf('%.4096c', 'r') AS BLOB), 'a.test:80', '/d')`,
}

// TestMigratesVersion5 opens a database written by schema version 5: its
// jobs keep their bodies in their rows and read, finish and delete as
// before; a large response written after the migration goes apart and
// reads back whole.
func TestMigratesVersion5(t *testing.T) {
	t.Parallel()
	s := openOldDB(t, "v5", v5Rows...)
	ctx, now := t.Context(), time.Now()
	queued, err := s.Get(ctx, "00000000000000000000000000000001")
	if err != nil || !bytes.Equal(queued.Body, make([]byte, 4096)) {
		t.Fatalf("Get(queued) = %v; want its 4 KiB body", err)
	}
	done, err := s.Get(ctx, "00000000000000000000000000000002")
	if err != nil || done.Result == nil || string(done.Result.Body) != strings.Repeat("r", 4096) {
		t.Fatalf("Get(done) = %v; want its 4 KiB response", err)
	}
	r, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: "a.test:80", Limit: 10, Now: now})
	if err != nil || len(r) != 1 || len(r[0].Body) != 4096 {
		t.Fatalf("ListReady = %d jobs, %v; want the queued one with its body", len(r), err)
	}
	response := bytes.Repeat([]byte("n"), 5000)
	if _, err := s.Finish(ctx, &ports.FinishParams{ID: queued.ID, Seq: queued.Seq, Status: domain.StatusCompleted, Attempts: 1,
		Result: &domain.Result{ResponseStatus: 200, Body: response}, Now: now}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, queued.ID)
	if err != nil || len(got.Body) != 4096 || got.Result == nil || !bytes.Equal(got.Result.Body, response) {
		t.Fatalf("after Finish: %v; want the old request and the new response whole", err)
	}
	for _, id := range []domain.JobID{queued.ID, done.ID} {
		if err := s.Delete(ctx, id); err != nil {
			t.Fatalf("Delete(%s): %v", id, err)
		}
	}
}
