package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// hub is an in-memory stand-in for a shared Postgres: one job store, lane
// leases, a message bus and pool membership shared by several nodes. It
// lets the app's multi-instance logic be tested without a database; the
// Postgres implementation has its own tests of the same contract.
type hub struct {
	store *memory.Store
	now   func() time.Time // the test's clock

	mu      sync.Mutex
	leases  map[domain.UpstreamKey]*hubLease
	dead    map[string]bool
	subs    map[string]chan ports.ClusterMessage
	members map[string]ports.PoolMember // "pool/member"
}

type hubLease struct {
	owner string
	until time.Time
	state ports.LaneState
}

func newHub(t *testing.T) *hub {
	return &hub{store: newStore(t), now: clockOf(t).now, leases: map[domain.UpstreamKey]*hubLease{}, dead: map[string]bool{},
		subs: map[string]chan ports.ClusterMessage{}, members: map[string]ports.PoolMember{}}
}

// node is one process's view: the shared store plus the Cluster port.
type node struct {
	*memory.Store
	h  *hub
	id string
}

var _ ports.SharedStore = (*node)(nil)

// Close does not close the shared store.
func (n *node) Close() error { return nil }

func (n *node) InstanceID() string { return n.id }

func (n *node) alive() error {
	n.h.mu.Lock()
	defer n.h.mu.Unlock()
	if n.h.dead[n.id] {
		return errors.New("node is dead")
	}
	return nil
}

func (n *node) SyncLeases(_ context.Context, p *ports.SyncLeasesParams) ([]ports.LaneLease, error) {
	if err := n.alive(); err != nil {
		return nil, err
	}
	h := n.h
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	for _, l := range p.Held {
		if le := h.leases[l.Upstream]; le != nil && le.owner == n.id {
			le.until, le.state = now.Add(p.TTL), l.State
		}
	}
	count := func() int {
		c := 0
		for _, le := range h.leases {
			if le.owner == n.id && now.Before(le.until) {
				c++
			}
		}
		return c
	}
	for _, u := range p.Want {
		if p.Max > 0 && count() >= p.Max {
			break
		}
		le := h.leases[u]
		switch {
		case le == nil:
			h.leases[u] = &hubLease{owner: n.id, until: now.Add(p.TTL)}
		case le.owner != n.id && !now.Before(le.until):
			le.owner, le.until = n.id, now.Add(p.TTL)
		}
	}
	var out []ports.LaneLease
	for u, le := range h.leases {
		if le.owner == n.id && now.Before(le.until) {
			out = append(out, ports.LaneLease{Upstream: u, State: le.state})
		}
	}
	return out, nil
}

func (n *node) ReleaseLeases(_ context.Context, ls []ports.LaneLease) error {
	if err := n.alive(); err != nil {
		return err
	}
	n.h.mu.Lock()
	defer n.h.mu.Unlock()
	for _, l := range ls {
		if le := n.h.leases[l.Upstream]; le != nil && le.owner == n.id {
			le.until, le.state = time.Time{}, l.State
		}
	}
	return nil
}

func (n *node) Instances(context.Context) ([]ports.Instance, error) {
	if err := n.alive(); err != nil {
		return nil, err
	}
	h := n.h
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	var out []ports.Instance
	for id := range h.subs {
		if h.dead[id] {
			continue
		}
		in := ports.Instance{ID: id}
		for u, le := range h.leases {
			if le.owner == id && now.Before(le.until) {
				in.Lanes = append(in.Lanes, u)
			}
		}
		out = append(out, in)
	}
	return out, nil
}

// RecoverLane resets in-flight jobs of u when some node is dead (this fake
// does not track which node marked a job; tests kill at most one).
func (n *node) RecoverLane(ctx context.Context, u domain.UpstreamKey) (int, error) {
	n.h.mu.Lock()
	anyDead := len(n.h.dead) > 0
	n.h.mu.Unlock()
	if !anyDead {
		return 0, nil
	}
	jobs, err := n.Store.ResetStale(ctx, &ports.ResetStaleParams{DispatchedBefore: n.h.now().Add(time.Hour), Now: n.h.now(),
		Exclude: map[domain.JobID]bool{}})
	c := 0
	for _, j := range jobs {
		if j.Queue.Upstream() == u {
			c++
		}
	}
	return c, err
}

func (n *node) Broadcast(m ports.ClusterMessage) {
	h := n.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dead[n.id] {
		return
	}
	m.From = n.id
	for i := range m.Events {
		m.Events[i].Result = nil
	}
	for id, c := range h.subs {
		if id == n.id || h.dead[id] {
			continue
		}
		select {
		case c <- m:
		default:
		}
	}
}

func (n *node) Listen(ctx context.Context, deliver func(ports.ClusterMessage)) error {
	n.h.mu.Lock()
	c := n.h.subs[n.id]
	n.h.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-c:
			deliver(m)
		}
	}
}

func (n *node) PutMember(_ context.Context, m *ports.PoolMember) (bool, error) {
	n.h.mu.Lock()
	defer n.h.mu.Unlock()
	k := m.PoolID + "/" + m.MemberID
	old, ok := n.h.members[k]
	row := *m
	row.LastSeen = n.h.now()
	if ok {
		row.Reputation, row.Probation, row.Picks, row.Successes, row.Failures = old.Reputation, old.Probation, old.Picks, old.Successes, old.Failures
	}
	n.h.members[k] = row
	return !ok, nil
}

func (n *node) DeleteMember(_ context.Context, pool, member string) (bool, error) {
	n.h.mu.Lock()
	defer n.h.mu.Unlock()
	_, ok := n.h.members[pool+"/"+member]
	delete(n.h.members, pool+"/"+member)
	return ok, nil
}

func (n *node) Members(_ context.Context, pool string) ([]ports.PoolMember, error) {
	n.h.mu.Lock()
	defer n.h.mu.Unlock()
	var out []ports.PoolMember
	for _, m := range n.h.members {
		if pool == "" || m.PoolID == pool {
			out = append(out, m)
		}
	}
	return out, nil
}

func (n *node) SaveMemberStates(_ context.Context, ms []ports.PoolMember) error {
	n.h.mu.Lock()
	defer n.h.mu.Unlock()
	for _, m := range ms {
		k := m.PoolID + "/" + m.MemberID
		if old, ok := n.h.members[k]; ok {
			old.Reputation, old.Probation, old.EffectiveRPS, old.InFlight = m.Reputation, m.Probation, m.EffectiveRPS, m.InFlight
			old.Paused, old.Picks, old.Successes, old.Failures = m.Paused, m.Picks, m.Successes, m.Failures
			n.h.members[k] = old
		}
	}
	return nil
}

// start runs a Service on a new node of the hub.
func (h *hub) start(t *testing.T, id string, mutate func(*app.Config)) *app.Service {
	t.Helper()
	n := &node{Store: h.store, h: h, id: id}
	h.mu.Lock()
	h.subs[id] = make(chan ports.ClusterMessage, 1024)
	h.mu.Unlock()
	tc := clockOf(t)
	cfg := app.Config{
		Store:   n,
		Doer:    &http.Client{},
		Clock:   tc.clock(),
		Logger:  zap.NewNop(),
		Rates:   app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 8}},
		Retry:   app.RetryPolicy{Attempts: 5, Backoff: []time.Duration{20 * time.Millisecond}},
		Cluster: app.ClusterConfig{Peers: ports.ClusterOf(n), LeaseTTL: 300 * time.Millisecond, SyncInterval: 50 * time.Millisecond},
		Rand:    noJitter,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	client := cfg.Doer
	cfg.Doer = tc.doer(signedBy{id, cfg.Doer})
	svc, err := app.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopService(t, svc)
		if c, ok := client.(*http.Client); ok {
			c.CloseIdleConnections()
		}
	})
	return svc
}

// signedBy marks every request a node sends with the node (X-Test-Node),
// so the destination can tell who dispatched what.
type signedBy struct {
	id   string
	next ports.Doer
}

func (s signedBy) Do(r *http.Request) (*http.Response, error) {
	r.Header.Set("X-Test-Node", s.id)
	return s.next.Do(r)
}

// kill makes node id behave like a crashed process: it stops renewing and
// sending, and its leases run out.
func (h *hub) kill(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dead[id] = true
}

func (h *hub) holder(u domain.UpstreamKey) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if le := h.leases[u]; le != nil && h.now().Before(le.until) {
		return le.owner
	}
	return ""
}

func upstreamOf(t *testing.T, rawURL string) domain.UpstreamKey {
	t.Helper()
	u, ok := domain.UpstreamOf(rawURL)
	if !ok {
		t.Fatalf("no upstream for %s", rawURL)
	}
	return u
}

// TestClusterPacesGlobally: two processes accept jobs for one destination;
// only the lane's holder dispatches, so the destination sees its configured
// rate once, not twice.
func TestClusterPacesGlobally(t *testing.T) {
	target := newUpstream(t, nil)
	rate := func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{strings.TrimPrefix(target.URL, "http://"): {RPS: 40, MaxConcurrent: 4}}
	}
	h := newHub(t)
	a, b := h.start(t, "a", rate), h.start(t, "b", rate)
	const n = 80
	var ids []domain.JobID
	for i := range n {
		svc := a
		if i%2 == 1 {
			svc = b
		}
		res, err := svc.Enqueue(t.Context(), req(fmt.Sprint("g", i), target.URL+"/x"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.JobID)
	}
	for _, id := range ids {
		waitFor(t, "every job to complete", func() bool {
			j, err := a.Get(t.Context(), id)
			return err == nil && j.Status == domain.StatusCompleted
		})
	}
	hits := target.snapshot()
	if len(hits) != n {
		t.Fatalf("%d requests for %d jobs: a job was dispatched twice or not at all", len(hits), n)
	}
	sort.Slice(hits, func(i, j int) bool { return hits[i].at.Before(hits[j].at) })
	span := hits[len(hits)-1].at.Sub(hits[0].at).Seconds()
	if got := float64(n-1) / span; got > 40*(1+1e-6) {
		t.Fatalf("destination saw %.1f rps across two processes; the lane's 40 rps must be global", got)
	}
	for i := 1; i < len(hits); i++ {
		if gap := hits[i].at.Sub(hits[i-1].at); gap < 25*time.Millisecond {
			t.Fatalf("starts %d and %d %v apart; at 40 rps they are at least 25ms apart", i, i+1, gap)
		}
	}
	if holder := h.holder(upstreamOf(t, target.URL)); holder == "" {
		t.Log("lane released after draining (allowed)")
	}
}

// TestClusterTakeoverKeepsThePace: the holder learns a slower pace from the
// destination, dies; the other process takes the lane within the lease
// time, continues at the learned pace, and completes every job.
func TestClusterTakeoverKeepsThePace(t *testing.T) {
	release := newGate(t)
	target := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("X-Aqueduct-Rps", "10")
		if n == 3 {
			release.Wait(r.Context()) // the third job is in flight when its holder dies
		}
		w.WriteHeader(http.StatusOK)
	})
	rate := func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{strings.TrimPrefix(target.URL, "http://"): {RPS: 100, MaxConcurrent: 1}}
	}
	h := newHub(t)
	a := h.start(t, "a", rate)
	var ids []domain.JobID
	for i := range 10 {
		res, err := a.Enqueue(t.Context(), req(fmt.Sprint("t", i), target.URL+"/x"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.JobID)
	}
	u := upstreamOf(t, target.URL)
	waitFor(t, "a to hold the lane and slow down", func() bool {
		for _, l := range a.Health(t.Context()).Lanes {
			if l.Lane == string(u) && l.RPS <= 10 {
				return h.holder(u) == "a" && target.count() >= 3
			}
		}
		return false
	})
	b := h.start(t, "b", rate)
	h.kill("a")
	killed := now(t)
	waitFor(t, "b to take the lane over", func() bool { return h.holder(u) == "b" })
	// a's lease runs out at most 300 ms after it died (its last renewal);
	// b takes it at its first sync (every 50 ms) after that.
	if d := now(t).Sub(killed); d > 300*time.Millisecond+50*time.Millisecond {
		t.Fatalf("takeover took %v with a 300 ms lease synced every 50 ms", d)
	}
	for _, l := range b.Health(t.Context()).Lanes {
		if l.Lane == string(u) && l.RPS > 10.5 {
			t.Fatalf("new holder runs at %.1f rps; it must continue at the learned 10", l.RPS)
		}
	}
	release.Open()
	for _, id := range ids {
		waitFor(t, "every job to complete after the takeover", func() bool {
			j, err := b.Get(t.Context(), id)
			return err == nil && j.Status == domain.StatusCompleted
		})
	}
	if hc := b.Health(t.Context()).Cluster; hc == nil || hc.InstanceID != "b" || len(hc.Lanes) == 0 {
		t.Fatalf("/health cluster section %+v", hc)
	}
}

// TestClusterFencedProcessStopsBeforeTheNextHolderStarts: a holder that
// can no longer reach the store (its lease syncs fail) stops dispatching
// before its lease could have run out, and fences itself off; the next
// holder starts only once the lease has run out. At no time do both send.
func TestClusterFencedProcessStopsBeforeTheNextHolderStarts(t *testing.T) {
	const ttl, sync = 300 * time.Millisecond, 50 * time.Millisecond // the hub's
	target := newUpstream(t, nil)
	rate := func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{strings.TrimPrefix(target.URL, "http://"): {RPS: 20, MaxConcurrent: 1}}
	}
	h := newHub(t)
	a := h.start(t, "a", rate)
	var ids []domain.JobID
	for i := range 40 {
		res, err := a.Enqueue(t.Context(), req(fmt.Sprint("f", i), target.URL+"/x"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.JobID)
	}
	u := upstreamOf(t, target.URL)
	waitFor(t, "a to dispatch", func() bool { return h.holder(u) == "a" && target.count() >= 5 })
	b := h.start(t, "b", rate)
	h.kill("a")
	killed := now(t)
	waitFor(t, "a to fence itself", func() bool { hc := a.Health(t.Context()).Cluster; return hc != nil && len(hc.Lanes) == 0 })
	for _, id := range ids {
		waitFor(t, "every job to complete", func() bool {
			j, err := b.Get(t.Context(), id)
			return err == nil && j.Status == domain.StatusCompleted
		})
	}
	var lastA, firstB time.Time
	for _, x := range target.snapshot() {
		switch x.headers.Get("X-Test-Node") {
		case "a":
			lastA = x.at
		case "b":
			if firstB.IsZero() {
				firstB = x.at
			}
		}
	}
	// a's last successful sync was at the kill at the latest: its lease
	// lasts ttl from then, and it stops sync/2 short of that.
	if lastA.Sub(killed) >= ttl-sync/2 {
		t.Fatalf("a dispatched %v after it lost the store; it must stop within %v", lastA.Sub(killed), ttl-sync/2)
	}
	if firstB.IsZero() || !firstB.After(lastA) {
		t.Fatalf("b's first dispatch at +%v, a's last at +%v: both dispatched at once", firstB.Sub(testT0), lastA.Sub(testT0))
	}
}

// TestClusterEventsReachOtherProcesses: a subscriber on one process sees a
// job dispatched by the other, result included.
func TestClusterEventsReachOtherProcesses(t *testing.T) {
	release := newGate(t)
	target := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		release.Wait(r.Context())
		fmt.Fprint(w, "done elsewhere")
	})
	h := newHub(t)
	a := h.start(t, "a", nil)
	res, err := a.Enqueue(t.Context(), req("ev", target.URL+"/x"))
	if err != nil {
		t.Fatal(err)
	}
	u := upstreamOf(t, target.URL)
	waitFor(t, "a to hold the lane", func() bool { return h.holder(u) == "a" && target.count() == 1 })
	b := h.start(t, "b", nil)
	_, sub, err := b.Subscribe(t.Context(), res.JobID)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	release.Open()
	if ev := recv(t, "the other process's subscriber to hear the job complete", sub.C); ev.Type != domain.EventCompleted ||
		ev.Result == nil || string(ev.Result.Body) != "done elsewhere" {
		t.Fatalf("event on the other process: %+v", ev)
	}
}

// TestClusterSharedPools: a member registers through one process, a pool
// job is submitted through the other, the pool lane's holder dispatches it
// to the member, and both processes list the member.
func TestClusterSharedPools(t *testing.T) {
	member := newUpstream(t, nil)
	h := newHub(t)
	a, b := h.start(t, "a", nil), h.start(t, "b", nil)
	if _, err := a.RegisterMember(t.Context(), &domain.MemberRegistration{PoolID: "p", MemberID: "m1", Address: member.URL + "/work",
		CapacityRPS: 50, HeartbeatInterval: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	res, err := b.Enqueue(t.Context(), &domain.JobRequest{UserID: "u", IdempotentKey: "pj", PoolID: "p", Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool job to complete", func() bool {
		j, err := a.Get(t.Context(), res.JobID)
		return err == nil && j.Status == domain.StatusCompleted
	})
	if member.count() != 1 {
		t.Fatalf("member got %d requests", member.count())
	}
	for _, svc := range []*app.Service{a, b} {
		waitFor(t, "both processes to list the member with its success", func() bool {
			p, ok := svc.Pools(t.Context())["p"]
			return ok && len(p.Members) == 1 && p.Members[0].Successes == 1
		})
	}
	if err := b.LeaveMember(t.Context(), "p", "m1"); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []*app.Service{a, b} {
		waitFor(t, "the leave to reach both processes", func() bool { _, ok := svc.Pools(t.Context())["p"]; return !ok })
	}
}

// TestClusterPauseHoldsEveryInstance: a lane paused through one process is
// paused for the other, whichever dispatches it, and a resume through the
// other releases it.
func TestClusterPauseHoldsEveryInstance(t *testing.T) {
	target := newUpstream(t, nil)
	h := newHub(t)
	a, b := h.start(t, "a", nil), h.start(t, "b", nil)
	if _, err := a.PauseLane(t.Context(), target.URL, "maintenance"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to see the pause", func() bool {
		v, err := b.Lane(t.Context(), target.URL)
		return err == nil && v.Paused != nil
	})
	var ids []domain.JobID
	for i := range 6 {
		svc := a
		if i%2 == 1 {
			svc = b
		}
		res, err := svc.Enqueue(t.Context(), req(fmt.Sprint("p", i), target.URL))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.JobID)
	}
	clockOf(t).drv.For(5 * time.Second)
	if n := target.count(); n != 0 {
		t.Fatalf("a lane paused through a was dispatched %d times", n)
	}
	if _, err := b.ResumeLane(t.Context(), target.URL); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		waitFor(t, "every job to complete after the resume", func() bool {
			j, err := a.Get(t.Context(), id)
			return err == nil && j.Status == domain.StatusCompleted
		})
	}
	if n := target.count(); n != len(ids) {
		t.Fatalf("%d requests for %d jobs", n, len(ids))
	}
}
