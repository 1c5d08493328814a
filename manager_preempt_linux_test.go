package mneme

import "golang.org/x/sys/unix"

// threadPreemptions is how many times the kernel has switched the calling
// OS thread out involuntarily (preempted it), or -1 if it cannot tell.
func threadPreemptions() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return -1
	}
	return ru.Nivcsw
}
