package app

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// maxPositionsPerTick bounds the position events one tick computes (each
// costs a store read and a count).
const maxPositionsPerTick = 1000

// background runs the service's periodic work: the purge and stale sweep,
// the load-count refresh and position events. Every loop stops with stop.
type background struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (s *Service) startBackground() *background {
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{cancel: cancel}
	b.every(ctx, s.d, s.cfg.SweepInterval, s.sweep)
	b.every(ctx, s.d, s.cfg.LoadRefresh, func(ctx context.Context) { s.load.refresh(ctx, false) })
	b.every(ctx, s.d, s.cfg.PositionInterval, s.publishPositions)
	b.every(ctx, s.d, s.cfg.PoolSweep, s.sweepPools)
	if s.d.cluster != nil {
		b.run(func() { s.leaseLoop(ctx) })
		b.run(func() {
			if err := s.d.cluster.c.Bus.Listen(ctx, func(m ports.ClusterMessage) { s.onClusterMessage(ctx, m) }); err != nil && ctx.Err() == nil {
				s.log.Error("listening to other processes stopped", zap.Error(err))
			}
		})
		b.run(func() { s.poolSyncLoop(ctx) })
	}
	if s.drain != nil {
		b.every(ctx, s.d, s.cfg.Drain.Tick, func(ctx context.Context) { s.drain.tick(ctx, s.cfg.Clock.Now()) })
	}
	b.every(ctx, s.d, time.Minute, func(context.Context) {
		s.nonces.Sweep(s.cfg.Clock.Now())
		s.d.pruneCanceled(s.cfg.Clock.Now())
	})
	return b
}

func (b *background) every(ctx context.Context, d *dispatcher, interval time.Duration, fn func(context.Context)) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, stop := d.after(interval)
			select {
			case <-ctx.Done():
				stop()
				return
			case <-c:
			}
			fn(ctx)
		}
	}()
}

// run runs fn on its own goroutine until the background stops.
func (b *background) run(fn func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn()
	}()
}

func (b *background) stop() {
	b.cancel()
	b.wg.Wait()
}

// sweep purges expired jobs in batches (so no transaction holds the writer
// long) and puts jobs stuck in flight back into their lanes.
func (s *Service) sweep(ctx context.Context) {
	log := s.log.Named("sweep")
	now := s.cfg.Clock.Now()
	purged := 0
	for ctx.Err() == nil {
		n, err := s.cfg.Store.Purge(ctx, &ports.PurgeParams{Now: now, Limit: s.cfg.PurgeBatch})
		if err != nil {
			log.Warn("purging expired jobs failed", zap.Error(err))
			break
		}
		purged += n
		if n < s.cfg.PurgeBatch {
			break
		}
	}
	if purged > 0 {
		log.Info("purged expired jobs", zap.Int("count", purged))
	}
	reset, err := s.cfg.Store.ResetStale(ctx, &ports.ResetStaleParams{
		DispatchedBefore: now.Add(-s.cfg.StaleAfter),
		Exclude:          s.d.executingSet(),
		Now:              now,
	})
	if err != nil {
		log.Warn("resetting stale in-flight jobs failed", zap.Error(err))
		return
	}
	for _, j := range reset {
		log.Warn("job was in flight too long; requeued", zap.String("job_id", string(j.ID)))
		s.d.notify(j.ReadyQueue, true)
	}
}

// publishPositions tells each subscribed, still-queued job its place in
// its queue.
func (s *Service) publishPositions(ctx context.Context) {
	ids := s.broker.SubscribedIDs()
	if len(ids) > maxPositionsPerTick {
		ids = ids[:maxPositionsPerTick]
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		j, err := s.cfg.Store.Get(ctx, id)
		if err != nil || j.Status != domain.StatusQueued || s.d.isExecuting(id) {
			continue
		}
		if pos, err := s.Position(ctx, j); err == nil {
			s.broker.Publish(domain.Event{Type: domain.EventPosition, JobID: id, Position: pos})
		}
	}
}

// sweepPools evicts pool members that stopped heartbeating or sat at the
// reputation floor too long.
func (s *Service) sweepPools(ctx context.Context) {
	for _, m := range s.pools.sweep(s.d.holds) {
		s.log.Warn("pool member evicted", zap.String("member", m))
		if s.d.cluster != nil {
			pool, member, _ := strings.Cut(m, "/")
			if _, err := s.d.cluster.c.Members.DeleteMember(ctx, pool, member); err != nil {
				s.log.Warn("removing an evicted pool member from the shared store failed", zap.Error(err))
			}
		}
	}
}
