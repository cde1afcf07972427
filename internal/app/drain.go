package app

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

// DrainConfig turns on drain mode (BEHAVIOR.md §19): once the whole process
// has been idle for Idle, the idempotency ledger is flushed to WebhookURL
// and, only after every page was confirmed with a 2xx, the finished jobs are
// cleared, so the instance can be handed to another tenant.
type DrainConfig struct {
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

func (c DrainConfig) withDefaults() DrainConfig {
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

// Drain states.
const (
	DrainActive     = "active"     // work was seen since the last idle period
	DrainDraining   = "draining"   // idle; waiting out the timer, or flushing, or retrying a failed flush
	DrainUnassigned = "unassigned" // the ledger was flushed and cleared; ready for a new tenant
)

// DrainHealth is drain mode's state in /health (only when enabled).
type DrainHealth struct {
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
	cfg   DrainConfig
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

func newDrainer(cfg DrainConfig, log *zap.Logger, idle func(context.Context) (bool, error),
	flush func(context.Context, string, func() bool) (int, error)) *drainer {
	return &drainer{cfg: cfg.withDefaults(), log: log.Named("drain"), idle: idle, flush: flush, state: DrainActive}
}

// activity records new work: the state is active again, the idle timer and
// any flush in progress are void.
func (d *drainer) activity() {
	d.mu.Lock()
	d.gen++
	if d.state != DrainActive {
		d.log.Info("new work: drain state active")
	}
	d.state, d.idleSince, d.nextAttempt, d.failures, d.flushID = DrainActive, time.Time{}, time.Time{}, 0, ""
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
		d.state, d.idleSince, d.nextAttempt, d.failures, d.flushID = DrainActive, time.Time{}, time.Time{}, 0, ""
		d.mu.Unlock()
		return
	case d.state == DrainUnassigned:
		d.mu.Unlock()
		return
	case d.idleSince.IsZero():
		d.state, d.idleSince, d.flushID = DrainDraining, now, l8.NewUUID()
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
		d.state, d.lastFlush, d.failures, d.lastErr, d.nextAttempt = DrainUnassigned, now, 0, "", time.Time{}
		d.log.Info("ledger flushed and cleared: unassigned", zap.Int("entries", n))
	}
}

func (d *drainer) health() *DrainHealth {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := &DrainHealth{State: d.state, LastError: d.lastErr}
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

// DrainPayload is one page of a ledger flush.
type DrainPayload struct {
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

// idleNow reports whether the whole process has nothing to do: nothing
// queued, running or waiting for delivery in the store, and nothing in a
// lane.
func (s *Service) idleNow(ctx context.Context) (bool, error) {
	if s.d.executingCount() > 0 || s.d.anyBusy() {
		return false, nil
	}
	c, err := s.cfg.Store.Counts(ctx)
	if err != nil {
		return false, err
	}
	return c.Total() == 0, nil
}

// flushLedger sends the ledger page by page and, once every page was
// accepted, deletes the finished jobs it listed. It returns the number of
// entries sent.
func (s *Service) flushLedger(ctx context.Context, flushID string, stillIdle func() bool) (int, error) {
	ls := s.cfg.Store.(ports.LedgerStore) // checked by Config.Validate
	cfg := s.cfg.Drain
	now := s.cfg.Clock.Now()
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
		p := DrainPayload{Event: "instance_idle", FlushID: flushID, FlushedAt: flushedAt, Page: page, Last: last,
			Ledger: make([]LedgerEntryJSON, len(entries))}
		for i, e := range entries {
			p.Ledger[i] = LedgerEntryJSON{IdempotentKeyHash: IdempotentKeyHash(e.UserID, e.IdempotentKey),
				JobID: string(e.ID), Status: string(e.Status)}
		}
		if !stillIdle() {
			return sent, errNewWork
		}
		if err := s.postDrainPage(ctx, flushID, &p); err != nil {
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
		n, err := ls.DeleteFinished(ctx, through, s.cfg.PurgeBatch)
		if err != nil {
			return sent, fmt.Errorf("clear ledger: %w", err)
		}
		if n == 0 {
			break
		}
	}
	s.proxy.reset()
	return sent, nil
}

// postDrainPage POSTs one page, signed like a webhook; a 2xx confirms it.
func (s *Service) postDrainPage(ctx context.Context, flushID string, p *DrainPayload) error {
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.Drain.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	s.d.sign(ctx, req, fmt.Sprintf("msg_drain_%s_%d", flushID, p.Page), s.cfg.Drain.WebhookURL, body)
	resp, err := s.cfg.Doer.Do(req)
	if err != nil {
		return withoutURL(err) // the drain URL may carry a token: keep it out of /health and the log
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("drain webhook answered %d", resp.StatusCode)
	}
	return nil
}

// validateDrain checks drain mode's settings against the store.
func validateDrain(c DrainConfig, store ports.JobStore) error {
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
