package mneme

import (
	"context"
	"time"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/window"
)

// Cross-replica coordination. Several `mneme serve` replicas may share one
// store; the log's optimistic concurrency already makes every compaction
// land at most once per compaction point (a second writer gets a conflict,
// catches up and finds nothing left to do). Leases add what optimistic
// concurrency cannot: that the expensive part, the summarizer call, runs on
// one replica only. A store that is not a store.Leaser is used by one
// process: the per-thread mutex is enough there.

const (
	leaseCompact = "compact"
	leaseBuffer  = "buffer"
	// leaseWait bounds how long a request waits for another replica's
	// compaction when its own window does not fit without one.
	leaseWait = 5 * time.Second
)

// leaseTTL outlives the slowest summarizer call, so a live holder keeps its
// lease; a dead replica's lease passes on once it expires.
func (m *Engine) leaseTTL() time.Duration {
	t := m.cfg.Summarizer.Timeout
	if t <= 0 {
		t = 60 * time.Second
	}
	return 2*t + 10*time.Second
}

// lease takes the named lease on the thread. ok is true when this manager
// holds it (or the store has no leases); release gives it back.
func (t *Thread) lease(ctx context.Context, name string) (release func(), ok bool) {
	l, is := store.As[store.Leaser](t.m.store)
	if !is {
		return func() {}, true
	}
	got, err := l.TryLease(ctx, t.tenant, t.id, name, t.m.id, t.m.leaseTTL())
	if err != nil {
		// A lease we cannot read must not stop the request: optimistic
		// concurrency still guards the log.
		t.m.log.Warn("lease unavailable, going on without it", "tenant", t.tenant, "thread", t.id, "lease", name, "err", err)
		return func() {}, true
	}
	if !got {
		return func() {}, false
	}
	return func() {
		// Released on a fresh context: the request's may be done.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := l.ReleaseLease(rctx, t.tenant, t.id, name, t.m.id); err != nil {
			t.m.log.Warn("lease release failed; it will expire", "tenant", t.tenant, "thread", t.id, "lease", name, "err", err)
		}
	}, true
}

// awaitOtherCompaction is called when another replica holds the compact
// lease. If the window fits the budget as it is, the request goes on (the
// other replica's compaction reaches this one through the log on a later
// call, and the prefix stays stable meanwhile). Otherwise it waits, catching
// up from the log, until the window is back under its trigger. It reports
// whether this replica may skip compacting.
func (t *Thread) awaitOtherCompaction(ctx context.Context, ts *threadState, req window.Request) bool {
	if ts.st.Used(req) <= ts.st.Budget() {
		return true
	}
	deadline := time.Now().Add(leaseWait)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
		if err := t.catchUp(ctx, ts); err != nil {
			return false
		}
		if !ts.st.OverTrigger(req) {
			return true
		}
	}
	return false
}
