package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

// backend is the fake backend: one loopback HTTP server hosting every
// logical worker at /worker/<i>.
type backend struct {
	url     string // http://127.0.0.1:port
	srv     *http.Server
	ln      net.Listener
	workers []*simWorker

	mu    sync.Mutex
	start time.Time // second 1 begins here; zero until begin
}

// simWorker is one logical worker: its spec, its state and what it saw,
// per second.
type simWorker struct {
	spec workerSpec

	mu    sync.Mutex
	state workerState
	rng   *rand.Rand
	stats []secondStats // index s-1
}

// secondStats is what one worker saw in one second.
type secondStats struct {
	requests, http200, http429, http500 int
	failing                             int     // requests that arrived while it was already failing
	advertised                          float64 // the last X-Aqueduct-Rps sent (0: none)
	crashed                             bool    // it answered from a crash window

	// The worker's state after its last request in the second.
	overload   float64
	crashUntil int
}

// workerSecond is one worker's row for one second, with the state at the
// end of that second.
type workerSecond struct {
	secondStats
	overload float64
	inCrash  bool // crashed during the second, or the crash window covers it
}

func newBackend(specs []workerSpec, seed uint64) (*backend, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fake backend: listen: %w", err)
	}
	b := &backend{url: "http://" + ln.Addr().String(), ln: ln}
	for _, s := range specs {
		b.workers = append(b.workers, &simWorker{spec: s, rng: rand.New(rand.NewPCG(seed, uint64(s.index)))})
	}
	b.srv = &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

// begin starts the clock: requests from now on are in second 1, 2, …
func (b *backend) begin(now time.Time) {
	b.mu.Lock()
	b.start = now
	b.mu.Unlock()
}

// second returns the 1-based second t falls in.
func (b *backend) second(t time.Time) int {
	b.mu.Lock()
	start := b.start
	b.mu.Unlock()
	if start.IsZero() || t.Before(start) {
		return 1
	}
	return int(t.Sub(start)/time.Second) + 1
}

func (b *backend) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := b.srv.Shutdown(ctx); err != nil {
		_ = b.srv.Close()
	}
}

// workerURL is the address of worker i (1-based).
func (b *backend) workerURL(i int) string { return b.url + "/worker/" + strconv.Itoa(i) }

// ServeHTTP answers /worker/<i> as worker i would.
func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/worker/")
	i, err := strconv.Atoi(rest)
	if !ok || err != nil || i < 1 || i > len(b.workers) {
		http.NotFound(w, r)
		return
	}
	sw := b.workers[i-1]
	s := b.second(time.Now())
	rep := sw.serve(s)
	if rep.delay > 0 {
		t := time.NewTimer(rep.delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if rep.advertised > 0 {
		w.Header().Set(pacing.HeaderRPS, strconv.FormatFloat(rep.advertised, 'f', 2, 64))
	}
	body, _ := json.Marshal(struct {
		Worker   int    `json:"worker"`
		Behavior string `json:"behavior"`
		Second   int    `json:"second"`
	}{i, string(sw.spec.behavior), s})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.status)
	_, _ = w.Write(body)
}

// serve computes the reply to a request in second s and counts it.
func (sw *simWorker) serve(s int) reply {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	jitter := 0
	if sw.spec.behavior == dynamic {
		jitter = sw.rng.IntN(5) - 2
	}
	rep := sw.state.handle(sw.spec, s, jitter)
	for len(sw.stats) < s {
		sw.stats = append(sw.stats, secondStats{})
	}
	st := &sw.stats[s-1]
	st.requests++
	switch {
	case rep.status >= 500:
		st.http500++
	case rep.status == http.StatusTooManyRequests:
		st.http429++
	case rep.status == http.StatusOK:
		st.http200++
	}
	if rep.failing {
		st.failing++
	}
	if rep.advertised > 0 {
		st.advertised = rep.advertised
	}
	st.crashed = st.crashed || rep.crashed
	st.overload, st.crashUntil = sw.state.overload, sw.state.crashUntil
	return rep
}

// observe returns what worker sw saw in second s.
func (sw *simWorker) observe(s int) workerSecond {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	var ws workerSecond
	if s >= 1 && s <= len(sw.stats) {
		ws.secondStats = sw.stats[s-1]
	}
	// The state at the end of s: from the last second up to s that had
	// requests, decayed to s.
	for last := min(s, len(sw.stats)); last >= 1; last-- {
		if prev := sw.stats[last-1]; prev.requests > 0 {
			ws.overload = decayOverload(prev.overload, s-last)
			ws.inCrash = ws.crashed || (prev.crashUntil > 0 && s <= prev.crashUntil)
			break
		}
	}
	return ws
}

// totals are request counts over a whole run.
type totals struct {
	requests, http200, http429, http500, failing int
}

func (b *backend) totals() totals {
	var t totals
	for _, sw := range b.workers {
		sw.mu.Lock()
		for _, st := range sw.stats {
			t.requests += st.requests
			t.http200 += st.http200
			t.http429 += st.http429
			t.http500 += st.http500
			t.failing += st.failing
		}
		sw.mu.Unlock()
	}
	return t
}
