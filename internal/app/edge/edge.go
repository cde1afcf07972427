// Package edge is edge-proxy mode (POST /proxy, BEHAVIOR.md §20): a request
// is stored as a job first, then sent directly when its destination is
// healthy and relayed as it arrives; anything that looks like overload turns
// it into an ordinary queued job. Direct attempts go out through the
// dispatcher's one exchange function, and their answers pace the lane like
// any other.
package edge

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/app/dispatch"
	"github.com/aquiferhq/aquifer/internal/app/events"
	"github.com/aquiferhq/aquifer/internal/app/load"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/pacing"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Config tunes edge-proxy mode (POST /proxy).
type Config struct {
	// DirectTimeout bounds the direct attempt, up to the response headers.
	// Default 3s.
	DirectTimeout time.Duration
	// BreakerMultiplier scales an overloaded answer's Retry-After into how
	// long the destination stays in queue mode at least. Default 3.
	BreakerMultiplier float64
	// DefaultCooldown is that time when the answer had no Retry-After.
	// Default 5s.
	DefaultCooldown time.Duration
	// ORCAThreshold is the ORCA utilization at or above which a direct
	// answer counts as overloaded. Default 0.70.
	ORCAThreshold float64
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.DirectTimeout <= 0 {
		c.DirectTimeout = 3 * time.Second
	}
	if c.BreakerMultiplier <= 0 {
		c.BreakerMultiplier = 3
	}
	if c.DefaultCooldown <= 0 {
		c.DefaultCooldown = 5 * time.Second
	}
	if c.ORCAThreshold <= 0 {
		c.ORCAThreshold = 0.70
	}
	return c
}

// Fallback reasons (BEHAVIOR.md §20.2).
const (
	FallbackOverloaded  = "upstream_overloaded"
	FallbackUnreachable = "upstream_unreachable"
	FallbackDegraded    = "domain_degraded"
	FallbackPoolRouted  = "pool_routed"
)

// Queue-mode request headers an upstream can answer with to ask for
// queuing up front.
const (
	hdrQueueActive      = "X-Aqueduct-Queue-Active"
	hdrQueueActiveAlias = "X-Aquifer-Queue-Active"
)

// Result is the outcome of a proxied request. Exactly one of Direct,
// Fallback or Duplicate describes it.
type Result struct {
	Job  *domain.Job
	Load load.Load

	// Direct is set when the upstream answered directly and well: relay it
	// with Direct.Relay, which also records the job's result.
	Direct *DirectResponse

	// Fallback is set when the request became a queued job; Reason (and
	// UpstreamStatus for an overloaded answer) say why. Sub follows the job;
	// it was opened before the job could run, so no event is missed.
	Fallback       bool
	Reason         string
	UpstreamStatus int

	// Duplicate is set when (user_id, idempotent_key) was already used: Job
	// is that job. For an unfinished one, Sub follows it.
	Duplicate bool

	Sub *events.Subscription
}

// DirectResponse is an upstream's direct answer, ready to be relayed.
type DirectResponse struct {
	Status int
	Header http.Header

	body   io.ReadCloser
	cancel context.CancelFunc
	finish func(body []byte, truncated bool, reason string)
	limit  int64
}

// Relay copies the body to w while keeping up to the result limit of it,
// then records the job as completed with that response. It must be called
// exactly once (also when the client is gone: pass io.Discard). A failed
// write to w stops the relay but not the recording.
func (r *DirectResponse) Relay(w io.Writer) error {
	defer r.cancel()
	defer r.body.Close()
	capture := &limitedBuffer{limit: r.limit}
	var writeErr error
	buf := make([]byte, 32<<10)
	var readErr error
	for {
		n, err := r.body.Read(buf)
		if n > 0 {
			capture.Write(buf[:n])
			if writeErr == nil {
				if _, werr := w.Write(buf[:n]); werr != nil {
					writeErr = werr
				}
			}
			if writeErr != nil && capture.full() {
				break // the client is gone and the result is complete
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
	}
	reason := ""
	if readErr != nil {
		reason = "reading response body: " + domain.WithoutURL(readErr).Error()
	}
	r.finish(capture.buf, capture.truncated, reason)
	if writeErr != nil {
		return writeErr
	}
	return readErr
}

type limitedBuffer struct {
	buf       []byte
	limit     int64
	truncated bool
}

func (b *limitedBuffer) Write(p []byte) {
	room := b.limit - int64(len(b.buf))
	if int64(len(p)) > room {
		p, b.truncated = p[:max(room, 0)], true
	}
	b.buf = append(b.buf, p...)
}

func (b *limitedBuffer) full() bool { return b.truncated || int64(len(b.buf)) >= b.limit }

// modes tracks, per destination, how long it stays in queue mode after
// an overload (the breaker). Queue mode also lasts as long as the
// destination has a backlog (dispatch.Dispatcher.Busy), so it ends when the queue has
// actually drained, not when a timer runs out.
type modes struct {
	mu sync.Mutex
	m  map[domain.UpstreamKey]*proxyMode
}

type proxyMode struct {
	until      time.Time // breaker: queue until then
	lastReason string
	lastAt     time.Time
}

func (p *modes) trip(u domain.UpstreamKey, until time.Time, reason string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[domain.UpstreamKey]*proxyMode{}
	}
	m := p.m[u]
	if m == nil {
		m = &proxyMode{}
		p.m[u] = m
	}
	if until.After(m.until) {
		m.until = until
	}
	m.lastReason, m.lastAt = reason, now
}

// reset forgets every destination's mode (drain mode cleared the instance).
func (p *modes) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m = nil
}

func (p *modes) breakerOpen(u domain.UpstreamKey, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.m[u]
	return m != nil && now.Before(m.until)
}

// Health is a destination's proxy mode for /health.
type Health struct {
	Mode           string `json:"mode"` // "queue" or "direct"
	Backlog        bool   `json:"backlog"`
	BreakerUntilMS int64  `json:"breaker_until_ms,omitempty"`
	LastFallback   string `json:"last_fallback,omitempty"`
}

// Proxy serves edge-proxy requests.
type Proxy struct {
	cfg    Config
	clock  ports.Clock
	log    *zap.Logger
	store  ports.JobStore
	intake Intake
	d      *dispatch.Dispatcher
	broker *events.Broker
	load   *load.Gauge
	modes  modes
}

// Intake is how a proxied request becomes a job: validated, and stored
// with admission control, exactly like any other submission (the app's
// Service).
type Intake interface {
	// Prepare validates req for the caller in ctx and builds its job.
	Prepare(ctx context.Context, req *domain.JobRequest) (*domain.Job, error)
	// Store runs admission control and inserts job unless its idempotency
	// key is taken (then it returns the job holding it, fresh false).
	Store(ctx context.Context, job *domain.Job) (stored *domain.Job, fresh bool, err error)
	// Get and Subscribe read a job as the caller in ctx may see it.
	Get(ctx context.Context, id domain.JobID) (*domain.Job, error)
	Subscribe(ctx context.Context, id domain.JobID) (*domain.Job, *events.Subscription, error)
}

// New returns the edge proxy. cfg is completed with its defaults.
func New(cfg Config, store ports.JobStore, intake Intake, d *dispatch.Dispatcher, broker *events.Broker, g *load.Gauge,
	log *zap.Logger) *Proxy {
	return &Proxy{cfg: cfg.WithDefaults(), clock: d.Clock(), log: log.Named("proxy"), store: store, intake: intake, d: d, broker: broker, load: g}
}

// Reset forgets every destination's mode (drain mode cleared the instance).
func (p *Proxy) Reset() { p.modes.reset() }

// zeroRate is the flow rate a direct attempt reports: it is not paced.
var zeroRate = []string{load.FormatRate(0)}

// Health is each destination's proxy mode (only destinations the proxy
// has seen fall back); nil when there are none.
func (p *Proxy) Health() map[string]Health {
	now := p.clock.Now()
	p.modes.mu.Lock()
	defer p.modes.mu.Unlock()
	if len(p.modes.m) == 0 {
		return nil
	}
	out := make(map[string]Health, len(p.modes.m))
	for u, m := range p.modes.m {
		backlog := p.d.Busy(u)
		h := Health{Mode: "direct", Backlog: backlog, LastFallback: m.lastReason}
		if now.Before(m.until) {
			h.BreakerUntilMS = m.until.UnixMilli()
		}
		if backlog || now.Before(m.until) {
			h.Mode = "queue"
		}
		out[string(u)] = h
	}
	return out
}

// Proxy handles one edge-proxy request (BEHAVIOR.md §20): the job is stored
// durably first (so it is never lost and idempotency holds), then — unless
// the destination is in queue mode — sent directly; a healthy answer is
// handed back for relaying, and anything that looks like overload turns the
// request into an ordinary queued job, whose subscription the result
// carries. A destination stays in queue mode while the breaker is open and
// for as long as it has a backlog.
func (p *Proxy) Proxy(ctx context.Context, req *domain.JobRequest) (*Result, error) {
	job, err := p.intake.Prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	upstream := job.Upstream()
	now := p.clock.Now()
	reason := ""
	switch {
	case job.PoolID != "":
		reason = FallbackPoolRouted
	case p.modes.breakerOpen(upstream, now) || p.d.Busy(upstream) || p.d.Down(upstream) || p.d.HeldElsewhere(upstream) != "":
		// Another process holding the lane means it has a backlog there; a
		// lane whose outage circuit is open knows the destination is down.
		reason = FallbackDegraded
	}
	if reason != "" {
		return p.queue(ctx, job, reason, 0)
	}

	// Hold the job before it is stored, so its lane cannot dispatch it while
	// the direct attempt runs (a crash meanwhile leaves it queued, and it
	// runs after restart).
	if !p.d.BeginDispatch(job) {
		return nil, &domain.Error{Code: domain.CodeConflict, Message: "job id already in use"}
	}
	if p.d.Clustered() {
		// Other processes read the store, not this one's memory: record the
		// job as in flight so no lane holder picks it up meanwhile.
		job.Status, job.DispatchedAt = domain.StatusInFlight, now
	}
	stored, fresh, err := p.intake.Store(ctx, job)
	if err != nil || !fresh {
		p.d.EndDispatch(job.ID)
		if err != nil {
			return nil, err
		}
		return p.duplicate(ctx, stored)
	}
	return p.direct(ctx, stored)
}

// queue stores job as an ordinary queued job and follows it.
func (p *Proxy) queue(ctx context.Context, job *domain.Job, reason string, upstreamStatus int) (*Result, error) {
	sub := p.broker.Subscribe(job.ID)
	stored, fresh, err := p.intake.Store(ctx, job)
	if err != nil {
		sub.Close()
		return nil, err
	}
	if !fresh {
		sub.Close()
		return p.duplicate(ctx, stored)
	}
	p.d.Offer(stored)
	p.recordFallback(stored, reason)
	return &Result{Job: stored, Fallback: true, Reason: reason, UpstreamStatus: upstreamStatus, Sub: sub,
		Load: p.load.Report(p.d.FlowRate(stored.Queue.Upstream()))}, nil
}

func (p *Proxy) recordFallback(j *domain.Job, reason string) {
	now := p.clock.Now()
	if reason != FallbackPoolRouted {
		p.modes.trip(j.Upstream(), time.Time{}, reason, now)
	}
	p.log.Debug("proxy fell back to the queue", zap.String("job_id", string(j.ID)), zap.String("reason", reason))
}

// duplicate answers a request whose key was already used: a finished
// job as is, an unfinished one with a subscription to follow it.
func (p *Proxy) duplicate(ctx context.Context, existing *domain.Job) (*Result, error) {
	if existing.Status.Terminal() {
		return &Result{Job: existing, Duplicate: true}, nil
	}
	j, sub, err := p.intake.Subscribe(ctx, existing.ID)
	if err != nil {
		return nil, err
	}
	if j.Status.Terminal() {
		sub.Close()
		return &Result{Job: j, Duplicate: true}, nil
	}
	return &Result{Job: j, Duplicate: true, Sub: sub}, nil
}

// direct sends the held, stored job once, directly.
func (p *Proxy) direct(ctx context.Context, job *domain.Job) (*Result, error) {
	cfg := p.cfg
	upstream := job.Upstream()
	// The attempt belongs to the service, not to the client's connection: if
	// the client leaves, the answer is still recorded.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.d.RequestTimeout())
	headerTimer := time.AfterFunc(cfg.DirectTimeout, cancel)
	traceparent, endSpan := p.d.TraceAttempt(job, p.clock.Now())
	resp, err := p.d.Exchange(actx, job, job.URL, zeroRate, traceparent)
	if err != nil {
		endSpan(0, err.Error(), p.clock.Now())
	} else {
		endSpan(resp.StatusCode, "", p.clock.Now())
	}
	if !headerTimer.Stop() && err == nil {
		// The direct deadline passed just as the answer came: too late.
		resp.Body.Close()
		err = context.DeadlineExceeded
	}
	var denied *domain.DestinationDeniedError
	if errors.As(err, &denied) {
		// The destination resolved to a forbidden address: the job fails
		// (no queue would change that) and the caller hears why.
		cancel()
		defer p.d.EndDispatch(job.ID)
		if ferr := p.d.CommitFinish(context.WithoutCancel(ctx), job, domain.StatusFailed, 1,
			&domain.Result{Reason: domain.PublicMessage(denied)}); ferr != nil {
			p.log.Error("recording a refused proxied job failed", zap.String("job_id", string(job.ID)), zap.Error(ferr))
		}
		return nil, denied
	}
	if err != nil {
		cancel()
		return p.release(ctx, job, FallbackUnreachable, 0)
	}
	now := p.clock.Now()
	sig := pacing.ParseSignals(resp.StatusCode, resp.Header, now)
	if overloaded(resp.StatusCode, sig, cfg.ORCAThreshold) {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, dispatch.DrainLimit))
		resp.Body.Close()
		cancel()
		cooldown := cfg.DefaultCooldown
		if sig.RetryAfter > 0 {
			cooldown = time.Duration(float64(sig.RetryAfter) * cfg.BreakerMultiplier)
		}
		p.modes.trip(upstream, now.Add(cooldown), FallbackOverloaded, now)
		p.d.Observe(job.Queue, resp.StatusCode, sig)
		return p.release(ctx, job, FallbackOverloaded, resp.StatusCode)
	}
	if queueActive(resp.Header) {
		p.modes.trip(upstream, now.Add(cfg.DefaultCooldown), "queue_requested", now)
	}
	return &Result{Job: job, Load: p.load.Report(p.d.FlowRate(upstream)), Direct: &DirectResponse{
		Status: resp.StatusCode, Header: resp.Header, body: resp.Body, cancel: cancel, limit: p.d.MaxResponseBytes(),
		finish: func(body []byte, truncated bool, reason string) {
			defer p.d.EndDispatch(job.ID)
			res := &domain.Result{ResponseStatus: resp.StatusCode, Body: body, BodyTruncated: truncated,
				ContentType: resp.Header.Get("Content-Type"), Reason: reason}
			// Completed: the upstream answered (a cut-off body still is its answer).
			if err := p.d.CommitFinish(context.WithoutCancel(ctx), job, domain.StatusCompleted, 1, res); err != nil {
				// The job stays queued in the store and runs again from the
				// queue: at-least-once, as for any attempt whose result could
				// not be recorded.
				p.log.Error("recording a proxied result failed; the job will run again from the queue",
					zap.String("job_id", string(job.ID)), zap.Error(err))
				if job.Status == domain.StatusInFlight {
					_ = p.store.Requeue(context.WithoutCancel(ctx), &ports.RequeueParams{ID: job.ID, Seq: job.Seq,
						Phase: domain.PhaseDispatch, Now: p.clock.Now()})
				}
				p.d.EndDispatch(job.ID)
				p.d.RequeueHeld(job)
			}
		},
	}}, nil
}

// release hands a held job that was not answered well to its lane, as
// an ordinary queued job, and follows it.
func (p *Proxy) release(ctx context.Context, job *domain.Job, reason string, upstreamStatus int) (*Result, error) {
	sub := p.broker.Subscribe(job.ID)
	if job.Status == domain.StatusInFlight {
		if err := p.store.Requeue(context.WithoutCancel(ctx), &ports.RequeueParams{ID: job.ID, Seq: job.Seq,
			Phase: domain.PhaseDispatch, Now: p.clock.Now()}); err != nil {
			// It stays in flight in the store; the lane holder's recovery or
			// the stale sweep puts it back.
			p.log.Warn("returning a proxied job to its queue failed", zap.String("job_id", string(job.ID)), zap.Error(err))
		}
		job.Status = domain.StatusQueued
	}
	p.d.EndDispatch(job.ID)
	p.d.RequeueHeld(job)
	p.recordFallback(job, reason)
	j, err := p.intake.Get(ctx, job.ID)
	if err != nil {
		j = job
	}
	return &Result{Job: j, Fallback: true, Reason: reason, UpstreamStatus: upstreamStatus, Sub: sub,
		Load: p.load.Report(p.d.FlowRate(job.Upstream()))}, nil
}

// overloaded classifies a direct answer: 429, any 5xx, or ORCA utilization
// at or above the threshold.
func overloaded(status int, sig pacing.Signals, orcaThreshold float64) bool {
	return status == http.StatusTooManyRequests || status >= 500 ||
		sig.HasUtilization && sig.Utilization >= orcaThreshold
}

func queueActive(h http.Header) bool {
	v := h.Get(hdrQueueActive)
	if v == "" {
		v = h.Get(hdrQueueActiveAlias)
	}
	return strings.EqualFold(strings.TrimSpace(v), "true")
}
