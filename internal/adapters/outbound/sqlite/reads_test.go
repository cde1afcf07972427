package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// TestListingDoesNotHoldTheWriter keeps a listing's read open mid-way (its
// snapshot held, as a long listing or count holds it) and checks that the
// writer commits inserts, finishes and operator writes meanwhile.
func TestListingDoesNotHoldTheWriter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "a.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 20 {
		if _, _, err := s.Insert(ctx, storetest.NewJob("u", fmt.Sprint("k", i), "a.test:80")); err != nil {
			t.Fatal(err)
		}
	}
	q, args := listQuery(&ports.ListJobsParams{Filter: domain.JobFilter{UserID: "u"}, Limit: 100, Now: time.Now()})
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		t.Fatal("the listing found nothing")
	}

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	j, _, err := s.Insert(wctx, storetest.NewJob("u", "during", "a.test:80"))
	if err != nil {
		t.Fatalf("Insert while a listing is open: %v", err)
	}
	if _, err := s.Finish(wctx, &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusFailed, Attempts: 1,
		Result: &domain.Result{Reason: "x"}, Now: time.Now()}); err != nil {
		t.Fatalf("Finish while a listing is open: %v", err)
	}
	if _, err := s.Retry(wctx, &ports.RetryParams{ID: j.ID, Seq: j.Seq, Now: time.Now()}); err != nil {
		t.Fatalf("Retry while a listing is open: %v", err)
	}
	if err := s.PauseLane(wctx, domain.LanePause{Upstream: "http://a.test:80", At: time.Now()}); err != nil {
		t.Fatalf("PauseLane while a listing is open: %v", err)
	}
	// The open listing still reads the rows of its snapshot: the job
	// inserted after it began is not among them.
	n := 1
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 20 {
		t.Fatalf("the open listing read %d jobs, want the 20 of its snapshot", n)
	}
}
