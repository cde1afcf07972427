package app

import (
	"context"

	"github.com/aquiferhq/aquifer/internal/app/admit"
	"github.com/aquiferhq/aquifer/internal/app/dispatch"
	"github.com/aquiferhq/aquifer/internal/app/drain"
	"github.com/aquiferhq/aquifer/internal/app/edge"
	"github.com/aquiferhq/aquifer/internal/app/events"
	"github.com/aquiferhq/aquifer/internal/app/lease"
	"github.com/aquiferhq/aquifer/internal/app/load"
	"github.com/aquiferhq/aquifer/internal/app/pool"
	"github.com/aquiferhq/aquifer/internal/app/tenant"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// The packages' types under the names the adapters use: the façade is the
// one import an inbound adapter needs.
type (
	Tenant          = tenant.Tenant
	Subscription    = events.Subscription
	Load            = load.Load
	WebhookPayload  = dispatch.WebhookPayload
	LaneStats       = dispatch.LaneStats
	QueueDetail     = dispatch.QueueDetail
	QueueBudget     = dispatch.QueueBudget
	CircuitStats    = dispatch.CircuitStats
	AdmissionHealth = admit.Health
	PoolHealth      = pool.Health
	MemberHealth    = pool.MemberHealth
	ProxyResult     = edge.Result
	DirectResponse  = edge.DirectResponse
	ProxyHealth     = edge.Health
	DrainHealth     = drain.Health
	DrainPayload    = drain.Payload
	ClusterHealth   = lease.Health
	InstanceLanes   = lease.InstanceLanes
)

// Proxy fallback reasons (BEHAVIOR.md §20.2) and drain states.
const (
	FallbackOverloaded  = edge.FallbackOverloaded
	FallbackUnreachable = edge.FallbackUnreachable
	FallbackDegraded    = edge.FallbackDegraded
	FallbackPoolRouted  = edge.FallbackPoolRouted

	DrainActive     = drain.Active
	DrainDraining   = drain.Draining
	DrainUnassigned = drain.Unassigned
)

// LaneModes lists the lane modes (LaneView.Mode, LaneHealth.Mode): budget,
// signalled, adaptive, static.
var LaneModes = dispatch.Modes

// WithTenant returns ctx carrying the authenticated tenant's name.
func WithTenant(ctx context.Context, name string) context.Context { return tenant.With(ctx, name) }

// WithAdmin returns ctx carrying an authenticated admin key's tenant: it
// sees and acts on every tenant's jobs and may pause lanes.
func WithAdmin(ctx context.Context, name string) context.Context { return tenant.WithAdmin(ctx, name) }

// RoleAdmin is the Tenant.Role of an operator's key.
const RoleAdmin = tenant.RoleAdmin

// TenantFrom returns the tenant in ctx ("" when none).
func TenantFrom(ctx context.Context) string { return tenant.From(ctx) }

// NewWebhookPayload describes a finished job as its webhook carries it.
func NewWebhookPayload(id domain.JobID, status domain.Status, res *domain.Result) WebhookPayload {
	return dispatch.NewWebhookPayload(id, status, res)
}

// EncodeBody returns b as a JSON-safe string: verbatim when it is UTF-8,
// otherwise base64 with the encoding name "base64".
func EncodeBody(b []byte) (text, encoding string) { return dispatch.EncodeBody(b) }

// IdempotentKeyHash is the drain ledger's hash of a key.
func IdempotentKeyHash(userID, key string) string { return drain.IdempotentKeyHash(userID, key) }

// poolsFor returns the pools the caller in ctx may see, under the names it
// knows them by.
func poolsFor(ctx context.Context, all map[string]PoolHealth) map[string]PoolHealth {
	t := tenant.From(ctx)
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
