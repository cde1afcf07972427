package app_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// budgetAPI is a destination with a GitHub-style budget: limit requests per
// fixed window of period, windows starting at testT0, counted as requests
// arrive; a request with nothing left gets a 429 (with remaining 0 and the
// reset, as GitHub answers). Each answer takes latency, so requests are
// in flight when the count moves. Each credential (Authorization header)
// has a budget of its own, as with a real API's per-account limits.
type budgetAPI struct {
	*upstream
	limit  int
	period time.Duration

	mu       sync.Mutex
	used     map[string]map[int64]int // credential → window index → requests served
	rejected int
}

func newBudgetAPI(t *testing.T, limit int, period, latency time.Duration) *budgetAPI {
	a := &budgetAPI{limit: limit, period: period, used: map[string]map[int64]int{}}
	a.upstream = newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		now := clockOf(t).now()
		win := int64(now.Sub(testT0) / period)
		reset := testT0.Add(time.Duration(win+1) * period)
		key := r.Header.Get("Authorization")
		a.mu.Lock()
		used := a.used[key]
		if used == nil {
			used = map[int64]int{}
			a.used[key] = used
		}
		ok := used[win] < limit
		if ok {
			used[win]++
		} else {
			a.rejected++
		}
		left := limit - used[win]
		a.mu.Unlock()
		sleep(t, r.Context(), latency)
		h := w.Header()
		h.Set("X-RateLimit-Limit", strconv.Itoa(limit))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(left))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
		if !ok {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	return a
}

// served returns the requests served per window for credential key ("" for
// none), in window order, and the 429s for every credential.
func (a *budgetAPI) served(key string) (perWindow []int, rejected int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var last int64 = -1
	for w := range a.used[key] {
		last = max(last, w)
	}
	for w := int64(0); w <= last; w++ {
		perWindow = append(perWindow, a.used[key][w])
	}
	return perWindow, a.rejected
}

// runBudget enqueues n jobs to a and waits for every one to finish.
func runBudget(t *testing.T, b *bundle, a *budgetAPI, n int, during func()) {
	t.Helper()
	ids := make([]domain.JobID, n)
	for i := range n {
		ids[i] = b.enqueue(t, req(fmt.Sprintf("k%d", i), a.URL))
	}
	if during != nil {
		during()
	}
	for _, id := range ids {
		b.waitStatus(t, id, domain.StatusCompleted)
	}
}

// TestBudgetPacingNeverExhaustsTheWindow: 1,000 jobs to a destination
// allowing 100 requests per 10 s, with a lane ceiling that alone would
// spend each window in a fraction of a second. Budget pacing spreads every
// window to its reset: no 429 at all, and at least 90 % of each full
// window used. The lane view says the budget holds the lane, and why.
func TestBudgetPacingNeverExhaustsTheWindow(t *testing.T) {
	a := newBudgetAPI(t, 100, 10*time.Second, 50*time.Millisecond)
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(a.upstream): {RPS: 200, MaxConcurrent: 8}}
	})
	runBudget(t, b, a, 1000, func() {
		waitFor(t, "the second window", func() bool { return a.count() >= 150 })
		v, err := b.svc.Lane(t.Context(), a.URL)
		if err != nil {
			t.Fatal(err)
		}
		if v.Mode != "budget" || !strings.HasPrefix(v.ModeReason, "budget: ") || !strings.Contains(v.ModeReason, "of 100 left") ||
			!strings.Contains(v.ModeReason, "(github)") {
			t.Errorf("lane mode %q (%q), want budget with the window in words", v.Mode, v.ModeReason)
		}
		if v.RPS != 200 {
			t.Errorf("lane pace %v: budget pacing holds the queue, not the lane's own pace", v.RPS)
		}
		if len(v.Queues) != 1 || v.Queues[0].Budget == nil {
			t.Fatalf("queues %+v: want the shared queue with its budget", v.Queues)
		}
		if qb := v.Queues[0].Budget; qb.Limit != 100 || qb.Source != "github" || !(qb.RPS > 0 && qb.RPS < 10) ||
			qb.ResetAt.Sub(testT0)%(10*time.Second) != 0 {
			t.Errorf("queue budget %+v: want a 100-request github window resetting on a 10 s boundary, paced below 10 rps", qb)
		}
	})
	perWindow, rejected := a.served("")
	t.Logf("served per 10 s window %v, 429s %d", perWindow, rejected)
	if rejected != 0 {
		t.Fatalf("%d requests answered 429 (windows %v)", rejected, perWindow)
	}
	full := perWindow[:len(perWindow)-1] // the last window ran out of work
	total := 0
	for i, n := range full {
		if n < 90 {
			t.Errorf("window %d served %d of 100, want >= 90 (all: %v)", i, n, perWindow)
		}
		total += n
	}
	if len(full) < 9 || total+perWindow[len(perWindow)-1] != 1000 {
		t.Fatalf("windows %v: want 1000 requests over at least ten windows", perWindow)
	}
}

// TestBudgetPacingOff: with budget_pacing: false the same lane runs at its
// ceiling until the window is gone — the burst-and-stall pattern — and the
// requests in flight when remaining reaches 0 are answered 429.
func TestBudgetPacingOff(t *testing.T) {
	a := newBudgetAPI(t, 100, 10*time.Second, 50*time.Millisecond)
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(a.upstream): {RPS: 200, MaxConcurrent: 8, NoBudget: true}}
	})
	runBudget(t, b, a, 300, nil)
	perWindow, rejected := a.served("")
	t.Logf("served per 10 s window %v, 429s %d", perWindow, rejected)
	if rejected == 0 {
		t.Fatalf("no 429 without budget pacing (windows %v): the test does not exercise the budget", perWindow)
	}
	// Each window is spent in its first half second: a burst, then a stall.
	if first := a.snapshot()[99].at.Sub(testT0); first > time.Second {
		t.Fatalf("the first window's 100 requests took %v, want a burst", first)
	}
	v, err := b.svc.Lane(t.Context(), a.URL)
	if err != nil {
		t.Fatal(err)
	}
	if v.Mode == "budget" {
		t.Fatalf("lane mode budget with budget pacing off (%q)", v.ModeReason)
	}
}

// TestLaneModeNamesWhatHoldsThePace: a destination that says nothing runs
// static at its ceiling; one that sends X-Aqueduct-Rps is signalled.
func TestLaneModeNamesWhatHoldsThePace(t *testing.T) {
	quiet := newUpstream(t, nil)
	loud := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.Header().Set("X-Aqueduct-Rps", "25") })
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(quiet): {RPS: 50, MaxConcurrent: 2}, hostOf(loud): {RPS: 400, MaxConcurrent: 1}}
	})
	b.waitStatus(t, b.enqueue(t, req("q", quiet.URL)), domain.StatusCompleted)
	b.waitStatus(t, b.enqueue(t, req("l", loud.URL)), domain.StatusCompleted)
	for _, tc := range []struct{ url, mode, reason string }{
		{quiet.URL, "static", "static: the configured ceiling, 50 rps, 2 concurrent"},
		{loud.URL, "signalled", "signalled: x-aqueduct holds 25 rps, 1 concurrent (ceiling 400 rps, 1)"},
	} {
		v, err := b.svc.Lane(t.Context(), tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if v.Mode != tc.mode || v.ModeReason != tc.reason {
			t.Errorf("%s: mode %q (%q), want %q (%q)", tc.url, v.Mode, v.ModeReason, tc.mode, tc.reason)
		}
	}
	h := b.svc.Health(t.Context())
	for _, l := range h.Lanes {
		if l.Mode == "" || l.ModeReason == "" {
			t.Errorf("health lane %s: mode %q (%q)", l.Lane, l.Mode, l.ModeReason)
		}
	}
}

// TestBudgetPacingPerAccountQueue: with account queues, each tenant's
// credentials have their own budget (50 per 10 s here), and each queue
// paces its own: neither tenant sees a 429, and each uses at least 90 %
// of every full window.
func TestBudgetPacingPerAccountQueue(t *testing.T) {
	a := newBudgetAPI(t, 50, 10*time.Second, 50*time.Millisecond)
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(a.upstream): {RPS: 200, MaxConcurrent: 8}}
	})
	var ids []domain.JobID
	for i := range 150 {
		for _, tenant := range []string{"acme", "globex"} {
			ids = append(ids, b.enqueue(t, tenantReq(tenant, fmt.Sprint(tenant, i), a.URL)))
		}
	}
	for _, id := range ids {
		b.waitStatus(t, id, domain.StatusCompleted)
	}
	for _, tenant := range []string{"acme", "globex"} {
		perWindow, rejected := a.served("Bearer " + tenant)
		t.Logf("%s: served per 10 s window %v, 429s %d", tenant, perWindow, rejected)
		if rejected != 0 {
			t.Fatalf("%d requests answered 429", rejected)
		}
		for i, n := range perWindow[:len(perWindow)-1] {
			if n < 45 {
				t.Errorf("%s: window %d served %d of 50, want >= 45 (all: %v)", tenant, i, n, perWindow)
			}
		}
	}
}

// TestBudgetPacingPerPoolMember: each pool member has its own budget
// (100 and 60 per 10 s here), paced in the pool registry: no member sees a
// 429, each uses at least 90 % of its full windows, and picks follow what
// each has left.
func TestBudgetPacingPerPoolMember(t *testing.T) {
	big := newBudgetAPI(t, 100, 10*time.Second, 50*time.Millisecond)
	small := newBudgetAPI(t, 60, 10*time.Second, 50*time.Millisecond)
	b := setup(t, nil)
	register(t, b, "big", big.URL, 50)
	register(t, b, "small", small.URL, 50)
	var ids []domain.JobID
	for i := range 300 {
		ids = append(ids, b.enqueue(t, poolReq(fmt.Sprint("pb", i))))
	}
	waitFor(t, "the pool to be under way", func() bool { return big.count() >= 50 })
	v, err := b.svc.Lane(t.Context(), "pool:readers")
	if err != nil {
		t.Fatal(err)
	}
	if v.Mode != "budget" || !strings.Contains(v.ModeReason, "members on a budget") {
		t.Errorf("pool lane mode %q (%q), want budget naming its members", v.Mode, v.ModeReason)
	}
	for _, id := range ids {
		b.waitStatus(t, id, domain.StatusCompleted)
	}
	for _, m := range []struct {
		name  string
		api   *budgetAPI
		limit int
	}{{"big", big, 100}, {"small", small, 60}} {
		perWindow, rejected := m.api.served("")
		t.Logf("%s: served per 10 s window %v, 429s %d", m.name, perWindow, rejected)
		if rejected != 0 {
			t.Fatalf("%s: %d requests answered 429", m.name, rejected)
		}
		for i, n := range perWindow[:len(perWindow)-1] {
			if n*10 < m.limit*9 {
				t.Errorf("%s: window %d served %d of %d, want >= 90 %% (all: %v)", m.name, i, n, m.limit, perWindow)
			}
		}
	}
}
