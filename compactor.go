package mneme

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/token"
	"github.com/mnemehq/mneme/window"
)

// ReflectInput is what a Reflector gets: the memory block's entries, all
// to be condensed into one of at most Target tokens.
type ReflectInput struct {
	Tenant, Thread string
	Blocks         []window.Block
	Target         int
	Policy         Policy
	Counter        token.Counter
}

// Reflector condenses the memory block when its observations pass the
// policy's ReflectOver. A Compactor that also implements Reflector
// reflects; otherwise the extractive Reflector does. Like a Compactor, it
// must not fail the request: it falls back and says so in Fallback.
type Reflector interface {
	Reflect(ctx context.Context, in ReflectInput) (window.ReflectedData, error)
}

// NewCompactor returns the Compactor (and Reflector) that runs compact's
// Observer and Reflector over s, with compact.Extractive as the fallback of
// every failure. s == nil observes extractively.
func NewCompactor(s compact.Summarizer) Compactor {
	return summarizerCompactor{s: s}
}

// summarizerCompactor adapts compact to the engine's interfaces.
type summarizerCompactor struct{ s compact.Summarizer }

func (c summarizerCompactor) Observe(ctx context.Context, in CompactInput) (window.CompactedData, error) {
	o := compact.Observer{Summarizer: c.s, Counter: in.Counter}
	return o.Observe(ctx, compact.Segment{
		From: in.From, To: in.To,
		Entries:   entriesOf(in.Items),
		Prior:     priorText(in.Blocks),
		MaxTokens: in.MaxTokens,
	}), nil
}

func (c summarizerCompactor) Reflect(ctx context.Context, in ReflectInput) (window.ReflectedData, error) {
	r := compact.Reflector{Summarizer: c.s, Counter: in.Counter}
	return r.Reflect(ctx, in.Blocks, in.Target), nil
}

// slow reports whether the summarizer calls a model: only then is
// buffering in the background worth a goroutine.
func (c summarizerCompactor) slow() bool {
	if c.s == nil {
		return false
	}
	_, extractive := c.s.(compact.Extractive)
	return !extractive
}

// entriesOf turns window items into the Observer's input.
func entriesOf(items []*window.Item) []compact.Entry {
	out := make([]compact.Entry, 0, len(items))
	for _, it := range items {
		out = append(out, compact.Entry{Seq: it.Seq, At: unixUTC(it.At), Ref: it.Ref, Msg: it.Msg})
	}
	return out
}

func unixUTC(sec int64) time.Time { return time.Unix(sec, 0).UTC() }

func priorText(blocks []window.Block) string {
	var b strings.Builder
	for _, bl := range blocks {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(bl.Text)
	}
	return b.String()
}

// newSummarizer builds the summarizer Config asks for: an LLM when a model
// is named, else the extractive one.
func newSummarizer(cfg compact.LLMConfig, models *token.Table) (compact.Summarizer, error) {
	if cfg.Model == "" {
		return compact.Extractive{}, nil
	}
	if cfg.Models == nil {
		cfg.Models = models
	}
	return compact.NewLLM(cfg)
}

// reflectThreshold is the memory size over which the Reflector runs: the
// policy's ReflectOver (default 40,000 tokens), never more than a quarter
// of the budget.
func reflectThreshold(p Policy, budget int) int {
	t := 40000
	if !p.ReflectOver.IsZero() && p.ReflectOver.Messages == 0 {
		t = p.ReflectOver.TokensOf(budget)
	}
	return max(1, min(t, budget/4))
}

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
	planEnd := len(p.Leaving)
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
// MinTailTurns turns, extended back to MinTailTokens): what no compaction
// cuts. 0 when the whole tail is minimum tail.
func minTailStart(tail []*window.Item, p Policy) int {
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
	stored, err := t.appendEvents(ctx, ts, []store.Event{{Kind: store.KindReflected, Data: b}}, func() ([]store.Event, error) { return nil, nil })
	if err != nil || len(stored) == 0 {
		return nil, err
	}
	ce := &CompactEvent{Seq: stored[0].Seq, Reflected: d, Buffered: true}
	if t.m.cfg.OnCompact != nil {
		t.m.cfg.OnCompact(t.tenant, t.id, *ce)
	}
	return ce, nil
}
