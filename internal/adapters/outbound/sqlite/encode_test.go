package sqlite

import (
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// commitOne commits op alone, on the test's goroutine: the store is idle
// (its writer waits for an op), and the channels of the previous and the
// next op order this commit with the writer's.
func commitOne(t *testing.T, s *Store, op *storekit.Op) storekit.Result {
	t.Helper()
	op.Await()
	s.commit([]*storekit.Op{op})
	return op.Result()
}

func storedColumns(t *testing.T, s *Store, id domain.JobID) (urlPath, history string) {
	t.Helper()
	if err := s.rdb.QueryRowContext(t.Context(), "SELECT url_path, history FROM jobs WHERE id = ?", string(id)).
		Scan(&urlPath, &history); err != nil {
		t.Fatal(err)
	}
	return urlPath, history
}

// TestWriterBindsWhatTheCallerEncoded checks that the writer stores what
// encode made of an op on the caller's goroutine instead of encoding it
// again, and encodes an op itself when nothing did.
func TestWriterBindsWhatTheCallerEncoded(t *testing.T) {
	s := openTest(t)
	now := time.Now()
	j := domain.NewJob(domain.NewIDGenerator(nil).New(), &domain.JobRequest{UserID: "u", IdempotentKey: "k",
		URL: "http://a.test/real/path?q=1", Method: "GET"}, "a.test:80", now)
	op := &storekit.Op{Kind: storekit.OpInsert, Job: j}
	if err := encode(op); err != nil {
		t.Fatal(err)
	}
	e := op.Encoded.(*encodedOp)
	if e.job.urlPath != "/real/path" || e.job.headers != "{}" {
		t.Fatalf("encoded %+v", e.job)
	}
	e.job.urlPath = "/as/the/caller/encoded/it"
	r := commitOne(t, s, op)
	if r.Err != nil || !r.Fresh {
		t.Fatalf("insert: %+v", r)
	}
	if path, _ := storedColumns(t, s, j.ID); path != "/as/the/caller/encoded/it" {
		t.Fatalf("url_path %q: the writer encoded the job again", path)
	}

	history := []domain.Attempt{{At: now, Status: 200}}
	fin := &storekit.Op{Kind: storekit.OpFinish, ID: j.ID, Seq: r.Job.Seq, Finish: &ports.FinishParams{ID: j.ID, Seq: r.Job.Seq,
		Status: domain.StatusCompleted, Attempts: 1, Result: &domain.Result{ResponseStatus: 200}, Now: now, History: history}}
	if r := commitOne(t, s, fin); r.Err != nil {
		t.Fatal(r.Err)
	}
	want, err := storekit.EncodeHistory(history)
	if err != nil {
		t.Fatal(err)
	}
	if _, got := storedColumns(t, s, j.ID); got != want {
		t.Fatalf("history %q of a finish nobody encoded, want %q", got, want)
	}
}
