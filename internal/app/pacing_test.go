package app_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

func hostOf(u *upstream) string { return strings.TrimPrefix(u.URL, "http://") }

// rateOf returns the start rate of hits[from:] in requests per second.
func rateOf(hits []hit, from int) float64 {
	n := len(hits) - 1 - from
	if n <= 0 {
		return 0
	}
	return float64(n) / hits[len(hits)-1].at.Sub(hits[from].at).Seconds()
}

// paced reports whether a rate measured on the test's clock is want: on
// the fake clock every start lands on its slot, so it is exact, but for
// the slot's rounding to a whole nanosecond. (Pacing accuracy on real
// timers is measured by the benchmark's pacing scenario, and
// sanity-checked by TestWallClockPacing.)
func paced(got, want float64) bool { return math.Abs(got-want) <= want*1e-6 }

// gapsOf are the times between successive hits from hits[from].
func gapsOf(hits []hit, from int) []time.Duration {
	var out []time.Duration
	for i := from + 1; i < len(hits); i++ {
		out = append(out, hits[i].at.Sub(hits[i-1].at))
	}
	return out
}

// allEqual reports whether every gap is want.
func allEqual(gaps []time.Duration, want time.Duration) bool {
	for _, g := range gaps {
		if g != want {
			return false
		}
	}
	return true
}

func TestTooManyRequestsDefersThenCompletes(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusTooManyRequests) })
	b := setup(t, func(c *app.Config) { c.MaxDeferrals = 3 })
	j := b.waitStatus(t, b.enqueue(t, req("busy", up.URL)), domain.StatusCompleted)
	// Three deferrals (backpressure, not failures), then the fourth 429 is the answer.
	if up.count() != 4 || j.Result.ResponseStatus != 429 || j.Attempts != 1 {
		t.Fatalf("after %d hits: attempts %d result %+v", up.count(), j.Attempts, j.Result)
	}
	// Without Retry-After or a reset, each deferral waits the retry
	// backoff for its number (5, 10, 20 ms here).
	if gaps := gapsOf(up.snapshot(), 0); fmt.Sprint(gaps) != "[5ms 10ms 20ms]" {
		t.Fatalf("deferrals waited %v, want [5ms 10ms 20ms]", gaps)
	}
}

func TestRetryAfterPausesTheQueueAndKeepsTheJobFirst(t *testing.T) {
	var first atomic.Bool
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.Header.Get("X-Key") == "a" && first.CompareAndSwap(false, true) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 1000, MaxConcurrent: 1}}
	})
	var ids []domain.JobID
	for _, k := range []string{"a", "b", "c"} {
		r := req(k, up.URL)
		r.Headers["X-Key"] = k
		ids = append(ids, b.enqueue(t, r))
	}
	for _, id := range ids {
		b.waitStatus(t, id, domain.StatusCompleted)
	}
	hits := up.snapshot()
	var order []string
	for _, h := range hits {
		order = append(order, h.headers.Get("X-Key"))
	}
	if strings.Join(order, "") != "aabc" {
		t.Fatalf("dispatch order %v, want a (429), then a again before b and c", order)
	}
	if gap := hits[1].at.Sub(hits[0].at); gap != time.Second {
		t.Fatalf("the queue resumed %v after Retry-After: 1", gap)
	}
	if j, _ := b.svc.Get(t.Context(), ids[0]); j.Deferrals != 0 || j.Attempts != 1 {
		// Finishing resets the deferral count for the next phase.
		t.Fatalf("job a: attempts %d deferrals %d", j.Attempts, j.Deferrals)
	}
}

func TestAqueductRpsSlowsTheLane(t *testing.T) {
	const signalled = 25.0
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("X-Aqueduct-Rps", strconv.FormatFloat(signalled, 'f', -1, 64))
		w.Header().Set("X-Aquifer-Rps", "500") // the alias loses to the Aqueduct header
	})
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 400, MaxConcurrent: 1}}
	})
	for i := range 40 {
		b.enqueue(t, req(fmt.Sprint("r", i), up.URL))
	}
	waitFor(t, "40 dispatches", func() bool { return up.count() == 40 })
	// The first start happens at the ceiling; from the first answer on the
	// lane runs at the signalled rate (the very next slot moves: a signal
	// applies at once).
	if got := rateOf(up.snapshot(), 2); !paced(got, signalled) {
		t.Fatalf("dispatch rate %.1f/s after X-Aqueduct-Rps: %v, want it", got, signalled)
	}
	if gaps := gapsOf(up.snapshot(), 0); !allEqual(gaps, 40*time.Millisecond) {
		t.Fatalf("gaps %v, want 40ms (25 rps) each", gaps)
	}
	lanes := b.svc.Health(t.Context()).Lanes
	if len(lanes) != 1 || lanes[0].RPS != signalled || lanes[0].CeilingRPS != 400 {
		t.Fatalf("lane health = %+v", lanes)
	}
}

func TestSignalsNeverRaiseThePaceAboveTheCeiling(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.Header().Set("X-Aquifer-Rps", "10000") })
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 30, MaxConcurrent: 1}}
	})
	for i := range 20 {
		b.enqueue(t, req(fmt.Sprint("c", i), up.URL))
	}
	waitFor(t, "20 dispatches", func() bool { return up.count() == 20 })
	if got := rateOf(up.snapshot(), 0); !paced(got, 30) {
		t.Fatalf("rate %.1f/s with a 30 rps ceiling, want 30", got)
	}
}

func TestORCALoadReportSlowsTheLaneAndExplicitRpsWins(t *testing.T) {
	var explicit atomic.Bool
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.Header.Get("Endpoint-Load-Metrics-Format") != "text" {
			w.WriteHeader(http.StatusBadRequest) // the request header is part of the contract
			return
		}
		w.Header().Set("Endpoint-Load-Metrics", "TEXT named_metrics.kv_cache_usage_perc=0.75")
		if explicit.Load() {
			w.Header().Set("X-Aqueduct-Rps", "7")
		}
	})
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 100, MaxConcurrent: 1}}
	})
	j := b.waitStatus(t, b.enqueue(t, req("o1", up.URL)), domain.StatusCompleted)
	if j.Result.ResponseStatus != 200 {
		t.Fatalf("upstream did not see endpoint-load-metrics-format: text (status %d)", j.Result.ResponseStatus)
	}
	waitFor(t, "pace from ORCA", func() bool {
		l := b.svc.Health(t.Context()).Lanes
		return len(l) == 1 && l[0].RPS == 2 // 70–90 % utilization → 2 rps
	})
	explicit.Store(true)
	b.waitStatus(t, b.enqueue(t, req("o2", up.URL)), domain.StatusCompleted)
	waitFor(t, "explicit rps wins", func() bool {
		l := b.svc.Health(t.Context()).Lanes
		return len(l) == 1 && l[0].RPS == 7
	})
}

func TestMaxConcurrentLowersAndRecovers(t *testing.T) {
	var signal atomic.Bool
	signal.Store(true)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		sleep(t, r.Context(), 5*time.Millisecond) // long enough to overlap the next start (1 ms later)
		if signal.Load() {
			w.Header().Set("X-Aqueduct-Max-Concurrent", "1")
		}
	})
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 1000, MaxConcurrent: 4}}
	})
	b.waitStatus(t, b.enqueue(t, req("first", up.URL)), domain.StatusCompleted)
	up.maxConc.Store(0)
	for i := range 12 {
		b.enqueue(t, req(fmt.Sprint("low", i), up.URL))
	}
	waitFor(t, "13 dispatches", func() bool { return up.count() == 13 })
	if m := up.maxConc.Load(); m != 1 {
		t.Fatalf("concurrency %d after X-Aqueduct-Max-Concurrent: 1", m)
	}
	// Without the signal, concurrency climbs back (+1 per 10 completions).
	signal.Store(false)
	for i := range 40 {
		b.enqueue(t, req(fmt.Sprint("rec", i), up.URL))
	}
	waitFor(t, "recovery to the ceiling", func() bool {
		l := b.svc.Health(t.Context()).Lanes
		return len(l) == 1 && l[0].MaxConcurrent == 4
	})
}

func TestRateLimitHeadersPauseUntilReset(t *testing.T) {
	var n atomic.Int64
	var reset atomic.Int64
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		if n.Add(1) == 1 {
			reset.Store(now(t).Add(1500 * time.Millisecond).Unix())
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset.Load(), 10))
		}
	})
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 1000, MaxConcurrent: 1}}
	})
	first := b.enqueue(t, req("gh1", up.URL))
	b.waitStatus(t, first, domain.StatusCompleted) // remaining 0 is not a failure
	b.waitStatus(t, b.enqueue(t, req("gh2", up.URL)), domain.StatusCompleted)
	hits := up.snapshot()
	// The reset is in whole seconds: the queue waits until that second.
	if at := hits[1].at; !at.Equal(time.Unix(reset.Load(), 0)) {
		t.Fatalf("next dispatch %v after remaining=0, want at the reset (%v after)", at.Sub(hits[0].at), time.Unix(reset.Load(), 0).Sub(hits[0].at))
	}
}

func TestServiceUnavailableRetryAfterDelaysTheRetry(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	b := setup(t, nil)
	j := b.waitStatus(t, b.enqueue(t, req("s", up.URL)), domain.StatusCompleted)
	hits := up.snapshot()
	if j.Attempts != 2 || hits[1].at.Sub(hits[0].at) != time.Second {
		t.Fatalf("retry after %v (attempts %d); 503 said Retry-After: 1", hits[1].at.Sub(hits[0].at), j.Attempts)
	}
}

func tenantReq(user, key, url string) *domain.JobRequest {
	r := req(key, url)
	r.UserID = user
	r.Headers["Authorization"] = "Bearer " + user
	r.AccountQueue = domain.AccountQueueEnabled
	return r
}

func TestAccountQueuesIsolateTenantsWithinOneBudget(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]time.Time{}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		mu.Lock()
		seen[r.Header.Get("X-Key")] = now(t)
		mu.Unlock()
		sleep(t, r.Context(), 30*time.Millisecond) // longer than a slot: two run at once
	})
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 50, MaxConcurrent: 2}}
	})
	// A noisy tenant floods, then a quiet one submits.
	for i := range 100 {
		r := tenantReq("noisy", fmt.Sprint("n", i), up.URL)
		r.Headers["X-Key"] = fmt.Sprint("n", i)
		b.enqueue(t, r)
	}
	quiet := tenantReq("quiet", "q", up.URL)
	quiet.Headers["X-Key"] = "q"
	submitted := now(t)
	id := b.enqueue(t, quiet)
	b.waitStatus(t, id, domain.StatusCompleted)
	mu.Lock()
	wait := seen["q"].Sub(submitted)
	mu.Unlock()
	// Round-robin between two tenants at 50 rps: the quiet one's job goes
	// out at its queue's first turn, one or two slots later (before its
	// queue had a turn, it is the noisy one's).
	if wait > 2*time.Second/50 {
		t.Fatalf("the quiet tenant waited %v behind the flood", wait)
	}
	if m := up.maxConc.Load(); m != 2 {
		t.Fatalf("%d requests in flight at most across tenants; the upstream's budget is 2, and it is used", m)
	}
	lanes := b.svc.Health(t.Context()).Lanes
	if len(lanes) != 1 || !lanes[0].AccountQueues || lanes[0].Queues < 1 {
		t.Fatalf("lane health = %+v", lanes)
	}
	waitFor(t, "the flood", func() bool { return up.count() == 101 })
	if got := rateOf(up.snapshot(), 0); !paced(got, 50) {
		t.Fatalf("aggregate rate %.1f/s; the upstream's budget is 50 rps", got)
	}
}

func TestWithoutAccountQueuesTheQuietJobWaitsBehindTheFlood(t *testing.T) {
	up := newUpstream(t, nil)
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 100, MaxConcurrent: 1}}
	})
	for i := range 30 {
		b.enqueue(t, req(fmt.Sprint("n", i), up.URL))
	}
	quiet := req("q", up.URL)
	quiet.UserID = "quiet"
	id := b.enqueue(t, quiet)
	b.waitStatus(t, id, domain.StatusCompleted)
	if last := up.snapshot()[up.count()-1]; last.body != `{"k":"q"}` {
		t.Fatalf("in one shared queue the quiet job should be last, got %s", last.body)
	}
}

func TestAccountQueueModeFollowsTheLatestHeader(t *testing.T) {
	b := setup(t, nil)
	target := "http://127.0.0.1:1/x"
	u, _ := domain.UpstreamOf(target)
	r := tenantReq("u", "on", target)
	b.enqueue(t, r)
	if !b.svc.AccountQueues(u) {
		t.Fatal("enabled header did not switch the mode on")
	}
	plain := req("keep", target) // no header: unchanged
	b.enqueue(t, plain)
	if !b.svc.AccountQueues(u) {
		t.Fatal("a request without the header changed the mode")
	}
	off := req("off", target)
	off.AccountQueue = domain.AccountQueueDisabled
	b.enqueue(t, off)
	if b.svc.AccountQueues(u) {
		t.Fatal("a non-enabled value did not switch the mode off")
	}
}

func TestLoadHeadersOnEveryOutboundRequest(t *testing.T) {
	up := newUpstream(t, nil)
	hk := newHooks(t)
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 40, MaxConcurrent: 1}}
	})
	r := req("load", up.URL)
	r.WebhookURL = hk.URL
	b.waitStatus(t, b.enqueue(t, r), domain.StatusCompleted)
	waitFor(t, "webhook", func() bool { return hk.count() == 1 })
	for _, h := range []hit{up.snapshot()[0], hk.snapshot()[0]} {
		for _, ns := range []string{"X-Aqueduct-", "X-Aquifer-"} {
			if _, err := strconv.Atoi(h.headers.Get(ns + "Total-Jobs")); err != nil {
				t.Errorf("%s %sTotal-Jobs = %q", h.path, ns, h.headers.Get(ns+"Total-Jobs"))
			}
			if _, err := strconv.Atoi(h.headers.Get(ns + "Queue-Depth")); err != nil {
				t.Errorf("%s %sQueue-Depth = %q", h.path, ns, h.headers.Get(ns+"Queue-Depth"))
			}
		}
		if h.headers.Get("Endpoint-Load-Metrics-Format") != "text" {
			t.Errorf("endpoint-load-metrics-format = %q", h.headers.Get("Endpoint-Load-Metrics-Format"))
		}
	}
	if got := up.snapshot()[0].headers.Get("X-Aqueduct-Flow-Rate"); got != "40.00" {
		t.Fatalf("X-Aqueduct-Flow-Rate = %q, want 40.00 (the lane's pace, two decimals)", got)
	}
	// A job that sets the ORCA format itself keeps its own.
	own := req("own", up.URL)
	own.Headers["Endpoint-Load-Metrics-Format"] = "json"
	b.waitStatus(t, b.enqueue(t, own), domain.StatusCompleted)
	if got := up.snapshot()[1].headers.Get("Endpoint-Load-Metrics-Format"); got != "json" {
		t.Fatalf("job's own endpoint-load-metrics-format overridden: %q", got)
	}
}

// sizedStore reports a database size the test sets.
type sizedStore struct {
	*memory.Store
	size atomic.Int64
}

func (s *sizedStore) SizeBytes(context.Context) (int64, error) { return s.size.Load(), nil }
func (s *sizedStore) Unwrap() *memory.Store                    { return s.Store }

func TestAdmissionShedsWithGrowingRetryAfterAndRecovers(t *testing.T) {
	var mem atomic.Int64
	store := &sizedStore{Store: newStore(t)}
	const sampleEvery = 250 * time.Millisecond // the default
	b := setup(t, func(c *app.Config) {
		c.Store = store
		c.Admission = app.AdmissionConfig{MemoryLimitMB: 100, DBMaxBytes: 1 << 20, Memory: func() int64 { return mem.Load() }}
	})
	svc := b.svc
	target := "http://127.0.0.1:1/x"
	accepted, err := svc.Enqueue(t.Context(), req("ok", target))
	if err != nil {
		t.Fatalf("Enqueue under the limits: %v", err)
	}
	mem.Store(150 << 20)
	// The reading is sampled: the rise shows once the sample is stale.
	if _, err := svc.Enqueue(t.Context(), req("sampled", target)); err != nil {
		t.Fatalf("Enqueue within the sampling period: %v", err)
	}
	elapse(t, sampleEvery)
	var got []time.Duration
	for i := range 6 {
		_, err := svc.Enqueue(t.Context(), req(fmt.Sprint("shed", i), target))
		var rej *domain.RejectedError
		if !errors.As(err, &rej) || rej.Limit != domain.LimitMemory || rej.Max != 100 || rej.Current != 150 {
			t.Fatalf("Enqueue over the memory limit = %v", err)
		}
		got = append(got, rej.RetryAfter)
	}
	if fmt.Sprint(got) != "[5s 10s 20s 40s 1m0s 1m0s]" {
		t.Fatalf("Retry-After sequence %v, want 5s 10s 20s 40s 60s 60s", got)
	}
	// A duplicate of an accepted job is answered even under pressure.
	dup, err := svc.Enqueue(t.Context(), req("ok", target))
	if err != nil || !dup.Duplicate || dup.JobID != accepted.JobID {
		t.Fatalf("duplicate under pressure = %+v, %v", dup, err)
	}
	for i := range 6 {
		if _, err := store.Lookup(t.Context(), "u1", fmt.Sprint("shed", i)); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("rejected job shed%d left a row: %v", i, err)
		}
	}
	h := svc.Health(t.Context()).Admission
	if !h.Enabled || !h.Rejecting || h.LimitReason != "memory" || h.MemoryMB != 150 || h.RetryAfterSeconds != 60 || h.RejectedTotal != 6 {
		t.Fatalf("admission health = %+v", h)
	}
	// Memory falls (the figure shrinks as memory goes back to the OS): admitted
	// again, and the streak starts over.
	mem.Store(10 << 20)
	elapse(t, sampleEvery)
	if _, err := svc.Enqueue(t.Context(), req("again", target)); err != nil {
		t.Fatalf("Enqueue after recovery: %v", err)
	}
	store.size.Store(2 << 20)
	elapse(t, sampleEvery)
	_, err = svc.Enqueue(t.Context(), req("big-db", target))
	var rej *domain.RejectedError
	if !errors.As(err, &rej) || rej.Limit != domain.LimitDBSize || rej.RetryAfter != 5*time.Second || rej.Current != 2<<20 {
		t.Fatalf("Enqueue over the DB limit = %v (%+v)", err, rej)
	}
}

func TestPositionEventsWhileQueued(t *testing.T) {
	release := newGate(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) { release.Wait(r.Context()) })
	const every = 2 * time.Second // the default PositionInterval
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 1000, MaxConcurrent: 1}}
	})
	for i := range 3 {
		b.enqueue(t, req(fmt.Sprint("ahead", i), up.URL))
	}
	id := b.enqueue(t, req("mine", up.URL))
	waitFor(t, "first job running", func() bool { return up.count() == 1 })
	j, sub, err := b.svc.Subscribe(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if pos, err := b.svc.Position(t.Context(), j); err != nil || pos != 3 {
		t.Fatalf("Position = %d, %v; want 3 (two waiting ahead, one running)", pos, err)
	}
	// Every PositionInterval (counted from the start), the place in line —
	// also once the running attempt has lasted long enough (1 s) to be
	// recorded in_flight in the store.
	for i := 1; i <= 2; i++ {
		ev := recv(t, "a position event", sub.C)
		if ev.Type != domain.EventPosition || ev.Position != 3 {
			t.Fatalf("event = %+v, want position 3", ev)
		}
		if at := since(t); at != time.Duration(i)*every {
			t.Fatalf("position event %d at +%v, want +%v", i, at, time.Duration(i)*every)
		}
	}
	release.Open()
}

var _ ports.JobStore = (*sizedStore)(nil)

func TestORCATierMeasuredRate(t *testing.T) {
	// 70–90 % KV-cache utilization asks for 2 rps (Triton's metric name).
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("Endpoint-Load-Metrics", `JSON {"named_metrics":{"kv_cache_utilization":0.8}}`)
	})
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 100, MaxConcurrent: 4}}
	})
	for i := range 7 {
		b.enqueue(t, req(fmt.Sprint("orca", i), up.URL))
	}
	waitFor(t, "7 dispatches", func() bool { return up.count() == 7 })
	if got := rateOf(up.snapshot(), 1); !paced(got, 2) {
		t.Fatalf("dispatch rate %.2f/s under ORCA 80 %%, want 2", got)
	}
}

func TestEveryRateLimitFamilyPausesUntilItsReset(t *testing.T) {
	// Each family's pause signal, set at now on the test's clock (a whole
	// second), and the pause it asks for.
	families := map[string]struct {
		set   func(h http.Header, now time.Time)
		pause time.Duration
	}{
		"github": {func(h http.Header, now time.Time) {
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(now.Add(2*time.Second).Unix(), 10))
		}, 2 * time.Second},
		"openai": {func(h http.Header, _ time.Time) {
			h.Set("x-ratelimit-remaining-requests", "0")
			h.Set("x-ratelimit-reset-requests", "1s")
		}, time.Second},
		"ietf-separate": {func(h http.Header, _ time.Time) {
			h.Set("RateLimit-Remaining", "0")
			h.Set("RateLimit-Reset", "1")
		}, time.Second},
		"ietf-combined": {func(h http.Header, _ time.Time) { h.Set("RateLimit", "limit=10, remaining=0, reset=1") }, time.Second},
		"ietf-structured": {func(h http.Header, _ time.Time) {
			h.Set("RateLimit-Policy", `"default";q=10;w=1`)
			h.Set("RateLimit", `"default";r=0`)
		}, time.Second},
		"retry-after-date": {func(h http.Header, now time.Time) {
			h.Set("Retry-After", now.Add(2*time.Second).UTC().Format(http.TimeFormat))
		}, 2 * time.Second},
	}
	for name, f := range families {
		t.Run(name, func(t *testing.T) {
			var n atomic.Int64
			up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
				if n.Add(1) == 1 {
					f.set(w.Header(), now(t))
					if name == "retry-after-date" {
						w.WriteHeader(http.StatusTooManyRequests)
					}
				}
			})
			b := setup(t, func(c *app.Config) {
				c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 1000, MaxConcurrent: 1}}
			})
			first := b.enqueue(t, req("one", up.URL))
			second := b.enqueue(t, req("two", up.URL))
			b.waitStatus(t, first, domain.StatusCompleted)
			b.waitStatus(t, second, domain.StatusCompleted)
			hits := up.snapshot()
			if gap := hits[1].at.Sub(hits[0].at); gap != f.pause {
				t.Fatalf("%s: next dispatch %v after the pause signal, want %v", name, gap, f.pause)
			}
		})
	}
}

func TestIdleTenantQueuesAreCollected(t *testing.T) {
	release := newGate(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.Header.Get("Authorization") == "Bearer busy" {
			release.Wait(r.Context())
		}
	})
	const idle = 50 * time.Millisecond
	b := setup(t, func(c *app.Config) {
		c.LaneIdleTimeout = idle
		c.Rates.Hosts = map[string]domain.Rate{hostOf(up): {RPS: 1000, MaxConcurrent: 4}}
	})
	b.enqueue(t, tenantReq("busy", "b1", up.URL)) // holds its queue open
	b.waitStatus(t, b.enqueue(t, tenantReq("brief", "x1", up.URL)), domain.StatusCompleted)
	done := now(t)
	queues := func() int {
		for _, l := range b.svc.Health(t.Context()).Lanes {
			return l.Queues
		}
		return -1
	}
	waitFor(t, "the brief tenant's queue to be collected", func() bool { return queues() == 1 })
	if at := now(t).Sub(done); at != idle {
		t.Fatalf("the idle queue was collected %v after its last work, want %v (LaneIdleTimeout)", at, idle)
	}
	release.Open()
	settle(t)
	released := now(t)
	waitFor(t, "the lane to be collected", func() bool { return queues() == -1 })
	if at := now(t).Sub(released); at < idle || at > 2*idle {
		t.Fatalf("the lane was collected %v after its last work, want between %v and %v", at, idle, 2*idle)
	}
}
