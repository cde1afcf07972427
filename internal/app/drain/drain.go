// Package drain is drain mode (BEHAVIOR.md §19): once the whole process has
// been idle long enough, its idempotency ledger is posted to a webhook page
// by page and, only after every page was confirmed, the finished jobs are
// cleared, so the instance can be handed to another tenant.
package drain

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Config turns on drain mode (BEHAVIOR.md §19): once the whole process
// has been idle for Idle, the idempotency ledger is flushed to WebhookURL
// and, only after every page was confirmed with a 2xx, the finished jobs are
// cleared, so the instance can be handed to another tenant.
type Config struct {
	Enabled    bool
	WebhookURL string
	// Idle is how long the process must have no work before a flush.
	// Default 45s.
	Idle time.Duration
	// PageSize bounds the ledger entries per webhook request. Default 1000.
	PageSize int
	// Tick is how often idleness is checked. Default 5s.
	Tick time.Duration
	// RetryMin is the wait after the first failed flush, doubling after
	// each further failure up to RetryMax. Defaults 5s and 5m.
	RetryMin, RetryMax time.Duration
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Idle <= 0 {
		c.Idle = 45 * time.Second
	}
	if c.PageSize <= 0 {
		c.PageSize = 1000
	}
	if c.Tick <= 0 {
		c.Tick = 5 * time.Second
	}
	if c.RetryMin <= 0 {
		c.RetryMin = 5 * time.Second
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 5 * time.Minute
	}
	return c
}

// States.
const (
	Active     = "active"     // work was seen since the last idle period
	Draining   = "draining"   // idle; waiting out the timer, or flushing, or retrying a failed flush
	Unassigned = "unassigned" // the ledger was flushed and cleared; ready for a new tenant
)

// Health is drain mode's state in /health (only when enabled).
type Health struct {
	State         string `json:"state"`
	IdleSinceMS   int64  `json:"idle_since_ms,omitempty"`
	LastFlushMS   int64  `json:"last_flush_ms,omitempty"`
	LastError     string `json:"last_error,omitempty"`
	NextAttemptMS int64  `json:"next_attempt_ms,omitempty"`
}

// errNewWork aborts a flush: work arrived, the process is no longer idle.
var errNewWork = errors.New("new work arrived during the flush")

// drainer is drain mode's state machine. tick advances it; activity (any new
// job) puts it back to active at once.
type drainer struct {
	cfg   Config
	log   *zap.Logger
	idle  func(ctx context.Context) (bool, error)
	flush func(ctx context.Context, flushID string, stillIdle func() bool) (int, error)

	mu          sync.Mutex
	state       string
	gen         uint64 // bumped by activity
	idleSince   time.Time
	lastFlush   time.Time
	nextAttempt time.Time
	failures    int
	lastErr     string
	flushID     string
}

func newDrainer(cfg Config, log *zap.Logger, idle func(context.Context) (bool, error),
	flush func(context.Context, string, func() bool) (int, error)) *drainer {
	return &drainer{cfg: cfg.WithDefaults(), log: log.Named("drain"), idle: idle, flush: flush, state: Active}
}

// activity records new work: the state is active again, the idle timer and
// any flush in progress are void.
func (d *drainer) activity() {
	d.mu.Lock()
	d.gen++
	if d.state != Active {
		d.log.Info("new work: drain state active")
	}
	d.state, d.idleSince, d.nextAttempt, d.failures, d.flushID = Active, time.Time{}, time.Time{}, 0, ""
	d.mu.Unlock()
}

// tick checks idleness at now and flushes when the idle time is up.
func (d *drainer) tick(ctx context.Context, now time.Time) {
	idle, err := d.idle(ctx)
	if err != nil {
		d.log.Warn("checking for idleness failed", zap.Error(err))
		return
	}
	d.mu.Lock()
	switch {
	case !idle:
		d.state, d.idleSince, d.nextAttempt, d.failures, d.flushID = Active, time.Time{}, time.Time{}, 0, ""
		d.mu.Unlock()
		return
	case d.state == Unassigned:
		d.mu.Unlock()
		return
	case d.idleSince.IsZero():
		d.state, d.idleSince, d.flushID = Draining, now, l8.NewUUID()
		d.mu.Unlock()
		return
	case now.Sub(d.idleSince) < d.cfg.Idle || now.Before(d.nextAttempt):
		d.mu.Unlock()
		return
	}
	gen, flushID := d.gen, d.flushID
	d.mu.Unlock()

	stillIdle := func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.gen == gen
	}
	n, err := d.flush(ctx, flushID, stillIdle)

	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.gen != gen || errors.Is(err, errNewWork):
		// activity() already set the state; nothing was cleared.
	case err != nil:
		d.failures++
		d.lastErr = err.Error()
		backoff := min(d.cfg.RetryMin<<min(d.failures-1, 16), d.cfg.RetryMax)
		d.nextAttempt = now.Add(backoff)
		d.log.Warn("drain flush failed; nothing was cleared; retrying", zap.Error(err), zap.Duration("retry_in", backoff))
	default:
		d.state, d.lastFlush, d.failures, d.lastErr, d.nextAttempt = Unassigned, now, 0, "", time.Time{}
		d.log.Info("ledger flushed and cleared: unassigned", zap.Int("entries", n))
	}
}

func (d *drainer) health() *Health {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := &Health{State: d.state, LastError: d.lastErr}
	if !d.idleSince.IsZero() {
		h.IdleSinceMS = d.idleSince.UnixMilli()
	}
	if !d.lastFlush.IsZero() {
		h.LastFlushMS = d.lastFlush.UnixMilli()
	}
	if !d.nextAttempt.IsZero() {
		h.NextAttemptMS = d.nextAttempt.UnixMilli()
	}
	return h
}

// LedgerEntryJSON is one ledger entry as the drain webhook receives it.
type LedgerEntryJSON struct {
	IdempotentKeyHash string `json:"idempotent_key_hash"`
	JobID             string `json:"job_id"`
	Status            string `json:"status"`
}

// Payload is one page of a ledger flush.
type Payload struct {
	Event     string            `json:"event"` // "instance_idle"
	FlushID   string            `json:"flush_id"`
	FlushedAt string            `json:"flushed_at"` // RFC 3339, UTC, seconds
	Page      int               `json:"page"`       // 1-based
	Last      bool              `json:"last"`
	Ledger    []LedgerEntryJSON `json:"ledger"`
}

// IdempotentKeyHash is the ledger's hash of a key: hex SHA-256 of
// user_id + ":" + idempotent_key (never the key itself).
func IdempotentKeyHash(userID, key string) string {
	sum := sha256.Sum256([]byte(userID + ":" + key))
	return hex.EncodeToString(sum[:])
}

// flushLedger sends the ledger page by page and, once every page was
// accepted, deletes the finished jobs it listed. It returns the number of
// entries sent.
func (d *Drainer) flushLedger(ctx context.Context, flushID string, stillIdle func() bool) (int, error) {
	ls, cfg := d.deps.Ledger, d.cfg
	now := d.deps.Clock.Now()
	flushedAt := now.UTC().Format(time.RFC3339)
	var after string
	var through int64
	sent := 0
	for page := 1; ; page++ {
		entries, err := ls.Ledger(ctx, &ports.LedgerParams{After: after, Limit: cfg.PageSize + 1, Now: now})
		if err != nil {
			return sent, fmt.Errorf("read ledger: %w", err)
		}
		if len(entries) == 0 {
			if page == 1 {
				return 0, nil // nothing to hand over
			}
			break
		}
		last := len(entries) <= cfg.PageSize
		if !last {
			entries = entries[:cfg.PageSize]
		}
		p := Payload{Event: "instance_idle", FlushID: flushID, FlushedAt: flushedAt, Page: page, Last: last,
			Ledger: make([]LedgerEntryJSON, len(entries))}
		for i, e := range entries {
			p.Ledger[i] = LedgerEntryJSON{IdempotentKeyHash: IdempotentKeyHash(e.UserID, e.IdempotentKey),
				JobID: string(e.ID), Status: string(e.Status)}
		}
		if !stillIdle() {
			return sent, errNewWork
		}
		if err := d.postPage(ctx, flushID, &p); err != nil {
			return sent, fmt.Errorf("page %d: %w", page, err)
		}
		sent += len(entries)
		after = entries[len(entries)-1].Cursor
		for _, e := range entries {
			through = max(through, e.Seq)
		}
		if last {
			break
		}
	}
	if !stillIdle() {
		return sent, errNewWork
	}
	// Every page was confirmed: clear what was handed over. Only finished
	// jobs go; anything that started since stays.
	for {
		n, err := ls.DeleteFinished(ctx, through, d.deps.PurgeBatch)
		if err != nil {
			return sent, fmt.Errorf("clear ledger: %w", err)
		}
		if n == 0 {
			break
		}
	}
	if d.deps.Flushed != nil {
		d.deps.Flushed()
	}
	return sent, nil
}

// postPage POSTs one page, signed like a webhook; a 2xx confirms it.
func (d *Drainer) postPage(ctx context.Context, flushID string, p *Payload) error {
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d.deps.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.cfg.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	d.deps.Signer.Sign(ctx, req, fmt.Sprintf("msg_drain_%s_%d", flushID, p.Page), d.cfg.WebhookURL, body)
	resp, err := d.deps.Doer.Do(req)
	if err != nil {
		return domain.WithoutURL(err) // the drain URL may carry a token: keep it out of /health and the log
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 256<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("drain webhook answered %d", resp.StatusCode)
	}
	return nil
}

// Validate checks drain mode's settings against the store.
func Validate(c Config, store ports.JobStore) error {
	if !c.Enabled {
		return nil
	}
	if _, ok := domain.UpstreamOf(c.WebhookURL); !ok {
		return errors.New("drain mode needs a drain webhook URL (an absolute http or https URL)")
	}
	if _, ok := store.(ports.LedgerStore); !ok {
		return fmt.Errorf("drain mode needs a store that this process owns alone (sqlite or pebble); %T is shared", store)
	}
	return nil
}

// Deps is what drain mode works with.
type Deps struct {
	Ledger ports.LedgerStore // the store, as a ledger (Validate checks it is one)
	Doer   ports.Doer
	Signer Signer
	// Idle reports whether the whole process has nothing to do.
	Idle func(ctx context.Context) (bool, error)
	// Flushed is called after a flush cleared the instance.
	Flushed        func()
	Clock          ports.Clock
	Logger         *zap.Logger
	RequestTimeout time.Duration // bounds one page's POST
	PurgeBatch     int           // finished jobs deleted per transaction
}

// Signer signs a drain page like a webhook (trust.Signer).
type Signer interface {
	Sign(ctx context.Context, req *http.Request, msgID, target string, body []byte)
}

// Drainer is drain mode: the idle state machine and the ledger flush.
type Drainer struct {
	cfg  Config
	deps Deps
	m    *drainer
}

// New returns drain mode for cfg (cfg.Enabled must be set).
func New(cfg Config, deps Deps) *Drainer {
	d := &Drainer{cfg: cfg.WithDefaults(), deps: deps}
	d.m = newDrainer(cfg, deps.Logger, deps.Idle, d.flushLedger)
	return d
}

// Activity records new work: the state is active again.
func (d *Drainer) Activity() { d.m.activity() }

// Tick advances the state machine (call it every Config.Tick).
func (d *Drainer) Tick(ctx context.Context) { d.m.tick(ctx, d.deps.Clock.Now()) }

// Every is how often Tick should run.
func (d *Drainer) Every() time.Duration { return d.cfg.Tick }

// Health is drain mode's state for /health.
func (d *Drainer) Health() *Health { return d.m.health() }
