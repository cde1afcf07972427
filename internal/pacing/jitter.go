package pacing

import "time"

// JitterFraction is the largest jitter added to a paced wait, as a fraction of
// the interval.
const JitterFraction = 0.1

// Jitter returns a random extra wait in [0, interval*JitterFraction), drawn
// from rnd (which must return values in [0, 1)). Jitter delays one wake-up
// only: the limiter's grid does not move, so the average rate is unchanged
// while lanes and instances do not fire in lock-step.
func Jitter(interval time.Duration, rnd func() float64) time.Duration {
	if interval <= 0 || rnd == nil {
		return 0
	}
	return time.Duration(rnd() * JitterFraction * float64(interval))
}
