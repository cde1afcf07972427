package pacing

// Gate bounds how many events run at once. Its limit can change at any time;
// lowering it below the number running lets those finish and admits no more
// until the count drops under the new limit.
type Gate struct {
	limit   int
	running int
}

// NewGate returns a gate admitting limit events at once (at least 1).
func NewGate(limit int) *Gate { return &Gate{limit: max(limit, 1)} }

// Limit returns the current limit.
func (g *Gate) Limit() int { return g.limit }

// Running returns how many events hold the gate.
func (g *Gate) Running() int { return g.running }

// SetLimit changes the limit (at least 1).
func (g *Gate) SetLimit(limit int) { g.limit = max(limit, 1) }

// Open reports whether one more event may start.
func (g *Gate) Open() bool { return g.running < g.limit }

// Acquire takes a slot if one is free and reports whether it did.
func (g *Gate) Acquire() bool {
	if !g.Open() {
		return false
	}
	g.running++
	return true
}

// Release frees a slot taken by Acquire.
func (g *Gate) Release() {
	if g.running > 0 {
		g.running--
	}
}
