package app

import (
	"context"
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
	clock  ports.Clock
	wg     sync.WaitGroup
}

func (s *Service) startBackground() *background {
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{cancel: cancel, clock: s.cfg.Clock}
	b.every(ctx, s.cfg.SweepInterval, s.sweep)
	b.every(ctx, s.cfg.LoadRefresh, func(ctx context.Context) { s.load.Refresh(ctx, false) })
	b.every(ctx, s.cfg.PositionInterval, s.publishPositions)
	b.every(ctx, s.cfg.PoolSweep, s.sweepPools)
	b.run(func() { s.sched.Run(ctx) })
	if s.leases != nil {
		b.run(func() { s.leases.Loop(ctx) })
		b.run(func() {
			if err := s.bus.Listen(ctx, func(m ports.ClusterMessage) { s.onClusterMessage(ctx, m) }); err != nil && ctx.Err() == nil {
				s.log.Error("listening to other processes stopped", zap.Error(err))
			}
		})
		b.run(func() { s.shared.Loop(ctx) })
		// Pauses arrive as messages; the reload is the safety net for a
		// message that was lost.
		b.every(ctx, 5*s.cfg.Cluster.SyncInterval, func(ctx context.Context) {
			if err := s.loadPauses(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("could not reload lane pauses", zap.Error(err))
			}
		})
	}
	if s.drain != nil {
		b.every(ctx, s.drain.Every(), s.drain.Tick)
	}
	b.every(ctx, time.Minute, func(context.Context) {
		s.signer.SweepNonces()
		s.d.PruneCanceled(s.cfg.Clock.Now())
	})
	return b
}

func (b *background) every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			t := b.clock.NewTimer(interval)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
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
		Exclude:          s.d.ExecutingSet(),
		Now:              now,
	})
	if err != nil {
		log.Warn("resetting stale in-flight jobs failed", zap.Error(err))
		return
	}
	for _, j := range reset {
		log.Warn("job was in flight too long; requeued", zap.String("job_id", string(j.ID)))
		s.d.Notify(j.ReadyQueue, true)
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
		if err != nil || j.Status != domain.StatusQueued || j.Scheduled() || s.d.Executing(id) {
			continue
		}
		if pos, err := s.Position(ctx, j); err == nil {
			s.broker.Publish(domain.Event{Type: domain.EventPosition, JobID: id, Position: pos})
		}
	}
}

// sweepPools evicts pool members that stopped heartbeating or sat at the
// reputation floor too long (in cluster mode, of the pools whose lane this
// process holds; the others' state is their holder's).
func (s *Service) sweepPools(ctx context.Context) {
	evicted := s.pools.Sweep(s.d.Holds)
	for _, m := range evicted {
		s.log.Warn("pool member evicted", zap.String("member", m))
	}
	if s.shared != nil {
		s.shared.Evicted(ctx, evicted)
	}
}
