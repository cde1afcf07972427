//go:build unix

package storetest

import (
	"syscall"
	"time"
)

// CPUTime is the CPU time the process has used so far (user and system,
// every thread), or -1 if it cannot tell.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
