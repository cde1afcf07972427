package prommetrics

import (
	"context"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aquiferhq/aquifer/internal/app"
)

// healthCollector turns the service's health document into gauges at scrape
// time, so they are never stale and cost nothing between scrapes.
type healthCollector struct {
	health    func(context.Context) *app.Health
	upstreams *labelCap
	timeout   time.Duration
	maxSeries int // per-scrape cap on pool and pool-member series

	storeUp, storePing, storeWritable         *prometheus.Desc
	jobs                                      *prometheus.Desc
	lanes                                     *prometheus.Desc
	laneRate, laneMaxConc, laneCeil           *prometheus.Desc
	laneCeilConc, laneInFlight, laneBuffered  *prometheus.Desc
	laneQueues, lanePaused, laneCircuit       *prometheus.Desc
	laneOperatorPaused                        *prometheus.Desc
	laneMode                                  *prometheus.Desc
	admEnabled, admRejecting, admMem          *prometheus.Desc
	admMemLimit, admRetryAfter                *prometheus.Desc
	storeBytes, storeMaxBytes                 *prometheus.Desc
	poolMembers, poolCapacity                 *prometheus.Desc
	memberRep, memberRPS, memberIn, memberOff *prometheus.Desc
	drainState                                *prometheus.Desc
	clusterLanes, clusterInstances            *prometheus.Desc
}

func newHealthCollector(health func(context.Context) *app.Health, upstreams *labelCap, timeout time.Duration) *healthCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_"+name, help, labels, nil)
	}
	return &healthCollector{
		health: health, upstreams: upstreams, timeout: timeout, maxSeries: upstreams.max,

		storeUp: d("store_up", "1 when the job store answered the health ping, 0 otherwise."),
		storeWritable: d("store_writable", "1 while the job store's writes commit, 0 while they fail (a full disk, a database "+
			"that refuses writes) or the store does not answer; /health's store.error says why."),
		storePing: d("store_ping_seconds", "How long the job store took to answer the health ping."),
		jobs: d("jobs", "Unfinished jobs by state: queued (waiting for dispatch, store-wide), in_flight (attempts "+
			"running in this process), webhooks_pending (results waiting for delivery, store-wide).", "state"),

		lanes:        d("lanes", "Live lanes (one per upstream with work) in this process."),
		laneRate:     d("lane_rate_rps", "A lane's current pace, in requests per second.", "upstream"),
		laneMaxConc:  d("lane_max_concurrent", "A lane's current concurrency limit.", "upstream"),
		laneCeil:     d("lane_ceiling_rps", "The highest pace a lane may reach (configured or learned), in requests per second.", "upstream"),
		laneCeilConc: d("lane_ceiling_max_concurrent", "The highest concurrency limit a lane may reach.", "upstream"),
		laneInFlight: d("lane_in_flight", "Attempts a lane is running now.", "upstream"),
		laneBuffered: d("lane_buffered", "Ready jobs a lane holds in memory (at most AQUIFER_LANE_WINDOW per queue).", "upstream"),
		laneQueues:   d("lane_queues", "Queues in a lane (more than one with account queues).", "upstream"),
		lanePaused:   d("lane_paused_queues", "Queues in a lane paused by a 429 or a Retry-After.", "upstream"),
		laneCircuit: d("lane_circuit_open", "1 while a lane's outage circuit is open or half-open (its destination is down and its work held), else 0.",
			"upstream"),
		laneMode: d("lane_mode", "Lanes by what holds their pace: 1 for a lane's mode (static: its configured ceiling; signalled: a "+
			"load signal; budget: a rate-limit window spread to its reset; adaptive: adaptive concurrency), 0 for the others. "+
			"For upstream=\"other\", how many lanes are in each mode.", "upstream", "mode"),
		laneOperatorPaused: d("lane_paused", "1 for each destination an operator paused (POST /lanes/{destination}/pause): its jobs are stored, none dispatched.",
			"upstream"),

		admEnabled:    d("admission_enabled", "1 when admission control has a limit to enforce."),
		admRejecting:  d("admission_rejecting", "1 while admission control sheds new jobs (the last check found a limit exceeded)."),
		admMem:        d("admission_memory_bytes", "Memory the process holds (from the OS, less what the Go runtime released), which AQUIFER_MEMORY_LIMIT_MB is checked against (MiB resolution)."),
		admMemLimit:   d("admission_memory_limit_bytes", "AQUIFER_MEMORY_LIMIT_MB in bytes; 0 means no limit."),
		admRetryAfter: d("admission_retry_after_seconds", "The Retry-After the next rejection would carry."),
		storeBytes:    d("store_bytes", "The job store's size as admission control measures it."),
		storeMaxBytes: d("store_max_bytes", "AQUIFER_DB_MAX_BYTES; 0 means no limit."),

		poolMembers:  d("pool_members", "Registered members of a pool.", "pool"),
		poolCapacity: d("pool_capacity_rps", "A pool's live ceiling: the sum of its unpaused members' effective rates.", "pool"),
		memberRep:    d("pool_member_reputation", "A pool member's reputation, 0 to 1.", "pool", "member"),
		memberRPS:    d("pool_member_effective_rps", "A pool member's effective rate: its declared rate weighted by reputation.", "pool", "member"),
		memberIn:     d("pool_member_in_flight", "Attempts running on a pool member.", "pool", "member"),
		memberOff:    d("pool_member_paused", "1 while a pool member is paused (told to wait by a 429, Retry-After or rate-limit reset).", "pool", "member"),

		drainState: d("drain_state", "Drain mode's state: 1 for the current one (active, draining, unassigned).", "state"),

		clusterLanes:     d("cluster_lanes_held", "Lanes this instance holds the lease of (shared store only)."),
		clusterInstances: d("cluster_instances", "Live instances sharing the store, this one included (shared store only)."),
	}
}

func (c *healthCollector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{c.storeUp, c.storeWritable, c.storePing, c.jobs, c.lanes, c.laneRate, c.laneMaxConc, c.laneCeil,
		c.laneCeilConc, c.laneInFlight, c.laneBuffered, c.laneQueues, c.lanePaused, c.laneCircuit, c.laneOperatorPaused, c.laneMode, c.admEnabled, c.admRejecting,
		c.admMem, c.admMemLimit, c.admRetryAfter, c.storeBytes, c.storeMaxBytes, c.poolMembers, c.poolCapacity,
		c.memberRep, c.memberRPS, c.memberIn, c.memberOff, c.drainState, c.clusterLanes, c.clusterInstances}
}

// Describe implements prometheus.Collector.
func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	h := c.health(ctx)
	if h == nil {
		return
	}
	e := emitter{ch}
	e.gauge(c.storeUp, b2f(h.Store.OK))
	e.gauge(c.storeWritable, b2f(h.Store.Writable))
	e.gauge(c.storePing, h.Store.LatencyMS/1000)
	e.gauge(c.jobs, float64(h.Jobs.Queued), "queued")
	e.gauge(c.jobs, float64(h.Jobs.InFlight), "in_flight")
	e.gauge(c.jobs, float64(h.Jobs.Deliveries), "webhooks_pending")
	c.collectLanes(e, h.Lanes)
	for _, p := range h.PausedLanes {
		e.gauge(c.laneOperatorPaused, 1, c.upstreams.value(p.Lane))
	}
	if a := h.Admission; a != nil {
		e.gauge(c.admEnabled, b2f(a.Enabled))
		e.gauge(c.admRejecting, b2f(a.Rejecting))
		e.gauge(c.admMem, float64(a.MemoryMB<<20))
		e.gauge(c.admMemLimit, float64(a.MemoryLimitMB<<20))
		e.gauge(c.admRetryAfter, float64(a.RetryAfterSeconds))
		e.gauge(c.storeBytes, float64(a.DBBytes))
		e.gauge(c.storeMaxBytes, float64(a.DBMaxBytes))
	}
	c.collectPools(e, h.Pools)
	if dr := h.Drain; dr != nil {
		for _, s := range []string{app.DrainActive, app.DrainDraining, app.DrainUnassigned} {
			e.gauge(c.drainState, b2f(dr.State == s), s)
		}
	}
	if cl := h.Cluster; cl != nil {
		e.gauge(c.clusterLanes, float64(len(cl.Lanes)))
		e.gauge(c.clusterInstances, float64(len(cl.Instances)))
	}
}

// laneSum is one upstream label's lane gauges: a lane's own values, or the
// sums over every lane counted as "other".
type laneSum struct {
	rps, maxConc, ceil, ceilConc, inFlight, buffered, queues, paused, circuit float64
	modes                                                                     map[string]float64 // lanes per mode
}

func (c *healthCollector) collectLanes(e emitter, lanes []app.LaneHealth) {
	e.gauge(c.lanes, float64(len(lanes)))
	sums := make(map[string]*laneSum, len(lanes))
	var order []string
	for _, l := range lanes {
		u := c.upstreams.value(l.Lane)
		s := sums[u]
		if s == nil {
			s = &laneSum{modes: map[string]float64{}}
			sums[u] = s
			order = append(order, u)
		}
		s.rps += l.RPS
		s.maxConc += float64(l.MaxConcurrent)
		s.ceil += l.CeilingRPS
		s.ceilConc += float64(l.CeilingMaxConcurrent)
		s.inFlight += float64(l.InFlight)
		s.buffered += float64(l.Buffered)
		s.queues += float64(l.Queues)
		s.paused += float64(l.PausedQueues)
		s.circuit += b2f(l.Circuit.State != "closed")
		s.modes[l.Mode]++
	}
	for _, u := range order {
		s := sums[u]
		e.gauge(c.laneRate, s.rps, u)
		e.gauge(c.laneMaxConc, s.maxConc, u)
		e.gauge(c.laneCeil, s.ceil, u)
		e.gauge(c.laneCeilConc, s.ceilConc, u)
		e.gauge(c.laneInFlight, s.inFlight, u)
		e.gauge(c.laneBuffered, s.buffered, u)
		e.gauge(c.laneQueues, s.queues, u)
		e.gauge(c.lanePaused, s.paused, u)
		e.gauge(c.laneCircuit, s.circuit, u)
		for _, m := range app.LaneModes {
			e.gauge(c.laneMode, s.modes[m], u, m)
		}
	}
}

// collectPools exports pools and their members in a stable order, at most
// maxSeries of each per scrape: members are bounded by registrations, but a
// flood of registrations must not make every scrape huge.
func (c *healthCollector) collectPools(e emitter, pools map[string]app.PoolHealth) {
	ids := make([]string, 0, len(pools))
	for id := range pools {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	members := 0
	for i, id := range ids {
		if i >= c.maxSeries {
			break
		}
		p := pools[id]
		pool := clean(id)
		e.gauge(c.poolMembers, float64(len(p.Members)), pool)
		e.gauge(c.poolCapacity, p.TotalCapacityRPS, pool)
		for _, m := range p.Members {
			if members >= c.maxSeries {
				break
			}
			members++
			member := clean(m.ID)
			e.gauge(c.memberRep, m.Reputation, pool, member)
			e.gauge(c.memberRPS, m.EffectiveRPS, pool, member)
			e.gauge(c.memberIn, float64(m.InFlight), pool, member)
			e.gauge(c.memberOff, b2f(m.Paused), pool, member)
		}
	}
}

// emitter sends gauges; a metric the client refuses becomes a scrape error
// for that metric alone instead of a panic.
type emitter struct{ ch chan<- prometheus.Metric }

func (e emitter) gauge(d *prometheus.Desc, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	e.ch <- m
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// clean makes an id usable as a label value.
func clean(s string) string {
	if s == "" {
		return NoneLabel
	}
	if !utf8.ValidString(s) {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}
