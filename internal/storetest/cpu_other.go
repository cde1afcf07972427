//go:build !unix

package storetest

import "time"

// CPUTime is -1 where the process's CPU time is not available.
func CPUTime() time.Duration { return -1 }
