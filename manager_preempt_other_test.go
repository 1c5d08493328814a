//go:build !linux

package mneme

// threadPreemptions cannot tell outside Linux: every call counts as not
// preempted, so max_unpreempted_ms is the wall-clock maximum.
func threadPreemptions() int64 { return 0 }
