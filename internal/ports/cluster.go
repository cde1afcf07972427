package ports

import (
	"context"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Several aquiferd processes that share one store (Postgres) coordinate
// through the store itself — no other coordination service — in three
// roles: lane leases (LeaseStore), messages between them (MessageBus) and
// shared pool membership (MemberStore). A Cluster names the three; a
// service built without one runs as the only process of its store.
//
// The unit of coordination is the dispatcher's lane: one upstream (a URL's
// scheme://host:port, a pool, a webhook receiver) with all its queues (the
// shared one and the tenants'). Exactly one process at a time holds a lane's
// lease and dispatches its work, so the upstream's pace is global.

// Cluster is the set of roles a shared store plays for the processes on it.
type Cluster struct {
	Leases  LeaseStore
	Bus     MessageBus
	Members MemberStore
}

// Complete reports whether every role is filled.
func (c Cluster) Complete() bool { return c.Leases != nil && c.Bus != nil && c.Members != nil }

// SharedStore is a store that plays all three roles itself (the Postgres
// store does).
type SharedStore interface {
	LeaseStore
	MessageBus
	MemberStore
}

// ClusterOf returns the three roles of a store that plays them all.
func ClusterOf(s SharedStore) Cluster { return Cluster{Leases: s, Bus: s, Members: s} }

// LeaseStore holds lane leases and the liveness of the processes that
// share the store.
type LeaseStore interface {
	// InstanceID is this process's name among the processes sharing the store.
	InstanceID() string

	// SyncLeases renews the leases in p.Held (saving the pacing state they
	// carry) and takes free or expired leases among p.Want until this
	// process holds p.Max lanes in total (0: no limit). A lease lasts p.TTL
	// on the database's clock. It returns every lease held after the call;
	// for a lease taken now, State is what its previous holder saved last.
	// A lease in p.Held that another process took meanwhile (this process
	// failed to renew in time) is not returned: the caller must stop
	// dispatching that lane at once.
	SyncLeases(ctx context.Context, p *SyncLeasesParams) ([]LaneLease, error)

	// ReleaseLeases gives lanes up (shutdown, rebalancing), saving their
	// state, so another process can take them at once.
	ReleaseLeases(ctx context.Context, leases []LaneLease) error

	// Instances lists the live processes (this one included) and the lanes
	// each one holds.
	Instances(ctx context.Context) ([]Instance, error)

	// RecoverLane puts back to queued the jobs of upstream (any of its store
	// lanes) that were left in_flight by processes that are no longer alive.
	// The app calls it when it takes a lane over.
	RecoverLane(ctx context.Context, upstream domain.UpstreamKey) (int, error)
}

// MessageBus carries messages between the processes sharing the store.
type MessageBus interface {
	// Broadcast queues a message for the other processes. It never blocks:
	// messages are batched and sent shortly after (best effort; a process
	// that misses one still finds new work by its periodic lease sync, and
	// readers of a job can always load it from the store).
	Broadcast(m ClusterMessage)

	// Listen delivers the messages other processes broadcast, until ctx
	// ends, reconnecting after errors. It blocks.
	Listen(ctx context.Context, deliver func(ClusterMessage)) error
}

// MemberStore keeps pool membership where every process sharing the store
// sees it.
type MemberStore interface {
	// PutMember registers a pool member or records its heartbeat: address,
	// capacity and interval are overwritten and LastSeen is set to the
	// database's now; reputation and counters are kept. It reports whether
	// the member is new.
	PutMember(ctx context.Context, m *PoolMember) (created bool, err error)

	// DeleteMember removes a member (leave or eviction). It reports whether
	// it was there.
	DeleteMember(ctx context.Context, poolID, memberID string) (bool, error)

	// Members returns the members of poolID, or of every pool when poolID
	// is "".
	Members(ctx context.Context, poolID string) ([]PoolMember, error)

	// SaveMemberStates writes the state the pool lane's holder keeps
	// (reputation, probation, counters, pace) for members that still exist.
	SaveMemberStates(ctx context.Context, ms []PoolMember) error
}

// SyncLeasesParams are the arguments of LeaseStore.SyncLeases.
type SyncLeasesParams struct {
	Want []domain.UpstreamKey // lanes with work this process would dispatch
	Held []LaneLease          // lanes this process holds, with their current state
	Max  int                  // hold at most this many lanes (fair share); 0 = no limit
	TTL  time.Duration
}

// LaneLease is a lane this process holds.
type LaneLease struct {
	Upstream domain.UpstreamKey
	State    LaneState
}

// LaneState is what a lane's holder learned, kept with its lease so the next
// holder continues from it instead of resetting to the configured ceiling.
type LaneState struct {
	Saved         bool // false: nothing was ever saved for this lane
	RPS           float64
	MaxConcurrent int
	AccountQueues bool
}

// Instance is a live process sharing the store.
type Instance struct {
	ID    string
	Lanes []domain.UpstreamKey
}

// ClusterMessage carries what other processes need to hear about.
type ClusterMessage struct {
	// From is the sending instance (set by the MessageBus).
	From string
	// Events are job events; Result is left out (readers load the job).
	Events []domain.Event
	// Work tells the holders of store lanes about ready work they may not
	// have seen (an insert, a delivery due) — with its ReadySeq, because
	// across processes ReadySeq order is not commit order: the holder must
	// re-read its queue from there, not only after its cursor.
	Work []WorkNotice
	// Pools names pools whose membership changed.
	Pools []string
	// Pauses says an operator paused or resumed a lane: every instance
	// reloads the pauses from the store (OperatorStore.LanePauses).
	Pauses bool
}

// WorkNotice is ready work in a store lane.
type WorkNotice struct {
	Queue    domain.QueueKey
	ReadySeq int64
}

// PoolMember is a pool member as the shared store keeps it.
type PoolMember struct {
	PoolID            string
	MemberID          string
	Address           string
	CapacityRPS       float64
	HeartbeatInterval time.Duration
	LastSeen          time.Time // database time of the last registration or heartbeat

	// Kept by the pool lane's holder (SaveMemberStates).
	Reputation   float64 // 0 when never saved (a new member: 1)
	Probation    float64
	EffectiveRPS float64
	InFlight     int
	Paused       bool
	Picks        int64
	Successes    int64
	Failures     int64
}
