// Package trust signs webhook deliveries and keeps the receivers that
// proved their identity: Standard Webhooks signatures (v1 with the shared
// secrets, v1a with Aquifer's key) on every delivery, and L8 signatures for
// receivers that completed the handshake (BEHAVIOR.md §23), which it runs
// once per receiver. It also answers other parties' L8 challenges.
package trust

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Config turns on signed webhook deliveries.
type Config struct {
	// Identity is Aquifer's key pair; nil disables signing altogether.
	Identity *l8.Identity
	// Trust stores trusted receivers; nil keeps trust in memory only.
	Trust ports.TrustStore
	// MissTTL is how long a receiver that does not speak L8 (or failed the
	// handshake) is left alone before it is probed again. Default 10m.
	MissTTL time.Duration
	// HandshakeTimeout bounds each handshake request. Default 5s.
	HandshakeTimeout time.Duration
}

// trustManager establishes and remembers trust with webhook receivers
// (BEHAVIOR.md §23.3), once per receiver at a time.
type trustManager struct {
	cfg   Config
	doer  ports.Doer
	clock ports.Clock
	log   *zap.Logger

	mu       sync.Mutex
	misses   map[string]time.Time     // domain → probe again after
	inflight map[string]chan struct{} // domain → handshake running
	known    map[string]knownTrust    // URL authority → the last answer (trustRecheck)
}

// knownTrust is trusted's last answer for one receiver and until when it
// stands.
type knownTrust struct {
	trusted bool
	until   time.Time
}

// trustRecheck is how long trusted's "no" for a receiver stands before the
// trust store is read again (a miss window ending sooner ends it sooner):
// deliveries to a receiver without L8 — most of them — then cost one store
// read (a file's stat) a second, not one each. A "yes" is not remembered:
// removing a receiver's trust file revokes it for the very next delivery.
const trustRecheck = time.Second

// maxKnown bounds the remembered answers; the memory starts over when full.
const maxKnown = 4096

func newTrustManager(cfg Config, doer ports.Doer, clock ports.Clock, log *zap.Logger) *trustManager {
	if cfg.MissTTL <= 0 {
		cfg.MissTTL = 10 * time.Minute
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 5 * time.Second
	}
	if cfg.Trust == nil {
		cfg.Trust = &memTrust{m: map[string]*l8.Trust{}}
	}
	return &trustManager{cfg: cfg, doer: doer, clock: clock, log: log.Named("l8"),
		misses: map[string]time.Time{}, inflight: map[string]chan struct{}{}, known: map[string]knownTrust{}}
}

// domainOf returns scheme://host[:port] of a URL, "" if it has none.
func domainOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// trusted reports whether deliveries to target should be L8-signed: the
// answer of check, a "no" remembered per receiver for trustRecheck.
func (tm *trustManager) trusted(ctx context.Context, target string) bool {
	key, keyed := domain.AuthorityPrefix(target)
	now := tm.clock.Now()
	if keyed {
		tm.mu.Lock()
		k, hit := tm.known[key]
		tm.mu.Unlock()
		if hit && now.Before(k.until) {
			return k.trusted
		}
	}
	t, until := tm.check(ctx, target)
	if keyed && !t && now.Before(until) {
		tm.mu.Lock()
		if len(tm.known) >= maxKnown {
			clear(tm.known)
		}
		tm.known[strings.Clone(key)] = knownTrust{trusted: t, until: until}
		tm.mu.Unlock()
	}
	return t
}

// check reports whether deliveries to target should be L8-signed,
// running the handshake first if the receiver is neither trusted nor
// recently found not to speak L8. Concurrent deliveries to one receiver
// share one handshake. Any failure leaves the delivery unsigned. until is
// how long the answer may be reused (zero: not at all).
func (tm *trustManager) check(ctx context.Context, target string) (trusted bool, until time.Time) {
	recheck := tm.clock.Now().Add(trustRecheck)
	dom := domainOf(target)
	if dom == "" {
		return false, recheck
	}
	for {
		if _, err := tm.cfg.Trust.Get(dom); err == nil {
			return true, recheck
		}
		tm.mu.Lock()
		if until, ok := tm.misses[dom]; ok && tm.clock.Now().Before(until) {
			tm.mu.Unlock()
			if until.Before(recheck) {
				return false, until
			}
			return false, recheck
		}
		if wait, ok := tm.inflight[dom]; ok {
			tm.mu.Unlock()
			select {
			case <-wait:
				continue // look at the result
			case <-ctx.Done():
				return false, time.Time{}
			}
		}
		done := make(chan struct{})
		tm.inflight[dom] = done
		tm.mu.Unlock()

		err := tm.handshake(ctx, dom)
		tm.mu.Lock()
		delete(tm.inflight, dom)
		if err != nil {
			tm.misses[dom] = tm.clock.Now().Add(tm.cfg.MissTTL)
		} else {
			delete(tm.misses, dom)
		}
		tm.mu.Unlock()
		close(done)
		if err != nil {
			tm.log.Info("webhook receiver does not speak L8; deliveries carry Standard Webhooks signatures only",
				zap.String("domain", dom), zap.String("reason", err.Error()), zap.Duration("retry_in", tm.cfg.MissTTL))
			if missUntil := tm.clock.Now().Add(tm.cfg.MissTTL); missUntil.Before(recheck) {
				return false, missUntil
			}
			return false, recheck
		}
		tm.log.Info("webhook receiver trusted", zap.String("domain", dom))
		return true, recheck
	}
}

// handshake discovers the receiver's key, challenges it and verifies its
// proof, then saves the trust.
func (tm *trustManager) handshake(ctx context.Context, dom string) error {
	var meta l8.Metadata
	if err := tm.exchange(ctx, http.MethodGet, dom+"/.well-known/l8", nil, &meta); err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	if meta.PublicKey == "" || meta.ChallengeEndpoint == "" {
		return errors.New("discovery: no public_key or challenge_endpoint")
	}
	endpoint := meta.ChallengeEndpoint
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		endpoint = dom + "/" + strings.TrimPrefix(endpoint, "/")
	}
	if domainOf(endpoint) != dom {
		return errors.New("challenge endpoint is on another host")
	}
	c := tm.cfg.Identity.NewChallenge(tm.clock.Now())
	var resp l8.ChallengeResponse
	if err := tm.exchange(ctx, http.MethodPost, endpoint, c, &resp); err != nil {
		return fmt.Errorf("challenge: %w", err)
	}
	if err := l8.VerifyResponse(c, &resp, meta.PublicKey); err != nil {
		return fmt.Errorf("ownership proof failed: %w", err)
	}
	caps := meta.Capabilities
	if len(caps) == 0 {
		caps = []string{"signed_payloads"}
	}
	return tm.cfg.Trust.Put(&l8.Trust{Domain: dom, PublicKey: meta.PublicKey, ValidatedAt: tm.clock.Now().Unix(),
		ProtocolVersion: l8.ProtocolVersion, Capabilities: caps})
}

// exchange does one JSON request of the handshake with its own deadline.
func (tm *trustManager) exchange(ctx context.Context, method, target string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, tm.cfg.HandshakeTimeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return domain.WithoutURL(err)
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := tm.doer.Do(req)
	if err != nil {
		return domain.WithoutURL(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("%s %s answered %d", method, domain.RedactURL(target), resp.StatusCode)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(out)
}

// memTrust is the in-memory TrustStore used when none is configured.
type memTrust struct {
	mu sync.Mutex
	m  map[string]*l8.Trust
}

func (t *memTrust) Get(d string) (*l8.Trust, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr, ok := t.m[d]; ok {
		return tr, nil
	}
	return nil, l8.ErrNoTrust
}

func (t *memTrust) Put(tr *l8.Trust) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[tr.Domain] = tr
	return nil
}

// Signer signs outbound webhook requests: deliveries with their tenant's
// secrets (or the global ones), other requests (drain pages) with the global
// ones; v1a and L8 with the identity, when there is one.
type Signer struct {
	id      *l8.Identity
	secrets []l8.Secret // the global ones
	tenants func(tenant string) []l8.Secret
	trust   *trustManager // nil without an identity
	clock   ports.Clock
	nonces  *l8.Nonces // challenge nonces answered recently
}

// NewSigner returns the signer for cfg. secrets are the global v1 secrets;
// tenantSecrets returns a tenant's own (none: the global ones apply).
func NewSigner(cfg Config, secrets []l8.Secret, tenantSecrets func(string) []l8.Secret, doer ports.Doer,
	clock ports.Clock, log *zap.Logger) *Signer {
	s := &Signer{id: cfg.Identity, secrets: secrets, tenants: tenantSecrets, clock: clock,
		nonces: l8.NewNonces(maxChallengeNonces)}
	if cfg.Identity != nil {
		s.trust = newTrustManager(cfg, doer, clock, log)
	}
	return s
}

// SignDelivery adds the signatures to a webhook delivery: Standard Webhooks
// (webhook-id is the job id, stable across retries) with the job's
// tenant's secrets or else the global ones, and, with an identity, v1a and
// L8 when the receiver is trusted (a new delivery id per attempt).
func (s *Signer) SignDelivery(ctx context.Context, req *http.Request, j *domain.Job, body []byte) {
	secrets := s.secrets
	if own := s.tenants(domain.TenantOfJob(j)); len(own) > 0 {
		secrets = own
	}
	s.sign(ctx, req, "msg_"+string(j.ID), j.WebhookURL, body, secrets)
}

// Sign adds the signatures of a request that belongs to no tenant (a drain
// page): Standard Webhooks with the global secrets, v1a and L8 as for
// deliveries.
func (s *Signer) Sign(ctx context.Context, req *http.Request, msgID, target string, body []byte) {
	s.sign(ctx, req, msgID, target, body, s.secrets)
}

// sign sets the Standard Webhooks headers (webhook-id msgID): a v1
// signature per secret and, with an identity, v1a; then the L8 headers if
// the receiver at target is trusted. With neither secrets nor identity the
// request goes unsigned.
func (s *Signer) sign(ctx context.Context, req *http.Request, msgID, target string, body []byte, secrets []l8.Secret) {
	now := s.clock.Now()
	if !l8.SignStandardHeaders(req.Header, msgID, body, now, secrets, s.id) || s.trust == nil {
		return
	}
	if s.trust.trusted(ctx, target) {
		s.id.SignL8(req.Header, body, now)
	}
}

// Metadata is the discovery document for /.well-known/l8 (nil without an
// identity).
func (s *Signer) Metadata() *l8.Metadata {
	if s.id == nil {
		return nil
	}
	m := s.id.Metadata()
	return &m
}

// Answer answers another party's challenge (BEHAVIOR.md §23.4).
// Rejections are domain.CodeInvalid errors with the protocol's messages.
func (s *Signer) Answer(c *l8.ChallengeRequest) (*l8.ChallengeResponse, error) {
	if s.id == nil {
		return nil, &domain.Error{Code: domain.CodeNotFound, Message: "L8 is not enabled"}
	}
	resp, err := s.id.Answer(c, s.clock.Now(), s.nonces)
	var ce *l8.ChallengeError
	if errors.As(err, &ce) {
		return nil, domain.Invalid("", "%s", ce.Message)
	}
	return resp, err
}

// SweepNonces forgets challenge nonces that can no longer be replayed.
func (s *Signer) SweepNonces() { s.nonces.Sweep(s.clock.Now()) }

// Identity is Aquifer's key pair (nil: no L8).
func (s *Signer) Identity() *l8.Identity { return s.id }

// maxChallengeNonces bounds the nonces remembered for /l8/challenge; when it
// is full of live nonces new challenges are refused until some expire.
const maxChallengeNonces = 100_000
