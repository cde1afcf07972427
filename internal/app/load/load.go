// Package load keeps the store-wide counts Aquifer reports as its backlog —
// in the load headers of every outbound request and in each submission's
// answer — refreshed in the background rather than counted per request.
package load

import (
	"context"
	"strconv"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/ports"
)

// Load is what Aquifer tells upstreams, webhook receivers and its own
// callers about its backlog (BEHAVIOR.md §13), so either side can autoscale.
type Load struct {
	Total    int64   // unfinished work: waiting, running, and results waiting for delivery
	Depth    int64   // work waiting: jobs not started and results not yet delivered
	FlowRate float64 // the destination lane's current pace, requests per second
}

// FlowRateText formats FlowRate with two decimals, as the headers carry it.
func (l Load) FlowRateText() string { return FormatRate(l.FlowRate) }

// FormatRate formats a rate as the load headers carry it: two decimals.
func FormatRate(r float64) string { return strconv.FormatFloat(r, 'f', 2, 64) }

// Gauge keeps the store-wide counts behind the load headers. Counting
// per request would cost a query per dispatch; instead the counts are
// refreshed in the background, at most once a refresh interval and only
// while somebody reads them, and may be that much out of date. The header
// values are formatted once per refresh.
type Gauge struct {
	store   ports.JobStore
	running func() int // attempts running in this process
	log     *zap.Logger

	wanted atomic.Bool
	now    atomic.Pointer[Snapshot]
}

// Snapshot is one refresh: the counts and their header texts.
type Snapshot struct {
	Total, Depth         int64
	TotalText, DepthText []string // header values, shared read-only by every request
}

// NewGauge returns a gauge over store; running counts the attempts this
// process runs (quick ones are in flight only in memory).
func NewGauge(store ports.JobStore, running func() int, log *zap.Logger) *Gauge {
	g := &Gauge{store: store, running: running, log: log}
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
	return Load{Total: s.Total, Depth: s.Depth, FlowRate: flowRate}
}

// Refresh reads the counts if anybody asked for them since the last refresh
// (force: regardless).
func (g *Gauge) Refresh(ctx context.Context, force bool) {
	if !g.wanted.Swap(false) && !force {
		return
	}
	c, err := g.store.Counts(ctx)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("counting jobs for the load headers failed", zap.Error(err))
		}
		return
	}
	// Quick attempts are in flight only in memory: the store still counts
	// them as queued.
	running := int64(g.running())
	s := &Snapshot{Total: c.Total(), Depth: max(c.Queued+c.InFlight-running, 0) + c.Deliveries}
	s.TotalText = []string{strconv.FormatInt(s.Total, 10)}
	s.DepthText = []string{strconv.FormatInt(s.Depth, 10)}
	g.now.Store(s)
}
