package pacing

import (
	"fmt"
	"math"
	"time"
)

// Budget pacing's safety margin: a window's last BudgetReserveFraction of
// its limit (at least BudgetReserveMin requests) is never spent by the
// pacer, so clock skew, a reset reported a little early or a request the
// destination counted twice still leaves remaining above 0.
const (
	BudgetReserveFraction = 0.05
	BudgetReserveMin      = 1
)

// BudgetPacer spreads a rate-limit window's remaining requests over the
// time left until its reset, so a destination's budget lasts the window
// instead of being spent at full pace and then waited out (burst and
// stall).
//
// It knows three states. Off: no budget seen (or the destination stopped
// reporting one); it does not hold anything back. Active: a window is
// known; starts are spaced 1/rate apart, where rate = (left − reserve) ÷
// time to the reset, capped at the ceiling, and none start once left is at
// the reserve — until the reset. Probing: the window's reset has passed and
// the next window's budget is not known yet; one request goes, and the
// rest wait for its answer, which starts the new window (or, carrying no
// budget, turns the pacer off — back to the ceiling).
//
// left is the pacer's own estimate: the remaining count the last response
// reported, less the requests still in flight when it arrived (the
// destination may not have counted them yet), less every request started
// since. A later report lowers it but never raises it within a window, so
// reordered or stale answers cannot make it optimistic; a report of more
// than could possibly be left (remaining above left plus in flight plus the
// reserve, the slack for requests counted differently) means a new window
// has started, and is taken as it is. Aquifer's own traffic
// therefore never takes remaining to 0.
//
// A BudgetPacer is not safe for concurrent use; callers pass the time in.
type BudgetPacer struct {
	ceiling  float64
	state    budgetState
	limit    float64 // the window's limit: reported, else the most seen remaining
	left     float64
	resetAt  time.Time
	source   string
	inFlight int
	probeOut bool      // probing: the probe has started and not ended
	next     time.Time // no start before this (rate spacing)
	// undo is Start's previous state, for Cancel.
	undo struct {
		next     time.Time
		probeOut bool
		counted  bool
	}
}

type budgetState uint8

const (
	budgetOff budgetState = iota
	budgetActive
	budgetProbing
)

// NewBudgetPacer returns a pacer that never goes above ceiling requests
// per second (a ceiling that is not a positive finite number is 1, as in
// NewLimiter).
func NewBudgetPacer(ceiling float64) *BudgetPacer {
	b := &BudgetPacer{}
	b.SetCeiling(ceiling)
	return b
}

// SetCeiling changes the highest rate the pacer reports.
func (b *BudgetPacer) SetCeiling(rps float64) {
	if !positiveFinite(rps) {
		rps = 1
	}
	b.ceiling = rps
}

// reserve is how many requests of the window the pacer never spends.
func (b *BudgetPacer) reserve() float64 {
	return max(BudgetReserveMin, math.Ceil(BudgetReserveFraction*b.limit))
}

// refresh moves an active window whose reset has passed to probing.
func (b *BudgetPacer) refresh(now time.Time) {
	if b.state == budgetActive && !now.Before(b.resetAt) {
		b.state, b.probeOut, b.left, b.next = budgetProbing, false, 0, time.Time{}
	}
}

// spendable is what the pacer may still start in the active window.
func (b *BudgetPacer) spendable() float64 { return b.left - b.reserve() }

// Rate returns the pace the budget allows now: the ceiling unless a window
// is active; then (left − reserve) ÷ time left, capped at the ceiling, and
// 0 while only the reserve is left.
func (b *BudgetPacer) Rate(now time.Time) float64 {
	b.refresh(now)
	if b.state != budgetActive {
		return b.ceiling
	}
	s := b.spendable()
	if s < 1 {
		return 0
	}
	return min(b.ceiling, s/b.resetAt.Sub(now).Seconds())
}

// Wait reports whether a request may start now. If not, wait > 0 is how
// long until it may (the rate's spacing, or the reset when only the
// reserve is left); wait 0 means it waits for a running request to end
// (the probe of a new window).
func (b *BudgetPacer) Wait(now time.Time) (wait time.Duration, ok bool) {
	b.refresh(now)
	switch b.state {
	case budgetProbing:
		return 0, !b.probeOut
	case budgetActive:
		if b.spendable() < 1 {
			return b.resetAt.Sub(now), false
		}
		if now.Before(b.next) {
			return b.next.Sub(now), false
		}
	}
	return 0, true
}

// Start accounts for a request starting now (Wait said it may).
func (b *BudgetPacer) Start(now time.Time) {
	b.refresh(now)
	b.undo.next, b.undo.probeOut, b.undo.counted = b.next, b.probeOut, false
	b.inFlight++
	switch b.state {
	case budgetProbing:
		b.probeOut = true
	case budgetActive:
		// The spacing is taken at the rate before this start: s spendable
		// requests in T go at 0, T/s, …, (s−1)T/s, the last one before the
		// reset rather than on it.
		r := b.Rate(now)
		b.left--
		b.undo.counted = true
		if r > 0 {
			b.next = now.Add(time.Duration(float64(time.Second) / r))
		}
	}
}

// Cancel undoes the last Start: the request did not go after all.
func (b *BudgetPacer) Cancel() {
	b.inFlight = max(b.inFlight-1, 0)
	b.next, b.probeOut = b.undo.next, b.undo.probeOut
	if b.undo.counted && b.state == budgetActive {
		b.left++
	}
	b.undo.counted = false
}

// Finish accounts for a started request ending at now: answered says a
// response came back, and bud is the budget it reported (zero if none).
func (b *BudgetPacer) Finish(now time.Time, bud Budget, answered bool) {
	b.inFlight = max(b.inFlight-1, 0)
	b.refresh(now)
	if b.state == budgetProbing {
		b.probeOut = false
		if answered && !bud.Known() {
			b.state = budgetOff // the destination stopped reporting a budget
			return
		}
	}
	b.Observe(now, bud)
}

// Observe folds in a budget reported by a response to a request the pacer
// did not start (one sent around the lane). A zero Budget changes nothing.
func (b *BudgetPacer) Observe(now time.Time, bud Budget) {
	if !bud.Known() {
		return
	}
	b.refresh(now)
	est := bud.Remaining - float64(b.inFlight)
	resetAt := now.Add(bud.ResetIn)
	if b.state != budgetActive || bud.Remaining > b.left+float64(b.inFlight)+b.reserve() {
		// A new window (or the first seen): take it as reported.
		b.state, b.left, b.resetAt, b.source = budgetActive, est, resetAt, bud.Source
		b.limit = max(bud.Limit, bud.Remaining)
		b.probeOut, b.next = false, time.Time{}
		return
	}
	b.left = min(b.left, est)
	b.resetAt = maxTime(b.resetAt, resetAt)
	b.limit = max(b.limit, bud.Limit)
	b.source = bud.Source
}

// BudgetState is a pacer's state for operators.
type BudgetState struct {
	// Active: a window is known and paces starts.
	Active bool
	// Left is the pacer's estimate of the requests left in the window,
	// Limit the window's size (the most seen when not reported).
	Left, Limit float64
	ResetIn     time.Duration
	Source      string
	// RPS is the pace the budget allows now (Rate).
	RPS float64
	// Holding: only the reserve is left, nothing starts until the reset.
	Holding bool
}

// State describes the pacer at now.
func (b *BudgetPacer) State(now time.Time) BudgetState {
	r := b.Rate(now)
	if b.state != budgetActive {
		return BudgetState{RPS: r}
	}
	return BudgetState{Active: true, Left: max(b.left, 0), Limit: b.limit, ResetIn: b.resetAt.Sub(now), Source: b.source,
		RPS: r, Holding: b.spendable() < 1}
}

// Reason is the state in words, for the lane view: "budget: 37 of 100
// left, resets in 6.2s (github)".
func (s BudgetState) Reason() string {
	if !s.Active {
		return ""
	}
	return fmt.Sprintf("budget: %.0f of %.0f left, resets in %.1fs (%s)", s.Left, s.Limit, s.ResetIn.Seconds(), s.Source)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
