package mneme

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/mnemehq/mneme/store"
)

// Reflection: when the memory block itself outgrows its threshold, the
// Reflector condenses the observations into one, in the background; the
// next call records the result as a reflected event.

// reflectThreshold is the memory size over which the Reflector runs: the
// policy's ReflectOver (default 0.15 of the budget; 40,000 tokens without
// one), never more than a quarter of the budget.
func reflectThreshold(p Policy, budget int) int {
	t := 40000
	if !p.ReflectOver.IsZero() && p.ReflectOver.Messages == 0 {
		t = p.ReflectOver.TokensOf(budget)
	}
	return max(1, min(t, budget/4))
}

// startReflect starts a background reflection when the memory block has
// passed its threshold and no job is in flight; it reports whether one
// runs. The result is recorded by the next call (activateReflection).
func (t *Thread) startReflect(ts *threadState) bool {
	m := t.m
	if ts.buf.running || ts.buf.reflected != nil || m.bg.Err() != nil {
		return ts.buf.running && ts.buf.reflecting
	}
	blocks := ts.st.Blocks()
	threshold := reflectThreshold(ts.policy, ts.st.Budget())
	total := 0
	for _, b := range blocks {
		total += b.Tokens
	}
	if len(blocks) == 0 || total <= threshold {
		return false
	}
	if !m.tryJobSlot() {
		return false // the next compaction tries again (compactLocked reflects inline when full)
	}
	jobCtx, cancel := context.WithCancel(m.bg)
	ts.buf.running, ts.buf.reflecting, ts.buf.cancel = true, true, cancel
	in := ReflectInput{Tenant: t.tenant, Thread: t.id, Blocks: blocks, Target: threshold / 2, Policy: ts.policy, Counter: ts.sz.c}
	m.goStateJob(ts, func() {
		defer m.releaseJobSlot()
		defer cancel()
		d, err := m.reflector.Reflect(jobCtx, in)
		ok := err == nil && jobCtx.Err() == nil && strings.TrimSpace(d.Text) != ""
		if ok {
			d.TokensAfter = in.Counter.Count(d.Text)
			ok = d.TokensAfter < total
		}
		ts.mu.Lock()
		defer ts.mu.Unlock()
		ts.buf.running, ts.buf.reflecting = false, false
		if ok && jobCtx.Err() == nil {
			ts.buf.reflected = &d
		}
	})
	return true
}

// activateReflection records a reflection finished in the background, if
// every block it replaces is still in the memory block (a block added
// since stays after it). It is a compaction step: the prefix changes.
func (t *Thread) activateReflection(ctx context.Context, ts *threadState) (*CompactEvent, error) {
	d := ts.buf.reflected
	if d == nil {
		return nil, nil
	}
	ts.buf.reflected = nil
	have := map[int64]bool{}
	for _, b := range ts.st.Blocks() {
		have[b.EventSeq] = true
	}
	for _, q := range d.Replaces {
		if !have[q] {
			return nil, nil // stale: another writer reflected or the state was rebuilt
		}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	stored, err := t.writeStep(ctx, ts, []store.Event{{Kind: store.KindReflected, Data: b}}, func() ([]store.Event, error) { return nil, nil })
	if err != nil || len(stored) == 0 {
		return nil, err
	}
	ce := &CompactEvent{Seq: stored[0].Seq, Reflected: d, Buffered: true}
	if t.m.cfg.OnCompact != nil {
		t.m.cfg.OnCompact(t.tenant, t.id, *ce)
	}
	return ce, nil
}
