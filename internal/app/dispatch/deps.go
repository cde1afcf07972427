package dispatch

import (
	"context"
	"net/http"
	"time"

	"github.com/aquiferhq/aquifer/internal/app/load"
	"github.com/aquiferhq/aquifer/internal/app/pool"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// Deps is what the dispatcher needs from the rest of the core. Each is a
// small interface declared here, by its consumer; a nil field gets a null
// object.
type Deps struct {
	// Owner says which lanes this process dispatches. Nil: all of them
	// (the only process on its store). With an Owner (cluster mode), lanes
	// start inactive until SetActive turns them on.
	Owner Ownership
	// Events hears about every job transition (subscribers, other
	// processes).
	Events Publisher
	// Pools picks pool members and learns how their attempts went.
	Pools Pools
	// Tenants gives tenants' destination rules and pace caps.
	Tenants Tenants
	// Signer signs webhook deliveries.
	Signer Signer
	// Load is the backlog the load headers report.
	Load LoadSource
}

// Ownership tells the dispatcher which lanes are its to dispatch when
// several processes share the store (package lease).
type Ownership interface {
	// Holds reports whether this process dispatches upstream u's lane.
	Holds(u domain.UpstreamKey) bool
	// Fresh reports whether this process's leases are certainly still valid
	// at now; when not, no lane starts an attempt, and retryIn says when to
	// look again.
	Fresh(now time.Time) (ok bool, retryIn time.Duration)
	// HeldElsewhere names the live process holding u's lane, "" when it is
	// this one or nobody.
	HeldElsewhere(u domain.UpstreamKey) string
	// WorkElsewhere tells the holder of j's lane (another process, or
	// nobody yet) about work it may not have seen.
	WorkElsewhere(j *domain.Job)
}

// SingleProcess is the Ownership of a process alone on its store: every
// lane is its own.
type SingleProcess struct{}

func (SingleProcess) Holds(domain.UpstreamKey) bool           { return true }
func (SingleProcess) Fresh(time.Time) (bool, time.Duration)   { return true, 0 }
func (SingleProcess) HeldElsewhere(domain.UpstreamKey) string { return "" }
func (SingleProcess) WorkElsewhere(*domain.Job)               {}

var _ Ownership = SingleProcess{}

// Publisher hears about job transitions. Publish must not block.
type Publisher interface {
	Publish(ev domain.Event)
}

// Pools is the pool registry as lanes use it (pool.Registry).
type Pools interface {
	// Capacity is a pool's live ceiling and how many members it has.
	Capacity(poolID string) (rps float64, maxConcurrent, members int)
	// Pick chooses the member for the next job, avoiding one if it can.
	Pick(poolID, avoid string) (id, address string, rate float64, wait time.Duration, ok bool)
	// Unpick undoes a pick whose job did not start.
	Unpick(poolID, memberID string)
	// Record releases a member's slot with what its attempt found out.
	Record(poolID, memberID string, o pool.Outcome)
	// BudgetReason says which members' rate-limit budgets hold their share
	// of the pool below their pace ("" when none does): the lane's mode.
	BudgetReason(poolID string) string
}

// Tenants is what dispatch needs to know about API-key tenants
// (tenant.Registry).
type Tenants interface {
	// Policy is the destination policy of a tenant's jobs (nil: the global
	// one, which the Doer applies by default).
	Policy(tenant string) *domain.DestinationPolicy
	// QueueCap is the pace cap of a capped tenant's queue.
	QueueCap(q domain.QueueKey) (domain.Rate, bool)
	// Finished counts a tenant's job reaching its end (for its quota).
	Finished(tenant string)
}

// Signer signs a webhook delivery (trust.Signer).
type Signer interface {
	SignDelivery(ctx context.Context, req *http.Request, j *domain.Job, body []byte)
}

// LoadSource is the backlog reported in every outbound request's load
// headers (load.Gauge).
type LoadSource interface {
	Snapshot() *load.Snapshot
}

type noEvents struct{}

func (noEvents) Publish(domain.Event) {}

type noPools struct{}

func (noPools) Capacity(string) (float64, int, int) { return 0, 0, 0 }
func (noPools) Pick(string, string) (string, string, float64, time.Duration, bool) {
	return "", "", 0, 0, false
}
func (noPools) Unpick(string, string)               {}
func (noPools) Record(string, string, pool.Outcome) {}
func (noPools) BudgetReason(string) string          { return "" }

type noTenants struct{}

func (noTenants) Policy(string) *domain.DestinationPolicy      { return nil }
func (noTenants) QueueCap(domain.QueueKey) (domain.Rate, bool) { return domain.Rate{}, false }
func (noTenants) Finished(string)                              {}

type noSigner struct{}

func (noSigner) SignDelivery(context.Context, *http.Request, *domain.Job, []byte) {}

type noLoad struct{}

var zeroLoad = &load.Snapshot{TotalText: []string{"0"}, DepthText: []string{"0"}}

func (noLoad) Snapshot() *load.Snapshot { return zeroLoad }
