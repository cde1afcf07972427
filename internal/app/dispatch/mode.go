package dispatch

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

// Lane modes: what holds a lane's pace now (LaneStats.Mode), for the lane
// view and /metrics.
const (
	// ModeStatic: the lane runs at its configured ceiling; nothing the
	// destination said holds it lower.
	ModeStatic = "static"
	// ModeSignalled: a load signal (X-Aqueduct-*, ORCA, a 503 Retry-After)
	// holds the pace below the ceiling.
	ModeSignalled = "signalled"
	// ModeBudget: a rate-limit window's remaining requests, spread over the
	// time to its reset, hold the pace below the lane's.
	ModeBudget = "budget"
	// ModeAdaptive: adaptive concurrency holds the lane's concurrency.
	ModeAdaptive = "adaptive"
)

// Modes lists every lane mode, in the order mode gives them precedence.
var Modes = []string{ModeBudget, ModeSignalled, ModeAdaptive, ModeStatic}

// mode names what holds the lane's pace now, and why in words. The
// precedence is budget, signalled, adaptive, static: a rate-limit budget
// is a hard limit on what the destination will take, load signals are its
// own word on what it can take, and adaptive concurrency is Aquifer's guess
// for a destination that says nothing. Runs on the lane's goroutine.
func (l *lane) mode() (name, reason string) {
	now := l.d.cfg.Clock.Now()
	if reason := l.budgetReason(now); reason != "" {
		return ModeBudget, reason
	}
	if id := l.upstream.PoolID(); id != "" {
		if reason := l.d.pools.BudgetReason(id); reason != "" {
			return ModeBudget, reason
		}
	}
	ceilRPS, ceilConc := l.pace.Ceiling()
	if now.Before(l.heldUntil) {
		return ModeSignalled, fmt.Sprintf("signalled: a 503 Retry-After holds the lane for %.1fs", l.heldUntil.Sub(now).Seconds())
	}
	if (l.pace.RPS() < ceilRPS || l.pace.MaxConcurrent() < ceilConc) && l.pacedBy != "" {
		return ModeSignalled, fmt.Sprintf("signalled: %s holds %s rps, %d concurrent (ceiling %s rps, %d)", l.pacedBy,
			fmtRate(l.pace.RPS()), l.pace.MaxConcurrent(), fmtRate(ceilRPS), ceilConc)
	}
	if l.adaptiveReason != "" {
		return ModeAdaptive, l.adaptiveReason
	}
	if l.upstream.IsPool() {
		return ModeStatic, fmt.Sprintf("static: the pool's live capacity, %s rps, %d concurrent", fmtRate(ceilRPS), ceilConc)
	}
	return ModeStatic, fmt.Sprintf("static: the configured ceiling, %s rps, %d concurrent", fmtRate(ceilRPS), ceilConc)
}

// modeRefresh is how long the published mode may be reused: the stats
// are published on every turn of the lane's loop, and the reason is
// formatted text, too dear to redo thousands of times a second. The lane
// view works it out afresh (detail).
const modeRefresh = 250 * time.Millisecond

// cachedMode is mode, worked out again at most every modeRefresh.
func (l *lane) cachedMode(now time.Time) (name, reason string) {
	if l.modeAt.IsZero() || now.Sub(l.modeAt) >= modeRefresh || now.Before(l.modeAt) {
		l.modeName, l.modeReason = l.mode()
		l.modeAt = now
	}
	return l.modeName, l.modeReason
}

// budgetReason describes the tightest queue budget that holds the lane
// below its pace ("" when none does): the one allowing the lowest rate.
func (l *lane) budgetReason(now time.Time) string {
	var tight pacing.BudgetState
	found, held := false, 0
	for _, q := range l.order {
		if q.budget == nil {
			continue
		}
		st := q.budget.State(now)
		if !st.Active || (!st.Holding && st.RPS >= l.pace.RPS()) {
			continue
		}
		held++
		if !found || st.RPS < tight.RPS {
			tight, found = st, true
		}
	}
	if !found {
		return ""
	}
	reason := tight.Reason()
	if tight.Holding {
		reason += ", holding the reserve"
	} else {
		reason += fmt.Sprintf(", pacing %s rps", fmtRate(tight.RPS))
	}
	if held > 1 {
		reason += fmt.Sprintf("; %d queues on a budget", held)
	}
	return reason
}

// fmtRate renders a rate for a reason: at most two decimals, no trailing
// zeros.
func fmtRate(r float64) string { return strconv.FormatFloat(math.Round(r*100)/100, 'f', -1, 64) }
