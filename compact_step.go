package mneme

import (
	"context"
	"errors"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/window"
)

// Writing a window step: a compaction, a reflection or a recalled block.
// On a deferred request (HistoryOptions.Defer: its messages are applied to
// the state and pending, written with the reply) a step's events join
// them, in the same durable append, unless a model call went into them on
// the request path: then the request is written first, as it always was,
// so that a conflict is found before the model is paid for, and the
// compaction lease (lease.go) is taken for it. On SQLite a masking
// compaction of a deferred request wrote the request, took and gave back
// the lease, wrote the compaction and then the recalled block, each in a
// commit with its fsync, before the reply's own: five commits more than a
// request without a step (BenchmarkProxyLatency, sqlite/500: the
// compacted requests' CPU three times the steady ones').

// observesWithModel reports whether a compaction of ts may call a model on
// the request path: the observe strategy without buffering (with it, the
// request path observes extractively), with a compactor that is not the
// extractive one.
func (t *Thread) observesWithModel(ts *threadState) bool {
	return ts.policy.Strategy == window.Observe && !t.m.buffering && callsModel(t.m.compactor)
}

// callsModel reports whether a compactor or reflector may call a model:
// any but the engine's own over the extractive summarizer.
func callsModel(c any) bool {
	sc, ok := c.(summarizerCompactor)
	return !ok || sc.slow()
}

// writeStep writes a step's events that no model call made on this
// request path: into a deferred request's pending events when there is
// one (applied to the state as the log will hold them), else to the log
// now (appendEvents, replan on a conflict). It returns the events as
// stored (or as they will be).
func (t *Thread) writeStep(ctx context.Context, ts *threadState, evs []store.Event, replan func() ([]store.Event, error)) ([]store.Event, error) {
	if ts.owner == nil || len(ts.pending) == 0 || len(evs) == 0 {
		return t.appendEvents(ctx, ts, evs, replan)
	}
	for _, ev := range evs {
		if ev.Message != nil {
			return nil, errors.New("mneme: a window step's event carries a message")
		}
	}
	return t.pend(ts, evs)
}

// reflectInline reflects on the request path (reflectLocked) when the
// memory block is past its threshold. A reflector that calls a model gets
// what a compaction's model call gets: the lease, when the compaction did
// not take it (leased; release is then set to give it back), and a
// deferred request written first.
func (t *Thread) reflectInline(ctx context.Context, ts *threadState, leased bool, release *func()) (*window.ReflectedData, error) {
	if !reflectDue(ts) {
		return nil, nil
	}
	if callsModel(t.m.reflector) {
		if !leased {
			r, ok := t.lease(ctx, leaseCompact)
			if !ok {
				return nil, nil // another replica compacts: the next compaction tries again
			}
			*release = r
		}
		if len(ts.pending) > 0 {
			if _, err := t.appendEvents(ctx, ts, nil, nil); err != nil {
				return nil, err
			}
		}
	}
	return t.reflectLocked(ctx, ts)
}

// reflectDue reports whether the memory block has passed its threshold.
func reflectDue(ts *threadState) bool {
	blocks := ts.st.Blocks()
	total := 0
	for _, b := range blocks {
		total += b.Tokens
	}
	return len(blocks) > 0 && total > reflectThreshold(ts.policy, ts.st.Budget())
}
