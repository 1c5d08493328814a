//go:build unix

package storetest

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time the process has used, user and system:
// what one search costs whatever else the machine runs.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// CPUTime is cpuTime for benchmarks of other packages: the CPU a piece of
// work cost this process, a figure a loaded machine does not move the way
// it moves wall time.
func CPUTime() time.Duration { return cpuTime() }
