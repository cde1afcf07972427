//go:build !unix

package pebble_test

import "time"

// cpuTime is not measured here.
func cpuTime() time.Duration { return -1 }
