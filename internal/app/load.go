package app

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
func (l Load) FlowRateText() string { return formatRate(l.FlowRate) }

func formatRate(r float64) string { return strconv.FormatFloat(r, 'f', 2, 64) }

// loadGauge keeps the store-wide counts behind the load headers. Counting
// per request would cost a query per dispatch; instead the counts are
// refreshed in the background, at most once a refresh interval and only
// while somebody reads them, and may be that much out of date. The header
// values are formatted once per refresh.
type loadGauge struct {
	store ports.JobStore
	d     *dispatcher
	log   *zap.Logger

	wanted atomic.Bool
	now    atomic.Pointer[loadSnapshot]
}

// loadSnapshot is one refresh: the counts and their header texts.
type loadSnapshot struct {
	total, depth         int64
	totalText, depthText []string // header values, shared read-only by every request
}

func newLoadGauge(store ports.JobStore, d *dispatcher, log *zap.Logger) *loadGauge {
	g := &loadGauge{store: store, d: d, log: log}
	g.now.Store(&loadSnapshot{totalText: []string{"0"}, depthText: []string{"0"}})
	return g
}

func (g *loadGauge) snapshot() *loadSnapshot {
	g.wanted.Store(true)
	return g.now.Load()
}

// report returns the current load with the given flow rate.
func (g *loadGauge) report(flowRate float64) Load {
	s := g.snapshot()
	return Load{Total: s.total, Depth: s.depth, FlowRate: flowRate}
}

// refresh reads the counts if anybody asked for them since the last refresh
// (force: regardless).
func (g *loadGauge) refresh(ctx context.Context, force bool) {
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
	// Quick attempts are in flight only in memory (markInFlightLater): the
	// store still counts them as queued.
	running := int64(g.d.executingCount())
	s := &loadSnapshot{total: c.Total(), depth: max(c.Queued+c.InFlight-running, 0) + c.Deliveries}
	s.totalText = []string{strconv.FormatInt(s.total, 10)}
	s.depthText = []string{strconv.FormatInt(s.depth, 10)}
	g.now.Store(s)
}
