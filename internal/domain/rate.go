package domain

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// MinRPS is the lowest pace Aquifer will slow a lane to: pace never reaches zero.
const MinRPS = 0.5

// Rate is a pace: starts per second and how many may run at once.
type Rate struct {
	RPS           float64
	MaxConcurrent int

	// NoBudget turns budget pacing off (YAML budget_pacing: false): the
	// lane no longer spreads a rate-limit window's remaining requests over
	// the time to its reset, and only an exhausted window (remaining 0)
	// pauses it. Budget pacing is on by default.
	NoBudget bool
	// Adaptive turns on adaptive concurrency (YAML adaptive: true): the
	// lane finds the concurrency the destination can take from its latency
	// (pacing.Adaptive), within MaxConcurrent, instead of running at
	// MaxConcurrent. Off by default; for destinations that send no pacing
	// signals.
	Adaptive bool
}

// DefaultRate is the built-in pace for upstreams with no configuration.
var DefaultRate = Rate{RPS: 2, MaxConcurrent: 1}

// Validate reports a problem with the rate, naming it by what.
func (r Rate) Validate(what string) error {
	if math.IsNaN(r.RPS) || math.IsInf(r.RPS, 0) || r.RPS < MinRPS {
		return fmt.Errorf("%s: rps must be a number >= %g, got %g", what, MinRPS, r.RPS)
	}
	if r.MaxConcurrent < 1 {
		return fmt.Errorf("%s: max_concurrent must be >= 1, got %d", what, r.MaxConcurrent)
	}
	return nil
}

// RateTable maps upstream hosts to their ceilings. Keys are "host" or
// "host:port", case-insensitive; "host:port" is matched first, then "host",
// then Defaults.
type RateTable struct {
	Defaults Rate
	Hosts    map[string]Rate
}

// For returns the configured ceiling for an upstream. Pools use Defaults.
func (t RateTable) For(u UpstreamKey) Rate {
	def := t.Defaults
	if def == (Rate{}) {
		def = DefaultRate
	}
	if u.IsPool() || len(t.Hosts) == 0 {
		return def
	}
	hostPort, host := u.Host()
	if r, ok := t.Hosts[hostPort]; ok {
		return r
	}
	if r, ok := t.Hosts[host]; ok {
		return r
	}
	return def
}

// Lookup returns the entry for u, if the table has one (defaults aside).
func (t RateTable) Lookup(u UpstreamKey) (Rate, bool) {
	if u.IsPool() || len(t.Hosts) == 0 {
		return Rate{}, false
	}
	hostPort, host := u.Host()
	if r, ok := t.Hosts[hostPort]; ok {
		return r, true
	}
	r, ok := t.Hosts[host]
	return r, ok
}

// Validate checks every entry.
func (t RateTable) Validate() error {
	var errs []error
	if t.Defaults != (Rate{}) {
		if err := t.Defaults.Validate("defaults"); err != nil {
			errs = append(errs, err)
		}
	}
	for host, r := range t.Hosts {
		if host != strings.ToLower(host) {
			errs = append(errs, fmt.Errorf("upstreams.%s: host keys must be lower case", host))
		}
		if err := r.Validate("upstreams." + host); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
