package app

import (
	"context"
	"strconv"
	"sync"
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
func (l Load) FlowRateText() string { return strconv.FormatFloat(l.FlowRate, 'f', 2, 64) }

// loadGauge keeps the store-wide counts behind the load headers. Counting
// per request would cost a query per dispatch; instead the counts are
// refreshed in the background, at most once a refresh interval and only
// while somebody reads them, and may be that much out of date.
type loadGauge struct {
	store ports.JobStore
	d     *dispatcher
	log   *zap.Logger

	wanted atomic.Bool
	mu     sync.Mutex
	counts ports.Counts
}

func newLoadGauge(store ports.JobStore, d *dispatcher, log *zap.Logger) *loadGauge {
	return &loadGauge{store: store, d: d, log: log}
}

// report returns the current load with the given flow rate.
func (g *loadGauge) report(flowRate float64) Load {
	g.wanted.Store(true)
	g.mu.Lock()
	c := g.counts
	g.mu.Unlock()
	// Quick attempts are in flight only in memory (markInFlightLater): the
	// store still counts them as queued.
	running := int64(g.d.executingCount())
	return Load{
		Total:    c.Total(),
		Depth:    max(c.Queued+c.InFlight-running, 0) + c.Deliveries,
		FlowRate: flowRate,
	}
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
	g.mu.Lock()
	g.counts = c
	g.mu.Unlock()
}
