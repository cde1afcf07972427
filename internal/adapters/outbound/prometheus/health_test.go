package prommetrics_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	prommetrics "github.com/aquiferhq/aquifer/internal/adapters/outbound/prometheus"
	"github.com/aquiferhq/aquifer/internal/app"
)

// fullHealth is a health document with every optional section.
func fullHealth(context.Context) *app.Health {
	return &app.Health{
		Status: "ok",
		Store:  app.StoreHealth{OK: true, Writable: true, LatencyMS: 1.5},
		Jobs:   app.JobCounts{Queued: 120, InFlight: 3, Deliveries: 7},
		Lanes: []app.LaneHealth{
			{Lane: hostA, RPS: 12.5, MaxConcurrent: 4, CeilingRPS: 50, CeilingMaxConcurrent: 16, Queues: 2, PausedQueues: 1, InFlight: 3, Buffered: 64},
			{Lane: "pool:readers", RPS: 5, MaxConcurrent: 2, CeilingRPS: 5, CeilingMaxConcurrent: 2, Queues: 1},
		},
		// A paused destination with no live lane still shows.
		PausedLanes: []app.PausedLane{{Lane: "https://down.example:443", SinceMS: 1, Reason: "incident"}},
		Admission: &app.AdmissionHealth{Enabled: true, MemoryMB: 100, MemoryLimitMB: 512, DBBytes: 4096, DBMaxBytes: 8192,
			RetryAfterSeconds: 5, Rejecting: true, LimitReason: "memory", RejectedTotal: 9},
		Pools: map[string]app.PoolHealth{
			"readers": {TotalCapacityRPS: 7.5, Members: []app.MemberHealth{
				{ID: "m1", Reputation: 1, EffectiveRPS: 5, InFlight: 1},
				{ID: "m2", Reputation: 0.25, EffectiveRPS: 2.5, Paused: true},
			}},
		},
		Drain:   &app.DrainHealth{State: app.DrainDraining},
		Cluster: &app.ClusterHealth{InstanceID: "i1", Lanes: []string{hostA}, Instances: []app.InstanceLanes{{ID: "i1"}, {ID: "i2"}}},
	}
}

func TestHealthGauges(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true})
	if err := m.CollectHealth(fullHealth); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP aquifer_store_up 1 when the job store answered the health ping, 0 otherwise.
# TYPE aquifer_store_up gauge
aquifer_store_up 1
# HELP aquifer_store_writable 1 while the job store's writes commit, 0 while they fail (a full disk, a database that refuses writes) or the store does not answer; /health's store.error says why.
# TYPE aquifer_store_writable gauge
aquifer_store_writable 1
# HELP aquifer_store_ping_seconds How long the job store took to answer the health ping.
# TYPE aquifer_store_ping_seconds gauge
aquifer_store_ping_seconds 0.0015
# HELP aquifer_jobs Unfinished jobs by state: queued (waiting for dispatch, store-wide), in_flight (attempts running in this process), webhooks_pending (results waiting for delivery, store-wide).
# TYPE aquifer_jobs gauge
aquifer_jobs{state="in_flight"} 3
aquifer_jobs{state="queued"} 120
aquifer_jobs{state="webhooks_pending"} 7
# HELP aquifer_lanes Live lanes (one per upstream with work) in this process.
# TYPE aquifer_lanes gauge
aquifer_lanes 2
# HELP aquifer_lane_rate_rps A lane's current pace, in requests per second.
# TYPE aquifer_lane_rate_rps gauge
aquifer_lane_rate_rps{upstream="https://a.example:443"} 12.5
aquifer_lane_rate_rps{upstream="pool:readers"} 5
# HELP aquifer_lane_max_concurrent A lane's current concurrency limit.
# TYPE aquifer_lane_max_concurrent gauge
aquifer_lane_max_concurrent{upstream="https://a.example:443"} 4
aquifer_lane_max_concurrent{upstream="pool:readers"} 2
# HELP aquifer_lane_ceiling_rps The highest pace a lane may reach (configured or learned), in requests per second.
# TYPE aquifer_lane_ceiling_rps gauge
aquifer_lane_ceiling_rps{upstream="https://a.example:443"} 50
aquifer_lane_ceiling_rps{upstream="pool:readers"} 5
# HELP aquifer_lane_in_flight Attempts a lane is running now.
# TYPE aquifer_lane_in_flight gauge
aquifer_lane_in_flight{upstream="https://a.example:443"} 3
aquifer_lane_in_flight{upstream="pool:readers"} 0
# HELP aquifer_lane_buffered Ready jobs a lane holds in memory (at most AQUIFER_LANE_WINDOW per queue).
# TYPE aquifer_lane_buffered gauge
aquifer_lane_buffered{upstream="https://a.example:443"} 64
aquifer_lane_buffered{upstream="pool:readers"} 0
# HELP aquifer_lane_paused_queues Queues in a lane paused by a 429 or a Retry-After.
# TYPE aquifer_lane_paused_queues gauge
aquifer_lane_paused_queues{upstream="https://a.example:443"} 1
aquifer_lane_paused_queues{upstream="pool:readers"} 0
# HELP aquifer_lane_paused 1 for each destination an operator paused (POST /lanes/{destination}/pause): its jobs are stored, none dispatched.
# TYPE aquifer_lane_paused gauge
aquifer_lane_paused{upstream="https://down.example:443"} 1
# HELP aquifer_admission_rejecting 1 while admission control sheds new jobs (the last check found a limit exceeded).
# TYPE aquifer_admission_rejecting gauge
aquifer_admission_rejecting 1
# HELP aquifer_admission_memory_bytes Memory the process holds (from the OS, less what the Go runtime released), which AQUIFER_MEMORY_LIMIT_MB is checked against (MiB resolution).
# TYPE aquifer_admission_memory_bytes gauge
aquifer_admission_memory_bytes 1.048576e+08
# HELP aquifer_admission_memory_limit_bytes AQUIFER_MEMORY_LIMIT_MB in bytes; 0 means no limit.
# TYPE aquifer_admission_memory_limit_bytes gauge
aquifer_admission_memory_limit_bytes 5.36870912e+08
# HELP aquifer_store_bytes The job store's size as admission control measures it.
# TYPE aquifer_store_bytes gauge
aquifer_store_bytes 4096
# HELP aquifer_store_max_bytes AQUIFER_DB_MAX_BYTES; 0 means no limit.
# TYPE aquifer_store_max_bytes gauge
aquifer_store_max_bytes 8192
# HELP aquifer_pool_members Registered members of a pool.
# TYPE aquifer_pool_members gauge
aquifer_pool_members{pool="readers"} 2
# HELP aquifer_pool_capacity_rps A pool's live ceiling: the sum of its unpaused members' effective rates.
# TYPE aquifer_pool_capacity_rps gauge
aquifer_pool_capacity_rps{pool="readers"} 7.5
# HELP aquifer_pool_member_reputation A pool member's reputation, 0 to 1.
# TYPE aquifer_pool_member_reputation gauge
aquifer_pool_member_reputation{member="m1",pool="readers"} 1
aquifer_pool_member_reputation{member="m2",pool="readers"} 0.25
# HELP aquifer_pool_member_effective_rps A pool member's effective rate: its declared rate weighted by reputation.
# TYPE aquifer_pool_member_effective_rps gauge
aquifer_pool_member_effective_rps{member="m1",pool="readers"} 5
aquifer_pool_member_effective_rps{member="m2",pool="readers"} 2.5
# HELP aquifer_pool_member_in_flight Attempts running on a pool member.
# TYPE aquifer_pool_member_in_flight gauge
aquifer_pool_member_in_flight{member="m1",pool="readers"} 1
aquifer_pool_member_in_flight{member="m2",pool="readers"} 0
# HELP aquifer_pool_member_paused 1 while a pool member is paused (told to wait by a 429, Retry-After or rate-limit reset).
# TYPE aquifer_pool_member_paused gauge
aquifer_pool_member_paused{member="m1",pool="readers"} 0
aquifer_pool_member_paused{member="m2",pool="readers"} 1
# HELP aquifer_drain_state Drain mode's state: 1 for the current one (active, draining, unassigned).
# TYPE aquifer_drain_state gauge
aquifer_drain_state{state="active"} 0
aquifer_drain_state{state="draining"} 1
aquifer_drain_state{state="unassigned"} 0
# HELP aquifer_cluster_lanes_held Lanes this instance holds the lease of (shared store only).
# TYPE aquifer_cluster_lanes_held gauge
aquifer_cluster_lanes_held 1
# HELP aquifer_cluster_instances Live instances sharing the store, this one included (shared store only).
# TYPE aquifer_cluster_instances gauge
aquifer_cluster_instances 2
`
	names := []string{"aquifer_store_up", "aquifer_store_writable", "aquifer_store_ping_seconds", "aquifer_jobs", "aquifer_lanes",
		"aquifer_lane_rate_rps", "aquifer_lane_max_concurrent", "aquifer_lane_ceiling_rps", "aquifer_lane_in_flight",
		"aquifer_lane_buffered", "aquifer_lane_paused_queues", "aquifer_lane_paused", "aquifer_admission_rejecting",
		"aquifer_admission_memory_bytes", "aquifer_admission_memory_limit_bytes", "aquifer_store_bytes",
		"aquifer_store_max_bytes", "aquifer_pool_members", "aquifer_pool_capacity_rps", "aquifer_pool_member_reputation",
		"aquifer_pool_member_effective_rps", "aquifer_pool_member_in_flight", "aquifer_pool_member_paused",
		"aquifer_drain_state", "aquifer_cluster_lanes_held", "aquifer_cluster_instances"}
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

// Optional sections that are absent export nothing, and a health source
// that returns nothing leaves the counters readable.
func TestHealthGaugesOptionalSections(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true})
	if err := m.CollectHealth(func(context.Context) *app.Health {
		return &app.Health{Status: "degraded", Store: app.StoreHealth{Error: "down"}}
	}); err != nil {
		t.Fatal(err)
	}
	exp := scrape(t, m)
	for _, absent := range []string{"aquifer_admission_", "aquifer_pool_", "aquifer_drain_state", "aquifer_cluster_", "aquifer_lane_"} {
		if strings.Contains(exp, "\n"+absent) {
			t.Errorf("exposition has %s* without the section", absent)
		}
	}
	if !strings.Contains(exp, "aquifer_store_up 0\n") || !strings.Contains(exp, "aquifer_lanes 0\n") {
		t.Errorf("store_up 0 / lanes 0 missing:\n%s", exp)
	}
	// A store that answers but cannot write.
	full := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true})
	if err := full.CollectHealth(func(context.Context) *app.Health {
		return &app.Health{Status: "degraded", Store: app.StoreHealth{OK: true, Error: "writes failing since …: no space left on device"}}
	}); err != nil {
		t.Fatal(err)
	}
	if exp := scrape(t, full); !strings.Contains(exp, "aquifer_store_up 1\n") || !strings.Contains(exp, "aquifer_store_writable 0\n") {
		t.Errorf("store_up 1 / store_writable 0 missing:\n%s", exp)
	}

	nothing := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true})
	if err := nothing.CollectHealth(func(context.Context) *app.Health { return nil }); err != nil {
		t.Fatal(err)
	}
	nothing.JobAccepted(hostA)
	if exp := scrape(t, nothing); !strings.Contains(exp, "aquifer_jobs_accepted_total") {
		t.Errorf("counters missing when health is nil:\n%s", exp)
	}
	if err := nothing.CollectHealth(fullHealth); err == nil {
		t.Error("a second CollectHealth succeeded; want an error")
	}
}

// Lanes beyond the upstream cap are summed under "other", and a lane keeps
// the label its upstream's counters use.
func TestLaneGaugesShareTheUpstreamCap(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true, MaxUpstreams: 2})
	m.JobAccepted(hostA) // takes a place first
	lanes := make([]app.LaneHealth, 5)
	for i := range lanes {
		lanes[i] = app.LaneHealth{Lane: fmt.Sprintf("http://l%d.example:80", i), RPS: 1, MaxConcurrent: 2, InFlight: 1, Buffered: 10}
	}
	lanes = append(lanes, app.LaneHealth{Lane: hostA, RPS: 7, MaxConcurrent: 3})
	if err := m.CollectHealth(func(context.Context) *app.Health { return &app.Health{Lanes: lanes} }); err != nil {
		t.Fatal(err)
	}
	exp := scrape(t, m)
	for _, want := range []string{
		`aquifer_lanes 6`,
		`aquifer_lane_rate_rps{upstream="https://a.example:443"} 7`,
		`aquifer_lane_rate_rps{upstream="http://l0.example:80"} 1`,
		`aquifer_lane_rate_rps{upstream="other"} 4`,
		`aquifer_lane_max_concurrent{upstream="other"} 8`,
		`aquifer_lane_in_flight{upstream="other"} 4`,
		`aquifer_lane_buffered{upstream="other"} 40`,
	} {
		if !strings.Contains(exp, want+"\n") {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if n := strings.Count(exp, "\naquifer_lane_rate_rps{"); n != 3 {
		t.Errorf("%d lane rate series, want 3", n)
	}
}

// Pools and members are exported at most MaxUpstreams per scrape.
func TestPoolSeriesAreCapped(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true, MaxUpstreams: 3})
	pools := map[string]app.PoolHealth{}
	for p := range 5 {
		ph := app.PoolHealth{}
		for i := range 4 {
			ph.Members = append(ph.Members, app.MemberHealth{ID: fmt.Sprintf("m%d", i), Reputation: 1})
		}
		pools[fmt.Sprintf("p%d", p)] = ph
	}
	if err := m.CollectHealth(func(context.Context) *app.Health { return &app.Health{Pools: pools} }); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"aquifer_pool_members": 3, "aquifer_pool_member_reputation": 3} {
		n, err := testutil.GatherAndCount(m.Gatherer(), name)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%s: %d series, want %d", name, n, want)
		}
	}
}
