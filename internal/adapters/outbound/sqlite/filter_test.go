package sqlite_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// TestFiltersMatchTheDomainRule lists and counts with the filters whose SQL
// this store builds in special ways (repeated, complete and unknown status
// sets; a tenant with a user_id, or holding the scope separator; q with
// characters that are wildcards elsewhere, and letters outside ASCII,
// which must not fold) and checks each against domain.JobFilter.Matches.
func TestFiltersMatchTheDomainRule(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, sqlite.SyncFull)
	defer s.Close()
	users := []string{"plain", domain.Scope("acme", "alice"), domain.Scope("acme", "bob"), "a\x1fb\x1fc", domain.Scope("a", "x")}
	paths := []string{"/100%/done", "/under_score", "/CAFÉ/menu", "/café/menu", "/it's"}
	var all []*domain.Job
	for i := range 40 {
		j := storetest.NewJob(users[i%len(users)], fmt.Sprint("k", i), "a.test:80")
		j.URL = "http://a.test" + paths[i%len(paths)]
		stored, _, err := s.Insert(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 4 {
		case 1:
			if _, err := s.Finish(ctx, &ports.FinishParams{ID: stored.ID, Seq: stored.Seq, Status: domain.StatusFailed, Attempts: 1,
				Result: &domain.Result{Reason: "Refused: 100% of _tries_ (ÉCHEC)"}, Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
		case 2:
			if _, err := s.Finish(ctx, &ports.FinishParams{ID: stored.ID, Seq: stored.Seq, Status: domain.StatusCompleted, Attempts: 1,
				Result: &domain.Result{ResponseStatus: 200}, Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Get(ctx, stored.ID)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got)
	}
	slices.Reverse(all)
	st := func(ss ...domain.Status) []domain.Status { return ss }
	for _, f := range []domain.JobFilter{
		{Statuses: st(domain.StatusFailed, domain.StatusFailed)},
		{Statuses: st(domain.StatusQueued, domain.StatusInFlight, domain.StatusCompleted, domain.StatusFailed)},
		{Statuses: st(domain.StatusQueued, domain.StatusInFlight, domain.StatusCompleted, domain.StatusFailed, "bogus")},
		{Statuses: st("bogus")},
		{Statuses: st("bogus", domain.StatusCompleted)},
		{Tenant: "acme", UserID: domain.Scope("acme", "bob")},
		{Tenant: "acme", UserID: "plain"},
		{Tenant: "zeta", UserID: domain.Scope("acme", "bob")},
		{Tenant: "a"},
		{Tenant: "a\x1fb"},
		{Q: "%"},
		{Q: "_"},
		{Q: "100%"},
		{Q: "'"},
		{Q: "café"},
		{Q: "CAFÉ"},
		{Q: "échec"},
		{Q: "ÉCHEC"},
		{Q: "refused: 100"},
		{Q: "REFUSED: 100%"},
	} {
		var want []domain.JobID
		wantCounts := map[domain.Status]int64{}
		for _, j := range all {
			if f.Matches(j) {
				want = append(want, j.ID)
			}
			if f.MatchesIgnoringStatus(j) {
				wantCounts[j.Status]++
			}
		}
		jobs, err := s.ListJobs(ctx, &ports.ListJobsParams{Filter: f, Limit: 100, Now: time.Now()})
		if err != nil {
			t.Fatalf("filter %#v: %v", f, err)
		}
		var got []domain.JobID
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("filter %#v listed %d jobs, want %d", f, len(got), len(want))
		}
		counts, err := s.CountJobs(ctx, &ports.CountJobsParams{Filter: f, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(counts) != fmt.Sprint(wantCounts) {
			t.Errorf("filter %#v counted %v, want %v", f, counts, wantCounts)
		}
	}
}
