package app

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/pacing"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// ProxyConfig tunes edge-proxy mode (POST /proxy).
type ProxyConfig struct {
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

func (c ProxyConfig) withDefaults() ProxyConfig {
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

// ProxyResult is the outcome of a proxied request. Exactly one of Direct,
// Fallback or Duplicate describes it.
type ProxyResult struct {
	Job  *domain.Job
	Load Load

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

	Sub *Subscription
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
		reason = "reading response body: " + withoutURL(readErr).Error()
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

// proxyModes tracks, per destination, how long it stays in queue mode after
// an overload (the breaker). Queue mode also lasts as long as the
// destination has a backlog (dispatcher.busy), so it ends when the queue has
// actually drained, not when a timer runs out.
type proxyModes struct {
	mu sync.Mutex
	m  map[domain.UpstreamKey]*proxyMode
}

type proxyMode struct {
	until      time.Time // breaker: queue until then
	lastReason string
	lastAt     time.Time
}

func (p *proxyModes) trip(u domain.UpstreamKey, until time.Time, reason string, now time.Time) {
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
func (p *proxyModes) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m = nil
}

func (p *proxyModes) breakerOpen(u domain.UpstreamKey, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.m[u]
	return m != nil && now.Before(m.until)
}

// ProxyHealth is a destination's proxy mode for /health.
type ProxyHealth struct {
	Mode           string `json:"mode"` // "queue" or "direct"
	Backlog        bool   `json:"backlog"`
	BreakerUntilMS int64  `json:"breaker_until_ms,omitempty"`
	LastFallback   string `json:"last_fallback,omitempty"`
}

func (s *Service) proxyHealth() map[string]ProxyHealth {
	now := s.cfg.Clock.Now()
	s.proxy.mu.Lock()
	defer s.proxy.mu.Unlock()
	if len(s.proxy.m) == 0 {
		return nil
	}
	out := make(map[string]ProxyHealth, len(s.proxy.m))
	for u, m := range s.proxy.m {
		backlog := s.d.busy(u)
		h := ProxyHealth{Mode: "direct", Backlog: backlog, LastFallback: m.lastReason}
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
func (s *Service) Proxy(ctx context.Context, req *domain.JobRequest) (*ProxyResult, error) {
	job, err := s.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	upstream := job.Upstream()
	now := s.cfg.Clock.Now()
	reason := ""
	switch {
	case job.PoolID != "":
		reason = FallbackPoolRouted
	case s.proxy.breakerOpen(upstream, now) || s.d.busy(upstream) || s.d.down(upstream) || s.d.heldElsewhere(upstream) != "":
		// Another process holding the lane means it has a backlog there; a
		// lane whose outage circuit is open knows the destination is down.
		reason = FallbackDegraded
	}
	if reason != "" {
		return s.proxyQueue(ctx, job, reason, 0)
	}

	// Hold the job before it is stored, so its lane cannot dispatch it while
	// the direct attempt runs (a crash meanwhile leaves it queued, and it
	// runs after restart).
	if !s.d.beginDispatch(job) {
		return nil, &domain.Error{Code: domain.CodeConflict, Message: "job id already in use"}
	}
	if s.d.cluster != nil {
		// Other processes read the store, not this one's memory: record the
		// job as in flight so no lane holder picks it up meanwhile.
		job.Status, job.DispatchedAt = domain.StatusInFlight, now
	}
	stored, fresh, err := s.store(ctx, job)
	if err != nil || !fresh {
		s.d.endDispatch(job.ID)
		if err != nil {
			return nil, err
		}
		return s.proxyDuplicate(ctx, stored)
	}
	return s.proxyDirect(ctx, stored)
}

// proxyQueue stores job as an ordinary queued job and follows it.
func (s *Service) proxyQueue(ctx context.Context, job *domain.Job, reason string, upstreamStatus int) (*ProxyResult, error) {
	sub := s.broker.Subscribe(job.ID)
	stored, fresh, err := s.store(ctx, job)
	if err != nil {
		sub.Close()
		return nil, err
	}
	if !fresh {
		sub.Close()
		return s.proxyDuplicate(ctx, stored)
	}
	s.d.offer(stored)
	s.recordFallback(stored, reason)
	return &ProxyResult{Job: stored, Fallback: true, Reason: reason, UpstreamStatus: upstreamStatus, Sub: sub,
		Load: s.load.report(s.d.flowRate(stored.Queue.Upstream()))}, nil
}

func (s *Service) recordFallback(j *domain.Job, reason string) {
	now := s.cfg.Clock.Now()
	if reason != FallbackPoolRouted {
		s.proxy.trip(j.Upstream(), time.Time{}, reason, now)
	}
	s.log.Debug("proxy fell back to the queue", zap.String("job_id", string(j.ID)), zap.String("reason", reason))
}

// proxyDuplicate answers a request whose key was already used: a finished
// job as is, an unfinished one with a subscription to follow it.
func (s *Service) proxyDuplicate(ctx context.Context, existing *domain.Job) (*ProxyResult, error) {
	if existing.Status.Terminal() {
		return &ProxyResult{Job: existing, Duplicate: true}, nil
	}
	j, sub, err := s.Subscribe(ctx, existing.ID)
	if err != nil {
		return nil, err
	}
	if j.Status.Terminal() {
		sub.Close()
		return &ProxyResult{Job: j, Duplicate: true}, nil
	}
	return &ProxyResult{Job: j, Duplicate: true, Sub: sub}, nil
}

// proxyDirect sends the held, stored job once, directly.
func (s *Service) proxyDirect(ctx context.Context, job *domain.Job) (*ProxyResult, error) {
	cfg := s.cfg.Proxy
	upstream := job.Upstream()
	// The attempt belongs to the service, not to the client's connection: if
	// the client leaves, the answer is still recorded.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RequestTimeout)
	headerTimer := time.AfterFunc(cfg.DirectTimeout, cancel)
	httpReq, err := buildRequest(s.d.policyCtx(actx, job), job, job.URL)
	if err != nil {
		headerTimer.Stop()
		cancel()
		return s.proxyRelease(ctx, job, FallbackUnreachable, 0)
	}
	s.d.decorate(httpReq, []string{formatRate(0)})
	resp, err := s.cfg.Doer.Do(httpReq)
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
		defer s.d.endDispatch(job.ID)
		if ferr := s.d.commitFinish(context.WithoutCancel(ctx), job, domain.StatusFailed, 1,
			&domain.Result{Reason: domain.PublicMessage(denied)}); ferr != nil {
			s.log.Error("recording a refused proxied job failed", zap.String("job_id", string(job.ID)), zap.Error(ferr))
		}
		return nil, denied
	}
	if err != nil {
		cancel()
		return s.proxyRelease(ctx, job, FallbackUnreachable, 0)
	}
	now := s.cfg.Clock.Now()
	sig := pacing.ParseSignals(resp.StatusCode, resp.Header, now)
	if overloaded(resp.StatusCode, sig, cfg.ORCAThreshold) {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
		resp.Body.Close()
		cancel()
		cooldown := cfg.DefaultCooldown
		if sig.RetryAfter > 0 {
			cooldown = time.Duration(float64(sig.RetryAfter) * cfg.BreakerMultiplier)
		}
		s.proxy.trip(upstream, now.Add(cooldown), FallbackOverloaded, now)
		s.d.observe(job.Queue, resp.StatusCode, sig)
		return s.proxyRelease(ctx, job, FallbackOverloaded, resp.StatusCode)
	}
	if queueActive(resp.Header) {
		s.proxy.trip(upstream, now.Add(cfg.DefaultCooldown), "queue_requested", now)
	}
	return &ProxyResult{Job: job, Load: s.load.report(s.d.flowRate(upstream)), Direct: &DirectResponse{
		Status: resp.StatusCode, Header: resp.Header, body: resp.Body, cancel: cancel, limit: s.cfg.MaxResponseBytes,
		finish: func(body []byte, truncated bool, reason string) {
			defer s.d.endDispatch(job.ID)
			res := &domain.Result{ResponseStatus: resp.StatusCode, Body: body, BodyTruncated: truncated,
				ContentType: resp.Header.Get("Content-Type"), Reason: reason}
			// Completed: the upstream answered (a cut-off body still is its answer).
			if err := s.d.commitFinish(context.WithoutCancel(ctx), job, domain.StatusCompleted, 1, res); err != nil {
				// The job stays queued in the store and runs again from the
				// queue: at-least-once, as for any attempt whose result could
				// not be recorded.
				s.log.Error("recording a proxied result failed; the job will run again from the queue",
					zap.String("job_id", string(job.ID)), zap.Error(err))
				if job.Status == domain.StatusInFlight {
					_ = s.cfg.Store.Requeue(context.WithoutCancel(ctx), &ports.RequeueParams{ID: job.ID, Seq: job.Seq,
						Phase: domain.PhaseDispatch, Now: s.cfg.Clock.Now()})
				}
				s.d.endDispatch(job.ID)
				s.d.requeueHeld(job)
			}
		},
	}}, nil
}

// proxyRelease hands a held job that was not answered well to its lane, as
// an ordinary queued job, and follows it.
func (s *Service) proxyRelease(ctx context.Context, job *domain.Job, reason string, upstreamStatus int) (*ProxyResult, error) {
	sub := s.broker.Subscribe(job.ID)
	if job.Status == domain.StatusInFlight {
		if err := s.cfg.Store.Requeue(context.WithoutCancel(ctx), &ports.RequeueParams{ID: job.ID, Seq: job.Seq,
			Phase: domain.PhaseDispatch, Now: s.cfg.Clock.Now()}); err != nil {
			// It stays in flight in the store; the lane holder's recovery or
			// the stale sweep puts it back.
			s.log.Warn("returning a proxied job to its queue failed", zap.String("job_id", string(job.ID)), zap.Error(err))
		}
		job.Status = domain.StatusQueued
	}
	s.d.endDispatch(job.ID)
	s.d.requeueHeld(job)
	s.recordFallback(job, reason)
	j, err := s.Get(ctx, job.ID)
	if err != nil {
		j = job
	}
	return &ProxyResult{Job: j, Fallback: true, Reason: reason, UpstreamStatus: upstreamStatus, Sub: sub,
		Load: s.load.report(s.d.flowRate(job.Upstream()))}, nil
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
