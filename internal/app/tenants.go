package app

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/internal/pacing"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Tenant is an API-key tenant as the core sees it (authentication is the
// inbound adapters' job: they put the tenant's name in the request context
// with WithTenant).
type Tenant struct {
	Name string
	// MaxQueued caps the tenant's unfinished jobs (queued or in flight);
	// 0 means no cap.
	MaxQueued int64
	// Rates caps the tenant's own pace per destination, inside the
	// destination's shared budget. Keys as in RateTable.Hosts.
	Rates map[string]domain.Rate
	// Destinations narrows where the tenant's jobs may go, on top of the
	// global rules.
	Destinations domain.DestinationRules
	// WebhookSecrets sign the tenant's webhook deliveries (Standard
	// Webhooks v1) instead of Config.WebhookSecrets; none: the global ones.
	WebhookSecrets []l8.Secret
}

type tenantKey struct{}

// WithTenant returns ctx carrying the authenticated tenant's name.
func WithTenant(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, tenantKey{}, name)
}

// TenantFrom returns the tenant in ctx ("" when none: open mode, or an
// operator's own channel such as MCP over stdio).
func TenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// tenancy holds the configured tenants and their quota counts.
type tenancy struct {
	byName   map[string]Tenant
	policies map[string]*domain.DestinationPolicy // global rules combined with each tenant's
	store    ports.JobStore
	clock    ports.Clock

	mu     sync.Mutex
	counts map[string]*quotaCount
}

// quotaCount is a tenant's unfinished jobs: counted by the store when it can
// (refreshed at most every second, plus what this process accepted since),
// otherwise kept by this process.
type quotaCount struct {
	stored    int64
	added     int64
	refreshed time.Time
}

func newTenancy(ts []Tenant, global domain.DestinationRules, store ports.JobStore, clock ports.Clock) (*tenancy, error) {
	t := &tenancy{byName: map[string]Tenant{}, policies: map[string]*domain.DestinationPolicy{}, store: store, clock: clock,
		counts: map[string]*quotaCount{}}
	for _, x := range ts {
		t.byName[x.Name] = x
		p, err := domain.NewDestinationPolicy(global, x.Destinations)
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", x.Name, err)
		}
		t.policies[x.Name] = p
	}
	return t, nil
}

// policy returns the destination policy of a tenant's jobs (nil: the
// global one).
func (t *tenancy) policy(name string) *domain.DestinationPolicy {
	if t == nil {
		return nil
	}
	return t.policies[name]
}

// enabled reports whether any tenant is configured.
func (t *tenancy) enabled() bool { return len(t.byName) > 0 }

// admit checks the tenant's quota before a new job is stored.
func (t *tenancy) admit(ctx context.Context, name string) error {
	tn, ok := t.byName[name]
	if !ok || tn.MaxQueued <= 0 {
		return nil
	}
	n, err := t.unfinished(ctx, name)
	if err != nil {
		return err
	}
	if n >= tn.MaxQueued {
		return &domain.RejectedError{Limit: "tenant_quota", Max: tn.MaxQueued, Current: n, RetryAfter: 5 * time.Second}
	}
	return nil
}

func (t *tenancy) unfinished(ctx context.Context, name string) (int64, error) {
	now := t.clock.Now()
	t.mu.Lock()
	c := t.counts[name]
	if c == nil {
		c = &quotaCount{}
		t.counts[name] = c
	}
	counter, ok := t.store.(ports.TenantCounter)
	fresh := !ok || (!c.refreshed.IsZero() && now.Sub(c.refreshed) < time.Second)
	if fresh {
		n := c.stored + c.added
		t.mu.Unlock()
		return n, nil
	}
	t.mu.Unlock()
	n, err := counter.CountUnfinished(ctx, domain.Scope(name, ""))
	if err != nil {
		return 0, storeErr("count the tenant's jobs", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c.stored, c.added, c.refreshed = n, 0, now
	return n, nil
}

// accepted and finished keep the count between store refreshes (and
// entirely, for a store that cannot count).
func (t *tenancy) accepted(name string) { t.add(name, 1) }
func (t *tenancy) finished(name string) { t.add(name, -1) }

func (t *tenancy) add(name string, d int64) {
	tn, ok := t.byName[name]
	if !ok || tn.MaxQueued <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.counts[name]
	if c == nil {
		c = &quotaCount{}
		t.counts[name] = c
	}
	c.added += d
	if c.stored+c.added < 0 {
		c.added = -c.stored
	}
}

// rateFor is rate on a possibly nil tenancy.
func (t *tenancy) rateFor(name string, u domain.UpstreamKey) (domain.Rate, bool) {
	if t == nil || name == "" {
		return domain.Rate{}, false
	}
	return t.rate(name, u)
}

// rate returns the tenant's own cap for upstream u, if it has one.
func (t *tenancy) rate(name string, u domain.UpstreamKey) (domain.Rate, bool) {
	tn, ok := t.byName[name]
	if !ok || len(tn.Rates) == 0 {
		return domain.Rate{}, false
	}
	r, ok := RateTable{Hosts: tn.Rates}.lookup(u)
	return r, ok
}

// scopeRequest puts a tenant's request in its namespace: user_id and
// pool_id are scoped by the tenant's name (see domain.Scope).
func scopeRequest(tenant string, req *domain.JobRequest) {
	if tenant == "" {
		return
	}
	req.UserID = domain.Scope(tenant, req.UserID)
	if req.PoolID != "" {
		req.PoolID = domain.Scope(tenant, req.PoolID)
	}
}

// visible reports whether the caller in ctx may see j: a tenant sees only
// its own jobs (others are "not found", not "forbidden", so ids cannot be
// probed).
func visible(ctx context.Context, j *domain.Job) bool {
	t := TenantFrom(ctx)
	return t == "" || domain.TenantOfJob(j) == t
}

// tenantQueue is the store lane of a tenant's jobs to u when the tenant has
// its own cap there: its own queue, paced by the cap inside the lane.
func tenantQueue(u domain.UpstreamKey, tenant string) domain.QueueKey {
	return domain.TenantQueue(u, "@"+tenant)
}

// queueCap returns the pace cap of a store lane that is a capped tenant's
// queue.
func (d *dispatcher) queueCap(key domain.QueueKey) (domain.Rate, bool) {
	if d.tenants == nil {
		return domain.Rate{}, false
	}
	_, part, ok := strings.Cut(string(key), "|@")
	if !ok {
		return domain.Rate{}, false
	}
	return d.tenants.rate(part, key.Upstream())
}

// newQueueLimiter builds a capped tenant queue's limiter.
func newQueueLimiter(r domain.Rate) *pacing.Limiter { return pacing.NewLimiter(r.RPS) }

// scopePool returns a pool id in the caller's namespace, validating the
// name the caller gave.
func scopePool(ctx context.Context, poolID string) string {
	return domain.Scope(TenantFrom(ctx), poolID)
}

// poolsFor returns the pools the caller in ctx may see, under the names it
// knows them by.
func poolsFor(ctx context.Context, all map[string]PoolHealth) map[string]PoolHealth {
	t := TenantFrom(ctx)
	out := make(map[string]PoolHealth, len(all))
	for id, p := range all {
		owner, name := domain.Unscope(id)
		if t == "" || owner == t {
			if t == "" && owner != "" {
				name = owner + "/" + name // the operator sees whose pool it is
			}
			out[name] = p
		}
	}
	return out
}
