//go:build !unix

package storetest

import "time"

// cpuTime is unknown here: the CPU figures read 0.
func cpuTime() time.Duration { return 0 }

// CPUTime is unknown here: it reads 0.
func CPUTime() time.Duration { return 0 }
