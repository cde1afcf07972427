package app_test

import (
	"fmt"
	"net/http"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

func poolReq(key string) *domain.JobRequest {
	return &domain.JobRequest{UserID: "u", IdempotentKey: key, PoolID: "readers", Method: "POST", Body: key}
}

func register(t *testing.T, b *bundle, id, url string, rps float64) {
	t.Helper()
	if _, err := b.svc.RegisterMember(t.Context(), &domain.MemberRegistration{PoolID: "readers", MemberID: id,
		Address: url, CapacityRPS: rps}); err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
}

func TestPoolFailoverAndShareOfAFailingMember(t *testing.T) {
	var failing atomic.Bool
	healthy1 := newUpstream(t, nil)
	healthy2 := newUpstream(t, nil)
	flaky := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	b := setup(t, nil)
	register(t, b, "h1", healthy1.URL+"/read", 100)
	register(t, b, "h2", healthy2.URL+"/read", 100)
	register(t, b, "flaky", flaky.URL+"/read", 100)

	var ids []domain.JobID
	for i := range 90 {
		ids = append(ids, b.enqueue(t, poolReq(fmt.Sprint("before", i))))
	}
	for _, id := range ids {
		b.waitStatus(t, id, domain.StatusCompleted)
	}
	before := flaky.count()
	if before < 15 || before > 45 { // ~30 of 90 with equal capacity
		t.Fatalf("flaky member got %d of 90 jobs while healthy", before)
	}

	failing.Store(true)
	ids = ids[:0]
	for i := range 90 {
		ids = append(ids, b.enqueue(t, poolReq(fmt.Sprint("after", i))))
	}
	for _, id := range ids {
		j := b.waitStatus(t, id, domain.StatusCompleted) // a 5xx is retried on another member
		if j.Result.ResponseStatus != 200 {
			t.Fatalf("job %s ended with %d", id, j.Result.ResponseStatus)
		}
	}
	after := flaky.count() - before
	if after > 15 {
		t.Fatalf("the failing member still got %d requests for 90 jobs; its share should fall", after)
	}
	var rep float64 = -1
	for _, m := range b.svc.Pools(t.Context())["readers"].Members {
		if m.ID == "flaky" {
			rep = m.Reputation
		}
	}
	if rep >= 0.5 || rep < 0 {
		t.Fatalf("flaky member reputation %v", rep)
	}
}

func TestPoolJobsWaitForMembers(t *testing.T) {
	up := newUpstream(t, nil)
	b := setup(t, nil)
	id := b.enqueue(t, poolReq("early"))
	elapse(t, time.Minute)
	if j, _ := b.svc.Get(t.Context(), id); j.Status != domain.StatusQueued {
		t.Fatalf("pool job with no members is %s; it should wait", j.Status)
	}
	register(t, b, "late", up.URL+"/x", 10)
	b.waitStatus(t, id, domain.StatusCompleted)
	if h := up.snapshot()[0]; h.path != "/x" || h.body != "early" {
		t.Fatalf("member got %+v", h)
	}
}

func TestPoolCeilingIsTheSumOfMembers(t *testing.T) {
	a := newUpstream(t, nil)
	c := newUpstream(t, nil)
	// The configured default (2 rps) must not cap the pool (the original's bug).
	b := setup(t, func(cfg *app.Config) { cfg.Rates.Defaults = domain.Rate{RPS: 2, MaxConcurrent: 1} })
	register(t, b, "a", a.URL, 30)
	register(t, b, "c", c.URL, 10)
	var ids []domain.JobID
	for i := range 60 {
		ids = append(ids, b.enqueue(t, poolReq(fmt.Sprint("sum", i))))
	}
	for _, id := range ids {
		b.waitStatus(t, id, domain.StatusCompleted)
	}
	// 60 jobs at 40 rps: 59 slots of 25 ms; at the 2 rps default it would
	// take 30 s.
	hits := append(a.snapshot(), c.snapshot()...)
	sort.Slice(hits, func(i, j int) bool { return hits[i].at.Before(hits[j].at) })
	if span := hits[len(hits)-1].at.Sub(hits[0].at); span != 59*25*time.Millisecond {
		t.Fatalf("60 pool jobs spanned %v; the pool runs at the sum of its members (40 rps): 1.475s", span)
	}
	if ratio := float64(a.count()) / float64(c.count()); ratio < 2.2 || ratio > 4 {
		t.Fatalf("a (30 rps) / c (10 rps) = %d / %d", a.count(), c.count())
	}
	// Each member hears its own share of the pool's rate, not the pool's.
	for _, m := range []struct {
		u    *upstream
		want string
	}{{a, "30.00"}, {c, "10.00"}} {
		if got := m.u.snapshot()[0].headers.Get("X-Aqueduct-Flow-Rate"); got != m.want {
			t.Errorf("member flow rate header %q, want %q", got, m.want)
		}
	}
}

// TestPoolMembersThatStopHeartbeatingAreEvicted: a member that misses three
// heartbeats in a row is evicted by the next pool sweep (every 5 s); one
// that keeps heartbeating stays.
func TestPoolMembersThatStopHeartbeatingAreEvicted(t *testing.T) {
	up := newUpstream(t, nil)
	b := setup(t, nil) // PoolSweep: the default 5 s
	beat := func(id string) {
		t.Helper()
		if _, err := b.svc.RegisterMember(t.Context(), &domain.MemberRegistration{PoolID: "readers", MemberID: id,
			Address: up.URL + "/" + id, CapacityRPS: 10, HeartbeatInterval: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	members := func() []string {
		var ids []string
		for _, m := range b.svc.Pools(t.Context())["readers"].Members {
			ids = append(ids, m.ID)
		}
		sort.Strings(ids)
		return ids
	}
	beat("quiet")
	beat("alive")
	for range 3 {
		elapse(t, 10*time.Second)
		beat("alive")
	}
	// At +30 s quiet has missed three intervals exactly: not yet more than
	// three, so the sweep at +30 s keeps it…
	if got := fmt.Sprint(members()); got != "[alive quiet]" {
		t.Fatalf("members at +%v: %s", since(t), got)
	}
	// …and the next one, at +35 s, evicts it.
	waitFor(t, "the silent member to be evicted", func() bool { return fmt.Sprint(members()) == "[alive]" })
	if since(t) != 35*time.Second {
		t.Fatalf("evicted at +%v, want +35s (the first sweep more than 3 × 10 s after its heartbeat)", since(t))
	}
}
