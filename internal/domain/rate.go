package domain

import (
	"fmt"
	"math"
)

// MinRPS is the lowest pace Aquifer will slow a lane to: pace never reaches zero.
const MinRPS = 0.5

// Rate is a pace: starts per second and how many may run at once.
type Rate struct {
	RPS           float64
	MaxConcurrent int
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
