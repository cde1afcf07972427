// Package load keeps the store-wide counts Aquifer reports as its backlog —
// in the load headers of every outbound request and in each submission's
// answer — refreshed in the background rather than counted per request.
package load

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/ports"
)

// Load is what Aquifer tells upstreams, webhook receivers and its own
// callers about its backlog (BEHAVIOR.md §13), so either side can autoscale.
type Load struct {
	Total    int64   // unfinished work: waiting, running, and results waiting for delivery
	Depth    int64   // work waiting: jobs not started and results not yet delivered
	FlowRate float64 // the destination lane's current pace, requests per second

	// The three as header values, preformatted and shared read-only by
	// every answer (Gauge.Report sets them; a Load built by hand has none,
	// and Texts formats them).
	TotalText, DepthText, FlowRateText []string
}

// Texts returns the header values of l: the preformatted ones, or else
// freshly formatted.
func (l Load) Texts() (total, depth, rate []string) {
	total, depth, rate = l.TotalText, l.DepthText, l.FlowRateText
	if total == nil {
		total = []string{strconv.FormatInt(l.Total, 10)}
	}
	if depth == nil {
		depth = []string{strconv.FormatInt(l.Depth, 10)}
	}
	if rate == nil {
		rate = RateText(l.FlowRate)
	}
	return total, depth, rate
}

// FormatRate formats a rate as the load headers carry it: two decimals.
func FormatRate(r float64) string { return strconv.FormatFloat(r, 'f', 2, 64) }

// RateText returns FormatRate(r) as a header value shared read-only by
// every caller. Each lane's pace is one of a few values at a time, so the
// texts are remembered (at most rateTexts of them; the memory starts over
// when full) rather than formatted for every request and answer.
func RateText(r float64) []string {
	rateMu.RLock()
	v, ok := rateCache[r]
	rateMu.RUnlock()
	if ok {
		return v
	}
	v = []string{FormatRate(r)}
	rateMu.Lock()
	if len(rateCache) >= rateTexts {
		clear(rateCache)
	}
	rateCache[r] = v
	rateMu.Unlock()
	return v
}

const rateTexts = 1024

var (
	rateMu    sync.RWMutex
	rateCache = make(map[float64][]string)
)

// Gauge keeps the store-wide counts behind the load headers. Counting
// per request would cost a query per dispatch; instead the counts are
// refreshed in the background, at most once a refresh interval and only
// while somebody reads them, and may be that much out of date. The header
// values are formatted once per refresh.
type Gauge struct {
	store   ports.JobStore
	running func() int // attempts running in this process
	clock   ports.Clock
	log     *zap.Logger

	wanted atomic.Bool
	now    atomic.Pointer[Snapshot]

	mu   sync.Mutex // serialises counting
	next time.Time  // counts before this are skipped (countShare)
}

// countShare bounds the time spent counting: after a count that took d,
// the next waits at least (countShare-1)·d, so counting takes at most
// 1/countShare of one core however large the backlog (SQLite's count, a
// scan of one index, takes about 0.4 s at a million queued jobs on the
// 2-core development machine; the headers are then up to 8 s old rather
// than one).
const countShare = 20

// Snapshot is one refresh: the counts and their header texts.
type Snapshot struct {
	Total, Depth         int64
	TotalText, DepthText []string // header values, shared read-only by every request

	Counts    ports.Counts // as the store reported them
	CountedAt time.Time    // zero: never counted
}

// NewGauge returns a gauge over store; running counts the attempts this
// process runs (quick ones are in flight only in memory).
func NewGauge(store ports.JobStore, running func() int, clock ports.Clock, log *zap.Logger) *Gauge {
	g := &Gauge{store: store, running: running, clock: clock, log: log}
	g.now.Store(&Snapshot{TotalText: []string{"0"}, DepthText: []string{"0"}})
	return g
}

// Snapshot returns the latest counts, and marks them as wanted so the next
// refresh reads them again.
func (g *Gauge) Snapshot() *Snapshot {
	g.wanted.Store(true)
	return g.now.Load()
}

// Report returns the current load with the given flow rate.
func (g *Gauge) Report(flowRate float64) Load {
	s := g.Snapshot()
	return Load{Total: s.Total, Depth: s.Depth, FlowRate: flowRate,
		TotalText: s.TotalText, DepthText: s.DepthText, FlowRateText: RateText(flowRate)}
}

// Refresh reads the counts if anybody asked for them since the last refresh
// and the last count's cost allows (countShare); force: regardless.
func (g *Gauge) Refresh(ctx context.Context, force bool) {
	if !force && !g.wanted.Load() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !force && g.clock.Now().Before(g.next) {
		return
	}
	g.wanted.Store(false)
	if err := g.countLocked(ctx); err != nil && ctx.Err() == nil {
		g.log.Warn("counting jobs for the load headers failed", zap.Error(err))
	}
}

// Counts returns the latest snapshot, counted now unless it is younger
// than fresh or counting is backing off (countShare): /health reads the
// counts this way, so polling it never costs more than the gauge's own
// budget and a slow count cannot time the health check out. An error is
// the store's, with the last snapshot (which may never have been counted:
// CountedAt zero).
func (g *Gauge) Counts(ctx context.Context, fresh time.Duration) (*Snapshot, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.now.Load()
	now := g.clock.Now()
	if !s.CountedAt.IsZero() && (now.Sub(s.CountedAt) < fresh || now.Before(g.next)) {
		return s, nil
	}
	err := g.countLocked(ctx)
	return g.now.Load(), err
}

// countLocked counts and publishes a snapshot; g.mu is held.
func (g *Gauge) countLocked(ctx context.Context) error {
	start := g.clock.Now()
	c, err := g.store.Counts(ctx)
	g.next = start.Add(countShare * g.clock.Now().Sub(start))
	if err != nil {
		return err
	}
	// Quick attempts are in flight only in memory: the store still counts
	// them as queued.
	running := int64(g.running())
	s := &Snapshot{Total: c.Total(), Depth: max(c.Queued+c.InFlight-running, 0) + c.Deliveries, Counts: c, CountedAt: start}
	s.TotalText = []string{strconv.FormatInt(s.Total, 10)}
	s.DepthText = []string{strconv.FormatInt(s.Depth, 10)}
	g.now.Store(s)
	return nil
}
