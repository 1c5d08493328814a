package backend

import "sync"

// Background runs a store's upkeep (an index's queue moved, a pending
// list merged) beside the calls that asked for it: one run at a time, none
// after Stop. The zero value is ready to use.
type Background struct {
	mu      sync.Mutex
	closed  bool
	running bool
	wg      sync.WaitGroup
}

// Start runs fn in a goroutine of its own unless a run is under way or
// Stop was called, and reports whether it did. before, when not nil, runs
// first under the same lock, only when fn will run.
func (b *Background) Start(before, fn func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.running {
		return false
	}
	if before != nil {
		before()
	}
	b.running = true
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn()
		b.mu.Lock()
		b.running = false
		b.mu.Unlock()
	}()
	return true
}

// Stop starts no run after it and waits for the one under way.
func (b *Background) Stop() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}

// Wait waits for the run under way, if any (tests).
func (b *Background) Wait() { b.wg.Wait() }
