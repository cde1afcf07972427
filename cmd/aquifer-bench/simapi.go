package main

// Simulated APIs for issue 20's scenarios (issue20.go). Both are loopback
// net/http servers: they need per-response headers, status codes and
// latencies, which the fixed-answer lean server cannot give, and at the rates
// involved (10 rps, a few hundred rps) net/http's CPU cost does not matter.
// Their accounting (budgetAPI.take, capacityModel) is kept apart from the
// handlers so that simapi_test.go can check it with explicit times.

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"
)

// simServer is the loopback HTTP server under both simulated APIs.
type simServer struct {
	ln  net.Listener
	srv *http.Server
}

func newSimServer(h http.Handler) (*simServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("simulated API: listen: %w", err)
	}
	s := &simServer{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *simServer) host() string { return s.ln.Addr().String() }
func (s *simServer) url() string  { return "http://" + s.host() }

// close stops the server at once: handlers sleeping out a simulated latency
// are not waited for, so a scenario's end is not stretched by its backlog.
func (s *simServer) close() { _ = s.srv.Close() }

// windowCount is what a budget window saw.
type windowCount struct {
	ok, limited int // answered 200; answered 429 (budget gone)
	// firstOK and lastOK are when the window's first and last 200 arrived,
	// from the window's start: a burst-and-stall pacing spends its budget
	// in a short span, a budget pacing spreads it over the window.
	firstOK, lastOK time.Duration
}

// span is how long the window's 200s took, first to last.
func (w windowCount) span() time.Duration { return w.lastOK - w.firstOK }

// budgetAPI is an API with a request budget per fixed window, as GitHub's
// REST API has: every response carries X-RateLimit-Limit, -Remaining, -Used
// and -Reset (epoch seconds), and a request after the budget is spent gets
// 429 with Retry-After until the window ends. 429s do not use budget.
//
// Window 0 starts at the first request's time truncated to the second, so
// every window ends on a whole epoch second and X-RateLimit-Reset is exact:
// a client that trusts it loses nothing to rounding.
type budgetAPI struct {
	*simServer
	limit   int
	window  time.Duration
	latency time.Duration // each answer takes this long, as a real API's do

	mu      sync.Mutex
	origin  time.Time // start of window 0; zero until the first request
	windows []windowCount
	first   time.Time // first request
	last200 time.Time
	served  map[string]bool // bodies answered 200 at least once
}

func newBudgetAPI(limit int, window, latency time.Duration) *budgetAPI {
	return &budgetAPI{limit: limit, window: window, latency: latency, served: map[string]bool{}}
}

// start serves the API on a loopback port.
func (a *budgetAPI) start() error {
	s, err := newSimServer(a)
	if err != nil {
		return err
	}
	a.simServer = s
	return nil
}

// take accounts one request arriving at now: whether it is within the
// budget, the budget left after it, and when the current window ends.
func (a *budgetAPI) take(now time.Time) (ok bool, remaining int, reset time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.origin.IsZero() {
		a.origin = now.Truncate(time.Second)
		a.first = now
	}
	i := int(now.Sub(a.origin) / a.window)
	for len(a.windows) <= i {
		a.windows = append(a.windows, windowCount{})
	}
	w := &a.windows[i]
	start := a.origin.Add(time.Duration(i) * a.window)
	reset = start.Add(a.window)
	if w.ok >= a.limit {
		w.limited++
		return false, 0, reset
	}
	if w.ok == 0 {
		w.firstOK = now.Sub(start)
	}
	w.ok++
	w.lastOK = now.Sub(start)
	if now.After(a.last200) {
		a.last200 = now
	}
	return true, a.limit - w.ok, reset
}

func (a *budgetAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	now := time.Now()
	ok, remaining, reset := a.take(now)
	if a.latency > 0 { // the request is counted on arrival, answered later
		select {
		case <-time.After(a.latency):
		case <-r.Context().Done():
			return
		}
		now = time.Now()
	}
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(a.limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Used", strconv.Itoa(a.limit-remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	h.Set("X-RateLimit-Resource", "core")
	h.Set("Content-Type", "application/json")
	if !ok {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(reset.Sub(now).Seconds()))))
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"message":"API rate limit exceeded"}`)
		return
	}
	a.mu.Lock()
	a.served[string(body)] = true
	a.mu.Unlock()
	_, _ = io.WriteString(w, `{"ok":true}`)
}

// done is how many distinct jobs (bodies) have been answered 200.
func (a *budgetAPI) done() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.served)
}

// budgetStats is what the budget API saw over a run.
type budgetStats struct {
	windows    []windowCount
	ok, denied int           // 200s, 429s
	elapsed    time.Duration // first request → last 200
	// fullWindowUse is the 200s in the windows before the last one that saw
	// traffic, as a fraction of their budget: the last window is cut short
	// when the work runs out, the others show how much of the budget a
	// pacing used. NaN with fewer than two windows.
	fullWindowUse float64
}

func (a *budgetAPI) stats() budgetStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := budgetStats{windows: append([]windowCount(nil), a.windows...), elapsed: a.last200.Sub(a.first), fullWindowUse: math.NaN()}
	for _, w := range a.windows {
		s.ok += w.ok
		s.denied += w.limited
	}
	if n := len(a.windows) - 1; n > 0 {
		used := 0
		for _, w := range a.windows[:n] {
			used += w.ok
		}
		s.fullWindowUse = float64(used) / float64(n*a.limit)
	}
	return s
}

// capacityModel is the adaptive scenario's backend: a service that does
// capacity requests at once at its base latency; past that, requests queue
// inside it and latency climbs as base × (in-flight ÷ capacity)²; past twice
// its capacity it sheds load with 503 at once.
//
// It returns the latency for a request that arrives to find inflight
// requests in flight, itself included, and whether it is shed instead.
func capacityModel(inflight, capacity int, base time.Duration) (latency time.Duration, shed bool) {
	if inflight > 2*capacity {
		return 0, true
	}
	if inflight <= capacity {
		return base, false
	}
	f := float64(inflight) / float64(capacity)
	return time.Duration(float64(base) * f * f), false
}

// capSample is the backend's state at one sampling instant.
type capSample struct {
	at       time.Duration // since the first request
	inflight int
}

// capRecord is one answered request.
type capRecord struct {
	at      time.Duration // arrival, since the first request
	latency time.Duration // arrival → answer written, measured (0 for a 503)
	status  int
}

// capacityBackend serves capacityModel over HTTP, samples its in-flight
// count every sampleEvery, and records every answer. setCapacity changes the
// capacity mid-run.
type capacityBackend struct {
	*simServer
	base time.Duration

	mu       sync.Mutex
	capacity int
	inflight int
	start    time.Time // first request; zero until then
	records  []capRecord
	samples  []capSample

	stopSampling context.CancelFunc
	sampled      sync.WaitGroup
}

// sampleEvery is how often the backend samples its in-flight count.
const sampleEvery = 50 * time.Millisecond

func newCapacityBackend(capacity int, base time.Duration) (*capacityBackend, error) {
	b := &capacityBackend{base: base, capacity: capacity}
	s, err := newSimServer(b)
	if err != nil {
		return nil, err
	}
	b.simServer = s
	ctx, cancel := context.WithCancel(context.Background())
	b.stopSampling = cancel
	b.sampled.Add(1)
	go b.sample(ctx)
	return b, nil
}

func (b *capacityBackend) sample(ctx context.Context) {
	defer b.sampled.Done()
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			b.mu.Lock()
			if !b.start.IsZero() {
				b.samples = append(b.samples, capSample{at: now.Sub(b.start), inflight: b.inflight})
			}
			b.mu.Unlock()
		}
	}
}

// started returns when the first request arrived (zero if none has).
func (b *capacityBackend) started() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.start
}

func (b *capacityBackend) setCapacity(c int) {
	b.mu.Lock()
	b.capacity = c
	b.mu.Unlock()
}

func (b *capacityBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	arrived := time.Now()
	b.mu.Lock()
	if b.start.IsZero() {
		b.start = arrived
	}
	b.inflight++
	latency, shed := capacityModel(b.inflight, b.capacity, b.base)
	at := arrived.Sub(b.start)
	if shed {
		b.inflight--
		b.records = append(b.records, capRecord{at: at, status: http.StatusServiceUnavailable})
		b.mu.Unlock()
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
		return
	}
	b.mu.Unlock()
	select {
	case <-time.After(latency):
	case <-r.Context().Done():
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`)
	took := time.Since(arrived)
	b.mu.Lock()
	b.inflight--
	b.records = append(b.records, capRecord{at: at, latency: took, status: http.StatusOK})
	b.mu.Unlock()
}

// snapshot stops sampling and returns what the backend saw.
func (b *capacityBackend) snapshot() ([]capRecord, []capSample) {
	b.stopSampling()
	b.sampled.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]capRecord(nil), b.records...), append([]capSample(nil), b.samples...)
}

// meanInflight is the mean sampled in-flight count over [from, to).
func meanInflight(samples []capSample, from, to time.Duration) float64 {
	sum, n := 0, 0
	for _, s := range samples {
		if s.at >= from && s.at < to {
			sum += s.inflight
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n)
}

// period summarises the records that arrived in [from, to): 200s per second,
// 503 count and the p99 latency of the 200s.
func period(records []capRecord, from, to time.Duration) (okPerSec float64, shed int, p99 time.Duration) {
	var lats []time.Duration
	for _, r := range records {
		if r.at < from || r.at >= to {
			continue
		}
		if r.status == http.StatusOK {
			lats = append(lats, r.latency)
		} else {
			shed++
		}
	}
	if to > from {
		okPerSec = float64(len(lats)) / (to - from).Seconds()
	}
	if len(lats) > 0 {
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		p99 = lats[int(math.Ceil(0.99*float64(len(lats))))-1]
	}
	return okPerSec, shed, p99
}

// followTime is how long after change the in-flight count came within
// ±tol of target and stayed there until end, in whole seconds: the in-flight
// samples are averaged per second from change, and the answer is the end of
// the first second from which every second's mean is within tolerance (1 s
// if the first already is). ok is false when it never settled.
func followTime(samples []capSample, change, end time.Duration, target, tol float64) (time.Duration, bool) {
	settled := time.Duration(-1)
	for s := change; s+time.Second <= end; s += time.Second {
		m := meanInflight(samples, s, s+time.Second)
		if math.Abs(m-target) <= tol*target {
			if settled < 0 {
				settled = s
			}
		} else {
			settled = -1
		}
	}
	if settled < 0 {
		return 0, false
	}
	return settled - change + time.Second, true
}
