// Package admit is admission control: it sheds new jobs with a 429 while the
// process holds too much memory or the store is too large (BEHAVIOR.md §16),
// with a Retry-After that grows while the pressure lasts.
package admit

import (
	"context"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Config sets the limits above which new jobs are shed with a 429
// (BEHAVIOR.md §16). A zero limit disables that check.
type Config struct {
	// MemoryLimitMB rejects new jobs while the process holds more than this
	// many MiB: the memory the Go runtime has from the OS less what it has
	// released back (see ProcessMemory). That figure is right from the first
	// request (the live heap reads 0 until the first collection) and shrinks
	// again as the runtime returns freed memory, so the check recovers by
	// itself. 0 = off.
	MemoryLimitMB int64
	// DBMaxBytes rejects new jobs while the store uses more than this many
	// bytes (SQLite: pages in use plus the WAL, so purged jobs free room).
	// 0 = off.
	DBMaxBytes int64
	// RetryAfter is the Retry-After of the first rejection in a row; each
	// further one doubles it, up to RetryAfterMax. An admitted job resets
	// the streak. Defaults 5s and 60s.
	RetryAfter    time.Duration
	RetryAfterMax time.Duration
	// SampleEvery is how long a measurement is reused; default 250ms.
	SampleEvery time.Duration
	// Memory returns the memory figure in bytes; default: ProcessMemory.
	// Tests replace it.
	Memory func() int64
}

func (c Config) WithDefaults() Config {
	if c.RetryAfter <= 0 {
		c.RetryAfter = 5 * time.Second
	}
	if c.RetryAfterMax <= 0 {
		c.RetryAfterMax = 60 * time.Second
	}
	if c.SampleEvery <= 0 {
		c.SampleEvery = 250 * time.Millisecond
	}
	if c.Memory == nil {
		c.Memory = ProcessMemory
	}
	return c
}

// ProcessMemory returns the memory the process holds, in bytes: everything the
// Go runtime has mapped from the OS (heap, stacks, runtime metadata) less
// the heap memory it has released back, which is about the process's
// resident Go memory. It reads runtime/metrics, without stopping the world;
// admission reuses a reading for SampleEvery rather than reading per job.
func ProcessMemory() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64() - min(s[1].Value.Uint64(), s[0].Value.Uint64()))
}

// Controller decides whether a new job may be stored.
type Controller struct {
	cfg   Config
	store ports.JobStore
	clock ports.Clock

	mu        sync.Mutex
	sampledAt time.Time
	memBytes  int64
	dbBytes   int64 // -1: the store cannot tell
	streak    int
	lastLimit string // the limit the last check tripped, "" if it passed

	rejected atomic.Int64
}

func New(cfg Config, store ports.JobStore, clock ports.Clock) *Controller {
	return &Controller{cfg: cfg.WithDefaults(), store: store, clock: clock, dbBytes: -1}
}

func (a *Controller) Enabled() bool { return a.cfg.MemoryLimitMB > 0 || a.cfg.DBMaxBytes > 0 }

// Check returns the exceeded limit as a rejection, or nil. It changes
// nothing: call Reject to actually shed the job.
func (a *Controller) Check(ctx context.Context) *domain.RejectedError {
	if !a.Enabled() {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sampleLocked(ctx)
	var rej *domain.RejectedError
	if a.cfg.MemoryLimitMB > 0 && a.memBytes > a.cfg.MemoryLimitMB<<20 {
		rej = &domain.RejectedError{Limit: domain.LimitMemory, Max: a.cfg.MemoryLimitMB, Current: (a.memBytes + 1<<20 - 1) >> 20}
	} else if a.cfg.DBMaxBytes > 0 && a.dbBytes > a.cfg.DBMaxBytes {
		rej = &domain.RejectedError{Limit: domain.LimitDBSize, Max: a.cfg.DBMaxBytes, Current: a.dbBytes}
	}
	if rej == nil {
		a.lastLimit = ""
	}
	return rej
}

// Reject sheds a job for rej: it lengthens the Retry-After streak and sets
// rej.RetryAfter. See Admitted for the reset.
func (a *Controller) Reject(rej *domain.RejectedError) *domain.RejectedError {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.streak++
	a.lastLimit = rej.Limit
	rej.RetryAfter = a.retryAfterLocked()
	a.rejected.Add(1)
	return rej
}

// Admitted resets the Retry-After streak: the next rejection starts again
// at the base value.
func (a *Controller) Admitted() {
	if !a.Enabled() {
		return
	}
	a.mu.Lock()
	a.streak = 0
	a.mu.Unlock()
}

// retryAfterLocked is the Retry-After for the current streak: the base for
// the first rejection, doubled for each further one, capped.
func (a *Controller) retryAfterLocked() time.Duration {
	d := a.cfg.RetryAfter
	for i := 1; i < a.streak && d < a.cfg.RetryAfterMax; i++ {
		d *= 2
	}
	return min(d, max(a.cfg.RetryAfterMax, a.cfg.RetryAfter))
}

func (a *Controller) sampleLocked(ctx context.Context) {
	now := a.clock.Now()
	if !a.sampledAt.IsZero() && now.Sub(a.sampledAt) < a.cfg.SampleEvery {
		return
	}
	a.sampledAt = now
	a.memBytes = a.cfg.Memory()
	if a.cfg.DBMaxBytes > 0 {
		if n, err := a.store.SizeBytes(ctx); err == nil {
			a.dbBytes = n
		}
	}
}

// Health is the admission part of /health (BEHAVIOR.md §7).
type Health struct {
	Enabled           bool   `json:"enabled"`
	MemoryMB          int64  `json:"memory_mb"`
	MemoryLimitMB     int64  `json:"memory_limit_mb"`
	MaxBodyBytes      int64  `json:"max_body_bytes"`
	DBBytes           int64  `json:"db_bytes"`
	DBMaxBytes        int64  `json:"db_max_bytes"`
	RetryAfterSeconds int64  `json:"retry_after_seconds"`
	Rejecting         bool   `json:"rejecting"`
	LimitReason       string `json:"limit_reason,omitempty"`
	RejectedTotal     int64  `json:"rejected_total"`
}

func (a *Controller) Health(ctx context.Context, maxBody int64) *Health {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sampledAt = time.Time{} // health always measures afresh
	a.sampleLocked(ctx)
	if a.dbBytes < 0 {
		if n, err := a.store.SizeBytes(ctx); err == nil {
			a.dbBytes = n
		}
	}
	streak := a.streak
	if streak == 0 {
		a.streak = 1 // the value the next rejection would carry
	}
	ra := a.retryAfterLocked()
	a.streak = streak
	return &Health{
		Enabled: a.Enabled() || maxBody > 0, MemoryMB: a.memBytes >> 20, MemoryLimitMB: a.cfg.MemoryLimitMB,
		MaxBodyBytes: maxBody, DBBytes: a.dbBytes, DBMaxBytes: a.cfg.DBMaxBytes,
		RetryAfterSeconds: int64(ra / time.Second), Rejecting: a.lastLimit != "", LimitReason: a.lastLimit,
		RejectedTotal: a.rejected.Load(),
	}
}
