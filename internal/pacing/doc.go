// Package pacing holds Aquifer's pure pacing algorithms: a start-spacing rate
// limiter whose rate can change at any moment, a concurrency gate whose limit
// can change, and jitter. Nothing here starts goroutines, sleeps or reads the
// clock: callers pass the current time in, and get back how long to wait. That
// makes every algorithm deterministic under test.
//
// The types are not safe for concurrent use; each lane owns its own.
package pacing
