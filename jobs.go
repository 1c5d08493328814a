package mneme

// Background jobs are bounded: at most Config.MaxBackgroundJobs background
// observations and reflections run at once, across every thread. A thread
// that finds no free slot does not queue (a queue of stale work would grow
// under load): its compaction happens on the request path when the window
// reaches its trigger, extractively, and a reflection that cannot go to the
// background runs on the request path. Nothing is dropped; under overload
// the work only moves to the request that needs it.

// DefaultMaxBackgroundJobs is Config.MaxBackgroundJobs when it is 0.
const DefaultMaxBackgroundJobs = 32

// tryJobSlot takes a slot for a background job; false when all are taken.
func (m *Engine) tryJobSlot() bool {
	select {
	case m.jobSlots <- struct{}{}:
		return true
	default:
		return false
	}
}

// releaseJobSlot gives back a slot taken by tryJobSlot.
func (m *Engine) releaseJobSlot() { <-m.jobSlots }

// jobsFull reports whether every background slot is taken.
func (m *Engine) jobsFull() bool { return len(m.jobSlots) == cap(m.jobSlots) }
