package mneme

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/window"
)

// Background buffering: observations of the oldest tail messages made
// ahead of time, at steps of the trigger, so that when the window reaches
// its trigger the compaction is already written and the request does not
// wait for a model (docs/design.md, the window pipeline).

// buffer holds one thread's background observations: chunks of the oldest
// messages of the tail, observed before the trigger, contiguous and oldest
// first. It is guarded by the thread state's mutex.
type buffer struct {
	running     bool               // a job is observing (exactly one per thread)
	jobFrom     int64              // the first seq the job observes
	cancel      context.CancelFunc // ends the job early once its range is stale
	level       int                // the last step of the trigger buffered since the last compaction
	compactions int                // the state's compaction count when level was set
	chunks      []window.CompactedData
	reflecting  bool                  // the job in flight is a reflection
	reflected   *window.ReflectedData // a finished reflection, to record
}

// bufferSteps divides the trigger: a job starts as usage passes each step
// (20%, 40%, 60%, 80%).
const bufferSteps = 5

// startBuffer starts a background observation when the window has passed a
// new step of its trigger: of the tail's messages not yet buffered, all but
// the minimum tail (what the next compaction will cut). The job runs under
// the Engine's background context; Close cancels and waits for it.
func (t *Thread) startBuffer(ts *threadState, req window.Request) {
	m := t.m
	if !m.buffering || ts.buf.running || m.bg.Err() != nil {
		return
	}
	if t.startReflect(ts) || ts.policy.Strategy != window.Observe {
		return
	}
	if ts.buf.compactions != ts.st.Compactions() {
		ts.buf.level, ts.buf.compactions = 0, ts.st.Compactions()
	}
	trig := max(1, ts.policy.Trigger.TokensOf(ts.st.Budget()))
	level := min(bufferSteps-1, ts.st.Used(req)*bufferSteps/trig)
	if level <= ts.buf.level {
		return
	}
	tail := ts.st.Tail()
	start := 0
	if n := len(ts.buf.chunks); n > 0 {
		i := indexOfSeq(tail, ts.buf.chunks[n-1].To)
		if i < 0 || tail[0].Seq != ts.buf.chunks[0].From {
			ts.buf.chunks, i = nil, -1
		}
		start = i + 1
	}
	end := minTailStart(tail, ts.policy)
	if end <= start {
		return
	}
	if !m.tryJobSlot() {
		return // no slot: the trigger's compaction happens on the request path
	}
	// The job gets copies: the state goes on changing under the lock.
	items := make([]*window.Item, end-start)
	for i, it := range tail[start:end] {
		c := *it
		items[i] = &c
	}
	jobCtx, cancel := context.WithCancel(m.bg)
	ts.buf.level, ts.buf.running, ts.buf.jobFrom, ts.buf.cancel = level, true, items[0].Seq, cancel
	in := CompactInput{
		Tenant: t.tenant, Thread: t.id, From: items[0].Seq, To: items[len(items)-1].Seq,
		Items: items, Catalogue: window.Catalogue(items, max(8, ts.st.Budget()/320)), Policy: ts.policy, Blocks: ts.st.Blocks(),
		Counter: ts.sz.c,
	}
	m.goStateJob(ts, func() {
		defer m.releaseJobSlot()
		defer cancel()
		// One replica buffers a thread at a time: another one holding the
		// lease means its observation will reach this one through the log.
		release, held := t.lease(jobCtx, leaseBuffer)
		if !held {
			ts.mu.Lock()
			ts.buf.running = false
			ts.mu.Unlock()
			return
		}
		defer release()
		d, err := m.compactor.Observe(jobCtx, in)
		ok := err == nil && jobCtx.Err() == nil && strings.TrimSpace(d.Text) != "" && d.Strategy == window.Observe
		if ok {
			d.From, d.To = in.From, in.To
			d.TokensAfter = in.Counter.Count(d.Text)
		}
		ts.mu.Lock()
		defer ts.mu.Unlock()
		ts.buf.running = false
		if !ok || ts.st == nil || jobCtx.Err() != nil { // cancelled: the thread was deleted or its range is stale
			return
		}
		// Kept only while it continues the buffered chunks from the tail's
		// start; activation checks again against the plan.
		tail := ts.st.Tail()
		switch n := len(ts.buf.chunks); {
		case n == 0 && (len(tail) == 0 || tail[0].Seq != d.From):
			return
		case n > 0 && indexOfSeq(tail, ts.buf.chunks[n-1].To)+1 != indexOfSeq(tail, d.From):
			return
		}
		ts.buf.chunks = append(ts.buf.chunks, d)
	})
}

// deferToBuffer reports whether a compaction may wait for the background
// job in flight: the window still fits, halfway between trigger and budget.
func (t *Thread) deferToBuffer(ts *threadState, req window.Request) bool {
	if !t.m.buffering || !ts.buf.running || ts.policy.Strategy != window.Observe {
		return false
	}
	trig, budget := ts.policy.Trigger.TokensOf(ts.st.Budget()), ts.st.Budget()
	return ts.st.Used(req) <= trig+(budget-trig)/2
}

// activateBuffer turns the buffered chunks the plan needs into compacted
// events, with no model call: the chunks must start at the tail's start
// and end on boundaries (else they are stale and dropped). A chunk that
// runs past the plan's cut is taken whole (the cut moves to its end, which
// is a boundary before the minimum tail); when the chunks stop short and
// the window would stay above the midpoint of target and trigger, the rest
// of the plan's range is observed extractively. It returns nil when the
// buffer cannot serve the plan; the caller then observes synchronously.
func (t *Thread) activateBuffer(ctx context.Context, ts *threadState, req window.Request, p *window.Plan) []store.Event {
	chunks := ts.buf.chunks
	tail := ts.st.Tail()
	if len(chunks) == 0 || len(tail) == 0 {
		return nil
	}
	if chunks[0].From != tail[0].Seq {
		ts.buf.chunks = nil // stale: the log moved past them
		return nil
	}
	// A plan that keeps the current request live inside its range (the
	// turn alone is over target) is not a run of chunks from the tail's
	// start: it is observed on the request path.
	if len(p.Kept) > 0 || p.From != tail[0].Seq {
		return nil
	}
	planEnd := indexOfSeq(tail, p.To) + 1
	var use []window.CompactedData
	cut := 0
	for _, c := range chunks {
		if cut >= planEnd || cut >= len(tail) || tail[cut].Seq != c.From {
			break
		}
		j := indexOfSeq(tail, c.To)
		if j < cut || j+1 >= len(tail) || !tail[j+1].Boundary {
			break
		}
		use, cut = append(use, c), j+1
	}
	if len(use) == 0 {
		return nil
	}
	budget := ts.st.Budget()
	trig := ts.policy.Trigger.TokensOf(budget)
	est := ts.st.Used(req)
	for _, it := range tail[:cut] {
		est -= itemCost(it)
	}
	for _, c := range use {
		est += ts.sz.Text(c.Text) + 16 // and its header in the memory block
	}
	var rest *window.CompactedData
	if mid := (ts.policy.Target.TokensOf(budget) + trig) / 2; cut < planEnd && est > mid {
		items := tail[cut:planEnd]
		cat := window.Catalogue(items, max(8, ts.st.Budget()/320))
		removed := 0
		for _, it := range items {
			removed += itemCost(it)
		}
		d := t.observe(ctx, ts, items, cat, trig-(est-removed)-100, true)
		if d.Fallback == "" {
			d.Fallback = "background observation not ready for this part: extractive"
		}
		if d.Text == "" {
			d.Text = cat
		}
		d.From, d.To = items[0].Seq, items[len(items)-1].Seq
		d.TokensBefore = removed
		est += ts.sz.Text(d.Text) + 16 - removed
		rest = &d
	}
	if est > trig {
		return nil // the buffer does not bring the window under its trigger
	}
	var evs []store.Event
	at := 0
	for _, c := range use {
		j := indexOfSeq(tail, c.To)
		sub := window.Plan{Strategy: window.Observe, From: c.From, To: c.To}
		for _, it := range tail[at : j+1] {
			sub.TokensBefore += itemCost(it)
		}
		at = j + 1
		c.TokensBefore = 0
		e, err := sub.Events(c)
		if err != nil {
			return nil
		}
		evs = append(evs, e...)
	}
	if rest != nil {
		sub := window.Plan{Strategy: rest.Strategy, From: rest.From, To: rest.To}
		e, err := sub.Events(*rest)
		if err != nil {
			return nil
		}
		evs = append(evs, e...)
	}
	return evs
}

// prune drops the chunks a compaction made stale, and cancels the job in
// flight when its range has left the tail (its result could not be used).
func (b *buffer) prune(st *window.State) {
	tail := st.Tail()
	if len(b.chunks) > 0 && (len(tail) == 0 || b.chunks[0].From != tail[0].Seq) {
		b.chunks = nil
	}
	if b.running && !b.reflecting && indexOfSeq(tail, b.jobFrom) < 0 {
		b.cancel()
	}
}

// itemCost is what an item adds to the window.
func itemCost(it *window.Item) int {
	if it.Form == window.Dropped {
		return it.PostTokens
	}
	return it.Tokens + it.PostTokens
}

func indexOfSeq(tail []*window.Item, seq int64) int {
	i, ok := slices.BinarySearchFunc(tail, seq, func(it *window.Item, q int64) int { return cmp.Compare(it.Seq, q) })
	if !ok {
		return -1
	}
	return i
}

// minTailStart is the index where the minimum tail starts (the last
// MinTailTurns turns, extended back to MinTailTokens, and never after the
// current turn's user message): what the background buffer does not
// observe. 0 when the whole tail is minimum tail.
func minTailStart(tail []*window.Item, p Policy) int {
	for i := len(tail) - 1; i >= 0; i-- {
		if tail[i].Form != window.Dropped && tail[i].Msg.StartsTurn() {
			return min(i, minTailSteps(tail, p))
		}
	}
	return minTailSteps(tail, p)
}

// minTailSteps is the start of the last MinTailTurns steps, extended back
// to MinTailTokens.
func minTailSteps(tail []*window.Item, p Policy) int {
	var cuts []int
	for i := 1; i < len(tail); i++ {
		if tail[i].Boundary {
			cuts = append(cuts, i)
		}
	}
	j := len(cuts) - p.MinTailTurns
	if j < 0 {
		return 0
	}
	suffix := 0
	for _, it := range tail[cuts[j]:] {
		suffix += itemCost(it)
	}
	for suffix < p.MinTailTokens {
		if j == 0 {
			return 0
		}
		for _, it := range tail[cuts[j-1]:cuts[j]] {
			suffix += itemCost(it)
		}
		j--
	}
	return cuts[j]
}
