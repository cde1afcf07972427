package app

import (
	"context"
	"sync"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/ports"
)

// sweeper periodically purges expired jobs (in batches, so no transaction
// holds the writer long) and puts jobs stuck in flight back into their lanes.
type sweeper struct {
	cfg    Config
	d      *dispatcher
	log    *zap.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startSweeper(cfg Config, d *dispatcher) *sweeper {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sweeper{cfg: cfg, d: d, log: cfg.Logger.Named("sweep"), cancel: cancel}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, stop := d.after(cfg.SweepInterval)
			select {
			case <-ctx.Done():
				stop()
				return
			case <-c:
			}
			s.runOnce(ctx)
		}
	}()
	return s
}

func (s *sweeper) stop() {
	s.cancel()
	s.wg.Wait()
}

// runOnce does one purge and one stale reset.
func (s *sweeper) runOnce(ctx context.Context) {
	now := s.cfg.Clock.Now()
	purged := 0
	for ctx.Err() == nil {
		n, err := s.cfg.Store.Purge(ctx, &ports.PurgeParams{Now: now, Limit: s.cfg.PurgeBatch})
		if err != nil {
			s.log.Warn("purging expired jobs failed", zap.Error(err))
			break
		}
		purged += n
		if n < s.cfg.PurgeBatch {
			break
		}
	}
	if purged > 0 {
		s.log.Info("purged expired jobs", zap.Int("count", purged))
	}
	reset, err := s.cfg.Store.ResetStale(ctx, &ports.ResetStaleParams{
		DispatchedBefore: now.Add(-s.cfg.StaleAfter),
		Exclude:          s.d.executingSet(),
		Now:              now,
	})
	if err != nil {
		s.log.Warn("resetting stale in-flight jobs failed", zap.Error(err))
		return
	}
	for _, j := range reset {
		s.log.Warn("job was in flight too long; requeued", zap.String("job_id", string(j.ID)))
		s.d.notify(j.ReadyLane, true)
	}
}
