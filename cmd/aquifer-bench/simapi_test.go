package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBudgetAPIWindows checks the budget API's accounting with explicit
// times: windows start on a whole second, the budget counts down, the
// request after it is denied until the window ends, a new window starts
// full, and the per-window counts and spans are what the scenario reports.
func TestBudgetAPIWindows(t *testing.T) {
	a := newBudgetAPI(3, 10*time.Second, 0)
	t0 := time.Unix(1_800_000_000, 400_000_000) // 0.4 s into a second
	origin := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	for i, want := range []int{2, 1, 0} {
		ok, rem, reset := a.take(at(time.Duration(i) * time.Second))
		if !ok || rem != want || !reset.Equal(origin.Add(10*time.Second)) {
			t.Fatalf("request %d: ok=%v remaining=%d reset=%v; want true %d %v", i, ok, rem, reset, want, origin.Add(10*time.Second))
		}
	}
	if ok, rem, _ := a.take(at(5 * time.Second)); ok || rem != 0 {
		t.Fatalf("request past the budget: ok=%v remaining=%d; want denied with 0 left", ok, rem)
	}
	// 9.6 s after t0 is the next window (origin + 10 s): full budget again.
	ok, rem, reset := a.take(at(9600 * time.Millisecond))
	if !ok || rem != 2 || !reset.Equal(origin.Add(20*time.Second)) {
		t.Fatalf("first request of window 1: ok=%v remaining=%d reset=%v; want true 2 %v", ok, rem, reset, origin.Add(20*time.Second))
	}
	// Window 2 sees no traffic; window 3 one request.
	if ok, _, _ := a.take(origin.Add(35 * time.Second)); !ok {
		t.Fatal("request in window 3 denied")
	}

	s := a.stats()
	want := []windowCount{
		{ok: 3, limited: 1, firstOK: 400 * time.Millisecond, lastOK: 2400 * time.Millisecond},
		{ok: 1, firstOK: 0, lastOK: 0},
		{},
		{ok: 1, firstOK: 5 * time.Second, lastOK: 5 * time.Second},
	}
	if fmt.Sprint(s.windows) != fmt.Sprint(want) {
		t.Fatalf("windows = %v, want %v", s.windows, want)
	}
	if s.ok != 5 || s.denied != 1 {
		t.Fatalf("ok=%d denied=%d, want 5 and 1", s.ok, s.denied)
	}
	if s.elapsed != 35*time.Second-400*time.Millisecond {
		t.Fatalf("elapsed = %v, want first request → last 200 = 34.6s", s.elapsed)
	}
	// Windows 0–2 (all but the last): 4 of 9 budgeted requests.
	if math.Abs(s.fullWindowUse-4.0/9) > 1e-9 {
		t.Fatalf("fullWindowUse = %v, want 4/9", s.fullWindowUse)
	}
}

// TestBudgetAPIHeaders checks what the budget API says over HTTP: the
// GitHub X-RateLimit-* family on every answer, and 429 + Retry-After
// (whole seconds up to the reset) once the budget is spent. A window of a
// minute keeps the test inside one window however slowly it runs.
func TestBudgetAPIHeaders(t *testing.T) {
	a := newBudgetAPI(2, time.Minute, 0)
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	defer a.close()
	post := func(body string) *http.Response {
		t.Helper()
		resp, err := http.Post(a.url()+"/x", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	r1 := post("a")
	if r1.StatusCode != 200 || r1.Header.Get("X-RateLimit-Limit") != "2" || r1.Header.Get("X-RateLimit-Remaining") != "1" ||
		r1.Header.Get("X-RateLimit-Used") != "1" || r1.Header.Get("X-RateLimit-Resource") != "core" {
		t.Fatalf("first answer: %d %v", r1.StatusCode, r1.Header)
	}
	reset, err := strconv.ParseInt(r1.Header.Get("X-RateLimit-Reset"), 10, 64)
	if now := time.Now().Unix(); err != nil || reset <= now || reset > now+60 {
		t.Fatalf("X-RateLimit-Reset = %q at %d: want the epoch second a minute after the first request's second", r1.Header.Get("X-RateLimit-Reset"), now)
	}
	if r := post("b"); r.StatusCode != 200 || r.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("second answer: %d remaining %q", r.StatusCode, r.Header.Get("X-RateLimit-Remaining"))
	}
	r3 := post("a")
	if r3.StatusCode != http.StatusTooManyRequests || r3.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("third answer: %d remaining %q, want 429 with 0", r3.StatusCode, r3.Header.Get("X-RateLimit-Remaining"))
	}
	ra, err := strconv.Atoi(r3.Header.Get("Retry-After"))
	if left := reset - time.Now().Unix(); err != nil || ra < 1 || int64(ra) > left+1 {
		t.Fatalf("Retry-After = %q, want 1…%d s (up to the reset)", r3.Header.Get("Retry-After"), left+1)
	}
	if a.done() != 2 {
		t.Fatalf("done = %d, want 2 distinct bodies answered 200", a.done())
	}
}

// TestCapacityModel checks the adaptive scenario's latency model at its
// edges: base latency up to capacity, base × (in-flight ÷ capacity)² past
// it, shed past twice the capacity.
func TestCapacityModel(t *testing.T) {
	base := 20 * time.Millisecond
	for _, c := range []struct {
		inflight int
		want     time.Duration
		shed     bool
	}{
		{1, base, false},
		{40, base, false},
		{60, 45 * time.Millisecond, false}, // 20 ms × 1.5²
		{80, 80 * time.Millisecond, false}, // 20 ms × 2²
		{81, 0, true},
		{256, 0, true},
	} {
		got, shed := capacityModel(c.inflight, 40, base)
		if got != c.want || shed != c.shed {
			t.Errorf("capacityModel(%d, 40, 20ms) = %v, %v; want %v, %v", c.inflight, got, shed, c.want, c.shed)
		}
	}
	if got, shed := capacityModel(30, 20, base); got != 45*time.Millisecond || shed {
		t.Errorf("halved capacity: capacityModel(30, 20, 20ms) = %v, %v; want 45ms, false", got, shed)
	}
}

// TestCapacityBackendSheds checks the backend over HTTP: with capacity 1,
// one slow request in flight, a third concurrent request is shed with 503
// while the second is queued behind the first at 4× the base latency.
func TestCapacityBackendSheds(t *testing.T) {
	b, err := newCapacityBackend(1, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	// Hold two requests in flight, then send a third.
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := http.Post(b.url()+"/w", "application/json", strings.NewReader("{}"))
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		n := b.inflight
		b.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in-flight never reached 2 (at %d)", n)
		}
		time.Sleep(time.Millisecond)
	}
	resp, err := http.Post(b.url()+"/w", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third request: %d, want 503", resp.StatusCode)
	}
	for range 2 {
		if c := <-codes; c != 200 {
			t.Fatalf("held request: %d, want 200", c)
		}
	}
	records, _ := b.snapshot()
	var ok, shed int
	var slow bool
	for _, r := range records {
		switch r.status {
		case 200:
			ok++
			slow = slow || r.latency >= 800*time.Millisecond // the second: 200 ms × (2 ÷ 1)²
		case 503:
			shed++
		}
	}
	if ok != 2 || shed != 1 || !slow {
		t.Fatalf("records %+v: want two 200s (one ≥ 800 ms) and one 503", records)
	}
}

// TestAdaptiveMeasures checks the summaries the adaptive table is built
// from on hand-made samples and records.
func TestAdaptiveMeasures(t *testing.T) {
	var samples []capSample
	// 0–10 s at 40 in flight, then capacity halves: 3 s at 40, then 20.
	for at := time.Duration(0); at < 20*time.Second; at += 100 * time.Millisecond {
		n := 40
		if at >= 13*time.Second {
			n = 20
		}
		samples = append(samples, capSample{at: at, inflight: n})
	}
	if m := meanInflight(samples, 0, 10*time.Second); m != 40 {
		t.Fatalf("meanInflight first half = %v, want 40", m)
	}
	if d, ok := followTime(samples, 10*time.Second, 20*time.Second, 20, 0.2); !ok || d != 4*time.Second {
		t.Fatalf("followTime = %v, %v; want 4s (seconds 10–12 at 40, within 20%% of 20 from second 13, counted to its end)", d, ok)
	}
	// A relapse in the last second means it never settled.
	for i := len(samples) - 10; i < len(samples); i++ {
		samples[i].inflight = 40
	}
	if _, ok := followTime(samples, 10*time.Second, 20*time.Second, 20, 0.2); ok {
		t.Fatal("followTime settled although the last second is at 40")
	}

	var records []capRecord
	for i := range 100 {
		records = append(records, capRecord{at: time.Duration(i) * 10 * time.Millisecond, latency: time.Duration(i+1) * time.Millisecond, status: 200})
	}
	records = append(records, capRecord{at: 500 * time.Millisecond, status: 503}, capRecord{at: 2 * time.Second, status: 503})
	rate, shed, p99 := period(records, 0, time.Second)
	if rate != 100 || shed != 1 || p99 != 99*time.Millisecond {
		t.Fatalf("period = %v/s, %d shed, p99 %v; want 100/s, 1, 99ms", rate, shed, p99)
	}
}

// TestUpstreamsYAMLKnobs checks that the knobs set for a host land under
// that upstream, and only there, in the config the bench writes.
func TestUpstreamsYAMLKnobs(t *testing.T) {
	o := options{knobs: map[string][]string{"127.0.0.1:2": {"adaptive: true"}}}
	got := upstreamsYAML(o, []upstreamRate{{"127.0.0.1:1", 50, 8}, {"127.0.0.1:2", 100000, 256}})
	want := "upstreams:\n" +
		"  \"127.0.0.1:1\":\n    rps: 50\n    max_concurrent: 8\n" +
		"  \"127.0.0.1:2\":\n    rps: 100000\n    max_concurrent: 256\n    adaptive: true\n"
	if got != want {
		t.Fatalf("config:\n%s\nwant:\n%s", got, want)
	}
}
