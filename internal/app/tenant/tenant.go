// Package tenant holds the API-key tenants as the core sees them: who the
// caller is (from the request context), what it may see (its own jobs and
// pools, scoped by its name), where its jobs may go, its quota of unfinished
// jobs and its own pace caps per destination.
package tenant

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Tenant is an API-key tenant: the one type aquiferd's YAML tenants: list
// is read into, the facade's Options.Tenants hold and the core runs with.
// Check says what is wrong with a list of them. Authentication is the
// inbound adapters' job: they put the tenant's name in the request context
// with With.
type Tenant struct {
	// Name identifies the tenant: 1–64 letters, digits, '.', '_' or '-',
	// starting with a letter or digit; unique. It scopes the tenant's jobs
	// and pools in the shared store (domain.Scope).
	Name string
	// KeySHA256 is the hex SHA-256 of the tenant's API key, which callers
	// send as "Authorization: Bearer <key>" to the built-in HTTP front
	// doors (the key itself is never stored). Unique when set; a front
	// door of an embedding program may authenticate tenants its own way.
	// The core does not read it.
	KeySHA256 string
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
	// Webhooks v1) instead of the global ones; none: the global ones.
	// Each is checked where it is given (Secret.Check); Check does not.
	WebhookSecrets []l8.Secret
	// Role is RoleAdmin for an operator's key, which sees and acts on
	// every tenant's jobs and may pause lanes; "" for a tenant that sees
	// only its own jobs. An admin's own submissions are scoped to its name
	// like any tenant's.
	Role string
}

// RoleAdmin is the Role of an operator's key.
const RoleAdmin = "admin"

// Problem is one thing wrong with one tenant of a list: the tenant's index,
// the field (its Go name: "Name", "KeySHA256", "MaxQueued", "Rates",
// "Destinations") and the reason, worded to follow the field ("Name is
// required …"). Whoever reports it adds where the list came from.
type Problem struct {
	Index  int
	Field  string
	Reason string
}

// name is the form of Tenant.Name.
var name = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Check is the one check of a tenant list: names well formed and unique,
// key hashes well formed and unique, quotas not negative, pace caps and
// destination rules valid. It reports every problem, in order.
func Check(ts []Tenant) []Problem {
	var out []Problem
	names, keys := map[string]bool{}, map[string]string{}
	for i, t := range ts {
		add := func(field, format string, args ...any) {
			out = append(out, Problem{Index: i, Field: field, Reason: fmt.Sprintf(format, args...)})
		}
		switch {
		case t.Name == "":
			add("Name", "is required: 1–64 letters, digits, '.', '_' or '-'")
		case !name.MatchString(t.Name):
			add("Name", "must be 1–64 letters, digits, '.', '_' or '-', starting with a letter or digit")
		case names[t.Name]:
			add("Name", "must be unique: duplicate name %q (tenant %q is listed twice)", t.Name, t.Name)
		}
		names[t.Name] = true
		if t.KeySHA256 != "" {
			hash := strings.ToLower(t.KeySHA256)
			if b, err := hex.DecodeString(hash); err != nil || len(b) != sha256.Size {
				add("KeySHA256", "must be the SHA-256 of the tenant's API key, in 64 hex digits")
			} else if other, dup := keys[hash]; dup {
				add("KeySHA256", "must be unique: the same key as tenant %q", other)
			} else {
				keys[hash] = t.Name
			}
		}
		if t.MaxQueued < 0 {
			add("MaxQueued", "must be 0 (no cap) or more")
		}
		if err := (domain.RateTable{Hosts: t.Rates}).Validate(); err != nil {
			add("Rates", "are invalid: %v", err)
		}
		if err := t.Destinations.Validate(); err != nil {
			add("Destinations", "are invalid: %v", err)
		}
		if t.Role != "" && t.Role != RoleAdmin {
			add("Role", "must be %q or empty (a tenant that sees only its own jobs), not %q", RoleAdmin, t.Role)
		}
	}
	return out
}

type contextKey struct{}

type adminKey struct{}

// With returns ctx carrying the authenticated tenant's name.
func With(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, contextKey{}, name)
}

// WithAdmin returns ctx carrying an authenticated admin (Role RoleAdmin)
// named name: it submits as that tenant, and sees and acts on every
// tenant's jobs.
func WithAdmin(ctx context.Context, name string) context.Context {
	return context.WithValue(With(ctx, name), adminKey{}, true)
}

// From returns the tenant in ctx ("" when none: open mode, or an
// operator's own channel such as MCP over stdio).
func From(ctx context.Context) string {
	t, _ := ctx.Value(contextKey{}).(string)
	return t
}

// Operator reports whether the caller in ctx may see and act on every
// tenant's jobs and pause lanes: an admin, or a caller with no tenant (open
// mode, or an operator's own channel).
func Operator(ctx context.Context) bool {
	admin, _ := ctx.Value(adminKey{}).(bool)
	return admin || From(ctx) == ""
}

// Scoped returns the tenant whose jobs alone the caller in ctx sees: its
// own, or "" for an operator (every tenant's).
func Scoped(ctx context.Context) string {
	if Operator(ctx) {
		return ""
	}
	return From(ctx)
}

// Registry holds the configured tenants and their quota counts. A nil
// *Registry is open mode: no tenants, no caps, the global rules.
type Registry struct {
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

// New returns the registry of tenants ts, each combining the global
// destination rules with its own; nil when there are none (open mode).
func New(ts []Tenant, global domain.DestinationRules, store ports.JobStore, clock ports.Clock) (*Registry, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	t := &Registry{byName: map[string]Tenant{}, policies: map[string]*domain.DestinationPolicy{}, store: store, clock: clock,
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

// Policy returns the destination policy of a tenant's jobs (nil: the
// global one).
func (t *Registry) Policy(name string) *domain.DestinationPolicy {
	if t == nil {
		return nil
	}
	return t.policies[name]
}

// Admit checks the tenant's quota before a new job is stored.
func (t *Registry) Admit(ctx context.Context, name string) error {
	if t == nil {
		return nil
	}
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

func (t *Registry) unfinished(ctx context.Context, name string) (int64, error) {
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
		return 0, domain.StoreFailure("count the tenant's jobs", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c.stored, c.added, c.refreshed = n, 0, now
	return n, nil
}

// Accepted and Finished keep the count between store refreshes (and
// entirely, for a store that cannot count).
func (t *Registry) Accepted(name string) { t.add(name, 1) }

// Finished: see Accepted.
func (t *Registry) Finished(name string) { t.add(name, -1) }

func (t *Registry) add(name string, d int64) {
	if t == nil {
		return
	}
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

// Rate returns the tenant's own cap for upstream u, if it has one.
func (t *Registry) Rate(name string, u domain.UpstreamKey) (domain.Rate, bool) {
	if t == nil || name == "" {
		return domain.Rate{}, false
	}
	tn, ok := t.byName[name]
	if !ok || len(tn.Rates) == 0 {
		return domain.Rate{}, false
	}
	return domain.RateTable{Hosts: tn.Rates}.Lookup(u)
}

// WebhookSecrets are the tenant's own webhook signing secrets (none: the
// global ones apply).
func (t *Registry) WebhookSecrets(name string) []l8.Secret {
	if t == nil || name == "" {
		return nil
	}
	return t.byName[name].WebhookSecrets
}

// ScopeRequest puts a tenant's request in its namespace: user_id and
// pool_id are scoped by the tenant's name (see domain.Scope).
func ScopeRequest(tenant string, req *domain.JobRequest) {
	if tenant == "" {
		return
	}
	req.UserID = domain.Scope(tenant, req.UserID)
	if req.PoolID != "" {
		req.PoolID = domain.Scope(tenant, req.PoolID)
	}
}

// Visible reports whether the caller in ctx may see j: a tenant sees only
// its own jobs (others are "not found", not "forbidden", so ids cannot be
// probed).
func Visible(ctx context.Context, j *domain.Job) bool {
	t := Scoped(ctx)
	return t == "" || domain.TenantOfJob(j) == t
}

// Queue is the queue of a tenant's jobs to u when the tenant has its own
// cap there: its own queue, paced by the cap inside the lane.
func Queue(u domain.UpstreamKey, tenant string) domain.QueueKey {
	return domain.TenantQueue(u, "@"+tenant)
}

// QueueCap returns the pace cap of a queue that is a capped tenant's queue
// (see Queue).
func (t *Registry) QueueCap(key domain.QueueKey) (domain.Rate, bool) {
	if t == nil {
		return domain.Rate{}, false
	}
	_, part, ok := strings.Cut(string(key), "|@")
	if !ok {
		return domain.Rate{}, false
	}
	return t.Rate(part, key.Upstream())
}

// ScopePool returns a pool id in the caller's namespace.
func ScopePool(ctx context.Context, poolID string) string {
	return domain.Scope(From(ctx), poolID)
}
