package sqlite

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// TestJobColumnsAreTheSharedRow: with its two body expressions read as the
// plain columns, this store's column list is the SQL stores' shared row, so
// storekit.ScanJob reads it.
func TestJobColumnsAreTheSharedRow(t *testing.T) {
	plain := strings.NewReplacer(requestBodyColumn, "body", responseBodyColumn, "response_body").Replace(jobColumns)
	if plain != storekit.JobColumns {
		t.Fatalf("jobColumns, bodies read plain:\n%s\nwant storekit.JobColumns:\n%s", plain, storekit.JobColumns)
	}
}

// bodyKeys returns the keys job_bodies holds, in order.
func bodyKeys(t *testing.T, s *Store) []int64 {
	t.Helper()
	rows, err := s.rdb.QueryContext(t.Context(), "SELECT key FROM job_bodies ORDER BY key")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var keys []int64
	for rows.Next() {
		var k int64
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return keys
}

// rowBodies returns what a job's row itself holds: its body and response
// body columns and its apart bits.
func rowBodies(t *testing.T, s *Store, id domain.JobID) (body, response []byte, apart int) {
	t.Helper()
	if err := s.rdb.QueryRowContext(t.Context(), "SELECT body, response_body, apart FROM jobs WHERE id = ?", string(id)).
		Scan(&body, &response, &apart); err != nil {
		t.Fatal(err)
	}
	return body, response, apart
}

// TestLargeBodiesLiveApart: a body of sideBodyMin bytes or more is written
// to job_bodies once and read back through every read; the row keeps
// neither. A retry forgets the response kept apart, a later small
// response is kept in the row and wins over the stale one, and deleting
// the job deletes its bodies.
func TestLargeBodiesLiveApart(t *testing.T) {
	s, err := Open(t.Context(), Options{Path: filepath.Join(t.TempDir(), "a.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, now := t.Context(), time.Now()
	large := bytes.Repeat([]byte("q"), sideBodyMin)
	j := storetest.NewJob("u", "large", "a.test:80")
	j.Body = large
	j, _, err = s.Insert(ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	smallBody := bytes.Repeat([]byte("s"), sideBodyMin-1)
	small := storetest.NewJob("u", "small", "a.test:80")
	small.Body = smallBody
	if small, _, err = s.Insert(ctx, small); err != nil {
		t.Fatal(err)
	}

	if body, _, apart := rowBodies(t, s, j.ID); body != nil || apart != apartRequest|apartRows {
		t.Fatalf("large job's row: body of %d bytes, apart %b; want no body and apart %b", len(body), apart, apartRequest|apartRows)
	}
	if body, _, apart := rowBodies(t, s, small.ID); !bytes.Equal(body, smallBody) || apart != 0 {
		t.Fatalf("small job's row: body of %d bytes, apart %b; want its body in the row", len(body), apart)
	}
	if keys := bodyKeys(t, s); !slices.Equal(keys, []int64{j.Seq * 2}) {
		t.Fatalf("job_bodies keys %v; want [%d] (the large request's alone)", keys, j.Seq*2)
	}
	got, err := s.Get(ctx, j.ID)
	if err != nil || !bytes.Equal(got.Body, large) {
		t.Fatalf("Get = %v; want the large body whole", err)
	}

	response := bytes.Repeat([]byte("r"), 3*sideBodyMin)
	if _, err := s.Finish(ctx, &ports.FinishParams{ID: j.ID, Status: domain.StatusFailed, Attempts: 1,
		Result: &domain.Result{ResponseStatus: 500, Body: response}, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, resp, apart := rowBodies(t, s, j.ID); resp != nil || apart != apartRequest|apartResponse|apartRows {
		t.Fatalf("after a large response: row response of %d bytes, apart %b", len(resp), apart)
	}
	if keys := bodyKeys(t, s); !slices.Equal(keys, []int64{j.Seq * 2, j.Seq*2 + 1}) {
		t.Fatalf("job_bodies keys %v; want the request's and the response's", keys)
	}
	if got, err := s.Get(ctx, j.ID); err != nil || got.Result == nil || !bytes.Equal(got.Result.Body, response) {
		t.Fatalf("Get after Finish = %v; want the large response whole", err)
	}

	if _, err := s.Retry(ctx, &ports.RetryParams{ID: j.ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, j.ID); err != nil || (got.Result != nil && len(got.Result.Body) > 0) || !bytes.Equal(got.Body, large) {
		t.Fatalf("Get after Retry = %v; want the request whole and no response body", err)
	}
	if _, err := s.Finish(ctx, &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Attempts: 1,
		Result: &domain.Result{ResponseStatus: 200, Body: []byte("ok")}, Now: now}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, j.ID); err != nil || got.Result == nil || string(got.Result.Body) != "ok" {
		t.Fatalf("Get after a small response = %v; want %q, not the stale large one", err, "ok")
	}

	if err := s.Delete(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if keys := bodyKeys(t, s); len(keys) != 0 {
		t.Fatalf("job_bodies keys %v after the job was deleted; want none", keys)
	}
	if got, err := s.Get(ctx, small.ID); err != nil || !bytes.Equal(got.Body, smallBody) {
		t.Fatalf("small job after the large one's delete: %v", err)
	}
}
