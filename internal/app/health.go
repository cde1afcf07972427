package app

import (
	"context"
	"sort"
	"time"

	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Health is the /health document (BEHAVIOR.md §7, plus store health).
type Health struct {
	// Status is "ok" when the store answers and its writes commit,
	// "degraded" otherwise.
	Status string `json:"status"`
	// Auth is "open" (no API-key tenants: anyone who reaches Aquifer may
	// use it) or "api_keys".
	Auth string `json:"auth"`
	// L8 identity, present when deliveries are signed.
	L8Protocol          string `json:"l8_protocol,omitempty"`
	L8PublicKey         string `json:"l8_public_key,omitempty"`
	StandardWebhooksKey string `json:"standard_webhooks_public_key,omitempty"`

	Store StoreHealth  `json:"store"`
	Jobs  JobCounts    `json:"jobs"`
	Lanes []LaneHealth `json:"lanes"`
	// PausedLanes are the destinations an operator paused, whether or not
	// they have a live lane.
	PausedLanes []PausedLane          `json:"paused_lanes"`
	Admission   *AdmissionHealth      `json:"admission,omitempty"`
	Pools       map[string]PoolHealth `json:"pools"`
	// Proxy is each destination's edge-proxy mode (only destinations the
	// proxy has seen fall back).
	Proxy map[string]ProxyHealth `json:"proxy,omitempty"`
	// Drain is drain mode's state (only when enabled).
	Drain *DrainHealth `json:"drain,omitempty"`
	// Cluster lists this instance, its lanes and the other live instances
	// (only with a store shared by several processes).
	Cluster *ClusterHealth `json:"cluster,omitempty"`
}

// StoreHealth reports whether the store answers, how fast, and whether its
// writes commit.
type StoreHealth struct {
	OK bool `json:"ok"`
	// Writable is false while the store's writes fail (a full disk, a
	// database that refuses writes), even if it answers reads.
	Writable bool `json:"writable"`
	// Error says why the store does not answer or cannot write.
	Error     string  `json:"error,omitempty"`
	LatencyMS float64 `json:"latency_ms"`
}

// JobCounts are store-wide counts of unfinished work.
type JobCounts struct {
	Queued     int64 `json:"queued"`
	InFlight   int64 `json:"in_flight"`
	Deliveries int64 `json:"webhooks_pending"`
	// AgeMS is how old the counts are: 0 when counted for this answer,
	// more when the store counts slowly (a scan at a deep backlog) and
	// counting is spaced out (docs/API.md, load headers).
	AgeMS int64 `json:"age_ms"`
	// Error says why the store could not count (the counts are then the
	// last ones it gave, or zero).
	Error string `json:"error,omitempty"`
}

// LaneHealth describes one live lane: an upstream and its pace.
type LaneHealth struct {
	Lane                 string  `json:"lane"`
	RPS                  float64 `json:"rps"`
	MaxConcurrent        int     `json:"max_concurrent"`
	CeilingRPS           float64 `json:"ceiling_rps"`
	CeilingMaxConcurrent int     `json:"ceiling_max_concurrent"`
	AccountQueues        bool    `json:"account_queues"`
	Queues               int     `json:"queues"`
	PausedQueues         int     `json:"paused_queues"`
	InFlight             int     `json:"in_flight"`
	Buffered             int     `json:"buffered"`
	// Circuit is the lane's outage circuit: closed while the destination
	// answers; open while it is down and its work is held.
	Circuit CircuitHealth `json:"circuit"`
	// Paused is true while an operator has the lane paused.
	Paused bool `json:"paused"`
	// Mode names what holds the lane's pace: static, signalled, budget or
	// adaptive; ModeReason says why.
	Mode       string `json:"mode"`
	ModeReason string `json:"mode_reason,omitempty"`
}

// PausedLane is an operator's pause of a destination. SinceMS is Unix
// milliseconds.
type PausedLane struct {
	Lane    string `json:"lane"`
	SinceMS int64  `json:"since_ms"`
	Reason  string `json:"reason,omitempty"`
}

// CircuitHealth describes a lane's outage circuit. Times are Unix
// milliseconds.
type CircuitHealth struct {
	State               string `json:"state"` // closed, open or half_open (a probe is running)
	SinceMS             int64  `json:"since_ms,omitempty"`
	NextProbeMS         int64  `json:"next_probe_ms,omitempty"`
	ConsecutiveFailures int    `json:"consecutive_failures"`
	Probes              int    `json:"probes,omitempty"`
	LastError           string `json:"last_error,omitempty"`
}

func circuitHealth(c CircuitStats) CircuitHealth {
	h := CircuitHealth{State: c.State.String(), ConsecutiveFailures: c.Failures, Probes: c.Probes, LastError: c.LastError}
	if !c.Since.IsZero() {
		h.SinceMS = c.Since.UnixMilli()
	}
	if !c.NextProbe.IsZero() {
		h.NextProbeMS = c.NextProbe.UnixMilli()
	}
	return h
}

// Health reports the service state. It never fails: problems show up in the
// document as a "degraded" status.
func (s *Service) Health(ctx context.Context) *Health {
	h := &Health{Status: "ok", Lanes: []LaneHealth{}, PausedLanes: []PausedLane{}}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	err := s.cfg.Store.Ping(ctx)
	h.Store.LatencyMS = float64(time.Since(start).Microseconds()) / 1000
	if err != nil {
		h.Status, h.Store.Error = "degraded", err.Error()
	} else {
		h.Store.OK, h.Store.Writable = true, true
		if wc, ok := s.cfg.Store.(ports.WriteChecker); ok {
			if err := wc.CheckWrites(ctx); err != nil {
				h.Status, h.Store.Writable, h.Store.Error = "degraded", false, err.Error()
			}
		}
		snap, err := s.load.Counts(ctx, 0) // counted now unless counting is backing off
		if err != nil {
			h.Jobs.Error = "counting jobs: " + err.Error()
		}
		if !snap.CountedAt.IsZero() {
			// Quick attempts are in flight only in memory.
			c, running := snap.Counts, int64(s.d.ExecutingCount())
			h.Jobs.Queued, h.Jobs.InFlight, h.Jobs.Deliveries = max(c.Queued+c.InFlight-running, 0), running, c.Deliveries
			h.Jobs.AgeMS = s.cfg.Clock.Now().Sub(snap.CountedAt).Milliseconds()
		}
	}
	for _, l := range s.d.Stats() {
		h.Lanes = append(h.Lanes, LaneHealth{Lane: string(l.Upstream), RPS: l.RPS, MaxConcurrent: l.MaxConcurrent,
			CeilingRPS: l.CeilingRPS, CeilingMaxConcurrent: l.CeilingMaxConcurrent, AccountQueues: s.AccountQueues(l.Upstream),
			Queues: l.Queues, PausedQueues: l.PausedQueues, InFlight: l.InFlight, Buffered: l.Buffered,
			Circuit: circuitHealth(l.Circuit), Mode: l.Mode, ModeReason: l.ModeReason})
		_, h.Lanes[len(h.Lanes)-1].Paused = s.d.Paused(l.Upstream)
	}
	for _, p := range s.d.Pauses() {
		h.PausedLanes = append(h.PausedLanes, PausedLane{Lane: string(p.Upstream), SinceMS: p.At.UnixMilli(), Reason: p.Reason})
	}
	sort.Slice(h.Lanes, func(i, j int) bool { return h.Lanes[i].Lane < h.Lanes[j].Lane })
	h.Admission = s.adm.Health(ctx, s.cfg.MaxBodyBytes)
	h.Auth = "open"
	if s.tenants != nil {
		// /health is unauthenticated: tenants' pools are listed only to
		// their tenants (GET /pools).
		h.Auth, h.Pools = "api_keys", map[string]PoolHealth{}
	} else {
		h.Pools = s.pools.Snapshot()
	}
	h.Proxy = s.proxy.Health()
	if s.drain != nil {
		h.Drain = s.drain.Health()
	}
	if s.leases != nil {
		h.Cluster = s.leases.Health()
	}
	if id := s.cfg.L8.Identity; id != nil {
		h.L8Protocol, h.L8PublicKey, h.StandardWebhooksKey = l8.ProtocolVersion, id.PublicKeyBase64(), id.StandardWebhooksKey()
	}
	return h
}
