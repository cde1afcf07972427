package pacing

import (
	"math"
	"time"
)

// CatchUp is how much lateness, beyond the jitter, the limiter makes up for.
// Timers on a loaded machine wake late by up to about a millisecond, and a
// caller may add up to JitterFraction of an interval on purpose (Jitter);
// forgiving both keeps the average rate exact. A gap between two starts is
// never shorter than the interval minus its jitter share minus CatchUp.
const CatchUp = 5 * time.Millisecond

// Limiter spaces event starts at 1/rate apart on a fixed grid, like GCRA with a
// burst of one. Lateness up to Forgiven() (the jitter share of an interval
// plus CatchUp) is made up by the following events, so the average rate is
// exact even when the caller wakes a little late or jitters on purpose; after
// a longer gap the grid restarts from now, so an idle lane cannot save up a
// burst.
type Limiter struct {
	rate     float64
	interval time.Duration
	tat      time.Time // theoretical arrival time: the earliest start of the next event
	hold     time.Time // no event before this (Delay), independent of the rate
}

// NewLimiter returns a limiter allowing rate events per second. A rate <= 0
// or NaN is treated as 1.
func NewLimiter(rate float64) *Limiter {
	l := &Limiter{}
	l.SetRate(rate)
	return l
}

// Rate returns the current rate in events per second.
func (l *Limiter) Rate() float64 { return l.rate }

// Interval returns the current spacing between event starts.
func (l *Limiter) Interval() time.Duration { return l.interval }

// SetRate changes the rate. The change applies to the very next event: the
// pending slot is moved so the gap since the previous event becomes the new
// interval.
func (l *Limiter) SetRate(rate float64) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		rate = 1
	}
	old := l.interval
	l.rate = rate
	if iv := float64(time.Second) / rate; iv < float64(math.MaxInt64) {
		l.interval = time.Duration(iv)
	} else {
		l.interval = math.MaxInt64 // converting iv would overflow to a negative, i.e. no pacing at all
	}
	if l.interval <= 0 {
		l.interval = 1
	}
	if !l.tat.IsZero() && old > 0 {
		// tat = previous start + old interval; re-base it on the new interval.
		l.tat = l.tat.Add(l.interval - old)
	}
}

// Take tries to start one event at now. It returns 0 when the event may start
// (and accounts for it), or how long to wait before trying again.
func (l *Limiter) Take(now time.Time) time.Duration {
	if wait := l.Wait(now); wait > 0 {
		return wait
	}
	if l.tat.IsZero() || now.Sub(l.tat) > l.Forgiven() {
		l.tat = now.Add(l.interval)
	} else {
		l.tat = l.tat.Add(l.interval)
	}
	return 0
}

// Forgiven is how late an event may start and still keep the grid.
func (l *Limiter) Forgiven() time.Duration {
	return time.Duration(JitterFraction*float64(l.interval)) + CatchUp
}

// Wait returns how long from now until an event may start, without taking it.
func (l *Limiter) Wait(now time.Time) time.Duration {
	next := l.tat
	if l.hold.After(next) {
		next = l.hold
	}
	if next.IsZero() || !now.Before(next) {
		return 0
	}
	return next.Sub(now)
}

// Delay pushes the next permitted start to at least until (used when an
// upstream says "retry after"). It never moves the next start earlier.
func (l *Limiter) Delay(until time.Time) {
	if until.After(l.hold) {
		l.hold = until
	}
}
