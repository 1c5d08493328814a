package mneme

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/token"
	"github.com/mnemehq/mneme/window"
)

// Thread is a handle on one conversation of a tenant. Methods are safe for
// concurrent use; calls on one thread are serialised in this process and
// made safe across processes by the log's optimistic concurrency.
type Thread struct {
	m      *Engine
	tenant string
	id     string
}

// ID returns the thread's id; Tenant its tenant.
func (t *Thread) ID() string     { return t.id }
func (t *Thread) Tenant() string { return t.tenant }

// threadState is one thread's materialised window, kept in memory and
// caught up from the log on every call.
type threadState struct {
	key  threadKey
	pins int           // guarded by Engine.mu: callers and jobs using the state
	idle *list.Element // guarded by Engine.mu: in Engine.idle while pins == 0

	mu     sync.Mutex
	st     *window.State
	policy Policy // effective policy (defaults merged with policy events)
	tok    string // tokenizer name the state counts with
	sz     sizer
	buf    buffer    // background observations, see buffer.go
	snap   snapState // window snapshots, see snapshot.go
	// proj is the log as the client saw it (projection.go), caught up
	// with the state: what AppendHistory compares a history with.
	proj projector
	// gen counts the thread's deletions: a turn begun before one records
	// nothing after it.
	gen uint64
	// pending are events applied to st and proj but not yet in the log:
	// a deferred turn's request (HistoryOptions.Defer), written with its
	// reply in one durable append, or alone by the next write or by the
	// turn's Close (see deferral). Their seqs follow the log's last.
	pending []store.Event
	owner   *deferral // the turn pending belongs to
	// tried is auto-recall's last search that found nothing to show.
	tried recallTry
	// recall keeps the events auto-recall read around its hits for the
	// next requests' recalls (see keptRecall).
	recall keptRecall
}

// recallTry is an auto-recall search: for the request at Seq, at At
// compactions, the state's last seq then being Last. A window snapshot
// keeps Seq and At (snapshotEnvelope.Recall); Last is then the snapshot's.
type recallTry struct {
	Seq  int64 `json:"seq"`
	At   int   `json:"at"`
	Last int64 `json:"-"`
}

// deferral is a turn's claim on the pending events of its state (guarded
// by threadState.mu).
type deferral struct {
	// dropped: the events were taken out of the state without being
	// written (another process moved the log under them, or a write
	// failed); the turn must place its request again.
	dropped bool
}

// logSeq is the log's last seq as the state knows it: the state's, less
// the events not yet written.
func (ts *threadState) logSeq() int64 {
	return ts.st.LastSeq() - int64(len(ts.pending))
}

// CompactInput is what a Compactor gets: the messages leaving the window
// and the catalogue the deterministic strategies would record.
type CompactInput struct {
	Tenant, Thread string
	From, To       int64
	Items          []*window.Item
	Catalogue      string
	Policy         Policy
	// Blocks are the observations already in the memory block.
	Blocks []window.Block
	// Counter counts tokens as the thread's window does.
	Counter token.Counter
	// MaxTokens is the most the observation may cost and keep the window
	// under its trigger (0: no bound).
	MaxTokens int
}

// Compactor writes the text that replaces a range leaving the window (the
// observe strategy). It must not fail the request: implementations fall
// back to a deterministic summary and say so in Fallback.
type Compactor interface {
	Observe(ctx context.Context, in CompactInput) (window.CompactedData, error)
}

// WindowOptions carries what the next model call adds around the messages.
type WindowOptions struct {
	// System is a system prompt sent outside the messages (Anthropic's
	// system field); it counts toward the budget.
	System []message.Message
	// Tools are the request's tool schemas (JSON), counted toward the budget.
	Tools []json.RawMessage
	// RecallTokens overrides what the recall tools' schemas cost (default:
	// counted from their definitions); they count only when something is
	// out of the window.
	RecallTokens int
	// Policy, when set and different from the thread's, is recorded as the
	// thread's new policy before the window is built.
	Policy *Policy
	// Model, when set and different from the policy's, does the same for
	// the model alone.
	Model string
}

// load returns the thread's state, locked, caught up with the log.
func (t *Thread) load(ctx context.Context) (*threadState, error) {
	if err := backend.CheckScope(t.tenant, t.id); err != nil {
		return nil, err
	}
	ts := t.m.pin(threadKey{t.tenant, t.id})
	ts.mu.Lock()
	if err := t.catchUp(ctx, ts); err != nil {
		t.m.unlock(ts)
		return nil, err
	}
	return ts, nil
}

// clear forgets what the state materialised (after its thread was
// deleted): the next load rebuilds it from the log. The state itself stays
// in place, so that callers waiting for it and callers arriving later share
// it. A background job in flight is cancelled and its result dropped.
func (ts *threadState) clear() {
	if ts.buf.cancel != nil {
		ts.buf.cancel()
	}
	if ts.owner != nil {
		ts.owner.dropped = true
	}
	ts.pending, ts.owner = nil, nil
	ts.tried = recallTry{}
	ts.recall.drop()
	ts.st, ts.buf = nil, buffer{}
	ts.snap = snapState{writing: ts.snap.writing}
}

// reset starts the state over with policy p (from seq 0).
func (t *Thread) reset(ts *threadState, p Policy) error {
	budget, c, err := t.m.modelInfo(p)
	if err != nil {
		return err
	}
	sz := sizer{cache: t.m.tokens, c: c}
	st, err := window.NewState(p, budget, sz)
	if err != nil {
		return err
	}
	ts.st, ts.policy, ts.tok, ts.sz = st, p, c.Name(), sz
	ts.proj = newLogProjector()
	return nil
}

// catchUp applies the events after the state's last seq: O(new events).
func (t *Thread) catchUp(ctx context.Context, ts *threadState) error {
	if ts.st == nil {
		// Cold: from the window snapshot and the events after it when
		// there is a usable one, else from the whole log.
		if ok, err := t.restoreSnapshot(ctx, ts); ok || err != nil {
			return err
		}
		if err := t.reset(ts, t.m.policy); err != nil {
			return err
		}
	}
	evs, err := t.m.store.Load(ctx, t.tenant, t.id, ts.logSeq()+1, 0)
	if err != nil {
		return err
	}
	if len(ts.pending) > 0 {
		if len(evs) == 0 {
			return nil // the log is where the pending events go
		}
		// Another process wrote where the pending events were to go:
		// they cannot be written there; the state is rebuilt from the log
		// and their turn places its request again.
		ts.clear()
		return t.catchUp(ctx, ts)
	}
	return t.applyAll(ts, evs)
}

func (t *Thread) applyAll(ts *threadState, evs []store.Event) error {
	for _, ev := range evs {
		if ev.Kind == store.KindPolicy {
			if err := t.applyPolicy(ts, ev); err != nil {
				return err
			}
		}
		if err := ts.st.Apply(ev); err != nil {
			return err
		}
		ts.proj.applyEvent(&ev)
		ts.snap.last = lastOf(&ev)
	}
	return nil
}

// applyPolicy switches the state to the policy an event records. A policy
// applies from its event on; a change of tokenizer or budget rebuilds the
// state under the new policy from the start of the log, once.
func (t *Thread) applyPolicy(ts *threadState, ev store.Event) error {
	p, err := t.m.policy.MergeJSON(ev.Data)
	if err != nil {
		// A policy the log holds but this version cannot read: keep the
		// current one rather than fail every call on the thread.
		t.m.log.Warn("ignoring unreadable policy event", "tenant", t.tenant, "thread", t.id, "seq", ev.Seq, "err", err)
		return nil
	}
	if p == ts.policy {
		return nil
	}
	budget, c, err := t.m.modelInfo(p)
	if err != nil {
		return err
	}
	if err := ts.st.SetPolicy(p, budget); err != nil {
		return err
	}
	// A model with another tokenizer counts what comes from now on with
	// it; what is already counted (the log records message counts) stays.
	if c.Name() != ts.tok {
		ts.sz = sizer{cache: t.m.tokens, c: c}
		ts.tok = c.Name()
		ts.st.SetSizer(ts.sz)
	}
	ts.policy = p
	return nil
}

func (t *Thread) budgetOf(p Policy) int {
	b, _, err := t.m.modelInfo(p)
	if err != nil {
		return 0
	}
	return b
}

// appendEvents writes evs after the state's last seq, retrying on conflict
// by catching up first; then applies what was stored. replan is called
// after a conflict when the events depend on the state (compactions): it
// returns the events to write now, or nil to write nothing.
func (t *Thread) appendEvents(ctx context.Context, ts *threadState, evs []store.Event, replan func() ([]store.Event, error)) ([]store.Event, error) {
	for try := 0; ; try++ {
		// A deferred request goes first, in the same append: its reply
		// (or whatever else is written now) never lands without it.
		np := len(ts.pending)
		all := evs
		if np > 0 {
			all = append(append(make([]store.Event, 0, np+len(evs)), ts.pending...), evs...)
		}
		stored, err := t.m.store.Append(ctx, t.tenant, t.id, ts.logSeq(), all)
		if err == nil {
			if np > 0 {
				t.m.index(t.tenant, stored[:np])
				ts.pending, ts.owner = nil, nil
			}
			ts.keepForRecall(stored)
			stored = stored[np:]
			if err := t.applyAll(ts, stored); err != nil {
				return nil, err
			}
			return stored, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return nil, err
		}
		if try >= retryConflicts {
			return nil, errTooManyConflicts
		}
		before := ts.logSeq()
		if np > 0 {
			// The log moved under the pending events: they cannot go
			// where they were placed (see catchUp), and nothing may be
			// written without them. The state is rebuilt from the log;
			// the caller compares again (their turn places its request
			// again).
			ts.clear()
			if err := t.catchUp(ctx, ts); err != nil {
				return nil, err
			}
			if ts.st.LastSeq() < before {
				return nil, errLogShrank // deleted elsewhere
			}
			return nil, errPendingDropped
		}
		if err := t.catchUp(ctx, ts); err != nil {
			return nil, err
		}
		if ts.st.LastSeq() == before {
			// Nothing new after our last seq, yet the append conflicted:
			// the log is shorter than the state (deleted elsewhere).
			return nil, errLogShrank
		}
		if replan != nil {
			if evs, err = replan(); err != nil || evs == nil {
				return nil, err
			}
		}
	}
}

// errPendingDropped: an append found the log moved under a deferred
// request's events, which were dropped from the state.
var errPendingDropped = fmt.Errorf("%w: the log moved under a deferred request", store.ErrConflict)

// flushPending writes the pending events alone (their turn ends without a
// reply, or a write failed after they were applied). When they cannot be
// written the state forgets them, so that it matches the log again.
func (t *Thread) flushPending(ctx context.Context, ts *threadState) {
	if len(ts.pending) == 0 {
		return
	}
	stored, err := t.m.store.Append(ctx, t.tenant, t.id, ts.logSeq(), ts.pending)
	if err != nil {
		t.m.log.Warn("a request's messages were not logged", "tenant", t.tenant, "thread", t.id, "err", err)
		ts.clear()
		return
	}
	t.m.index(t.tenant, stored)
	ts.pending, ts.owner = nil, nil
}

// Append writes messages to the thread's log, durably, before it returns
// (I1). It returns the stored events (with their seqs and refs).
func (t *Thread) Append(ctx context.Context, msgs ...message.Message) ([]store.Event, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if err := validate(msgs); err != nil {
		return nil, err
	}
	ts, err := t.load(ctx)
	if err != nil {
		return nil, err
	}
	defer t.m.unlock(ts)
	return t.appendLocked(ctx, ts, msgs, false)
}

// appendLocked appends msgs after the state's last seq. strict refuses to
// move: when another writer appended meanwhile it returns store.ErrConflict
// instead of appending after the new tail (the caller decided what to
// append from the log as it was).
func (t *Thread) appendLocked(ctx context.Context, ts *threadState, msgs []message.Message, strict bool) ([]store.Event, error) {
	evs := make([]store.Event, len(msgs))
	at := now()
	for i := range msgs {
		m := msgs[i]
		if m.Time.IsZero() {
			m.Time = at
		}
		ref := t.m.newRef()
		// Counted by content (key ""), not by the new ref: the same message
		// in another thread (a shared system prompt, a resent history
		// starting a new thread or branch) is counted once per process.
		evs[i] = store.Event{Kind: store.KindMessage, At: m.Time, Ref: ref, Message: &m, Tokens: ts.sz.Message("", m)}
	}
	var replan func() ([]store.Event, error)
	if strict {
		replan = func() ([]store.Event, error) { return nil, store.ErrConflict }
	}
	stored, err := t.appendEvents(ctx, ts, evs, replan)
	if err == nil {
		t.m.index(t.tenant, stored)
	}
	return stored, err
}

// validate rejects messages the log must not take: an unknown role, or no
// parts at all where the role needs some.
func validate(msgs []message.Message) error {
	for i, m := range msgs {
		if !m.Role.Valid() {
			return fmt.Errorf("%w: message %d: unknown role %q", store.ErrInvalid, i, m.Role)
		}
	}
	return nil
}

// Messages returns every message of the thread, in order.
func (t *Thread) Messages(ctx context.Context) ([]message.Message, error) {
	evs, err := t.Events(ctx, 1, 0)
	if err != nil {
		return nil, err
	}
	var out []message.Message
	for _, ev := range evs {
		if ev.Kind == store.KindMessage {
			out = append(out, *ev.Message)
		}
	}
	return out, nil
}

// Events returns the thread's log from seq `from`, at most limit events
// (limit <= 0: all).
func (t *Thread) Events(ctx context.Context, from int64, limit int) ([]store.Event, error) {
	if err := backend.CheckScope(t.tenant, t.id); err != nil {
		return nil, err
	}
	return t.m.store.Load(ctx, t.tenant, t.id, from, limit)
}

// ThreadUsage is what a whole thread holds, by role and by event kind.
type ThreadUsage struct {
	Messages int64                  `json:"messages"`
	Tokens   int64                  `json:"tokens"`
	ByRole   map[message.Role]int64 `json:"tokens_by_role"`
	ByKind   map[store.Kind]int64   `json:"events_by_kind"`
	Window   Usage                  `json:"window"`
}

// Usage reports the thread's tokens by role and its events by kind, and the
// current window's usage (without compacting).
func (t *Thread) Usage(ctx context.Context) (ThreadUsage, error) {
	evs, err := t.Events(ctx, 1, 0)
	if err != nil {
		return ThreadUsage{}, err
	}
	u := ThreadUsage{ByRole: map[message.Role]int64{}, ByKind: map[store.Kind]int64{}}
	for _, ev := range evs {
		u.ByKind[ev.Kind]++
		if ev.Kind == store.KindMessage {
			u.Messages++
			u.Tokens += int64(ev.Tokens)
			u.ByRole[ev.Message.Role] += int64(ev.Tokens)
		}
	}
	ts, err := t.load(ctx)
	if err != nil {
		return u, err
	}
	defer t.m.unlock(ts)
	if w, err := ts.st.Build(window.Request{RecallTokens: t.m.recallCost.tokens(ts.sz.c, false)}); err == nil {
		u.Window = w.Usage
	}
	return u, nil
}

// Policy returns the thread's effective policy.
func (t *Thread) Policy(ctx context.Context) (Policy, error) {
	ts, err := t.load(ctx)
	if err != nil {
		return Policy{}, err
	}
	defer t.m.unlock(ts)
	return ts.policy, nil
}

// SetPolicy records p as the thread's policy from now on (a policy event).
func (t *Thread) SetPolicy(ctx context.Context, p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if _, _, err := t.m.modelInfo(p); err != nil {
		return err
	}
	ts, err := t.load(ctx)
	if err != nil {
		return err
	}
	defer t.m.unlock(ts)
	return t.setPolicyLocked(ctx, ts, p)
}

func (t *Thread) setPolicyLocked(ctx context.Context, ts *threadState, p Policy) error {
	if p == ts.policy {
		return nil
	}
	if t.budgetOf(p) <= 0 {
		return &window.FieldError{Field: "budget_tokens", Msg: "the context window must exceed reserve_output_tokens"}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = t.appendEvents(ctx, ts, []store.Event{{Kind: store.KindPolicy, Data: b}}, nil)
	return err
}

// Delete removes the thread and everything derived from it.
func (t *Thread) Delete(ctx context.Context) error {
	if err := backend.CheckScope(t.tenant, t.id); err != nil {
		return err
	}
	ts := t.m.pin(threadKey{t.tenant, t.id})
	ts.mu.Lock()
	defer t.m.unlock(ts)
	inFlight := len(ts.pending) > 0
	err := t.m.store.DeleteThread(ctx, t.tenant, t.id)
	ts.clear()
	ts.gen++ // a turn begun before the delete records nothing
	if inFlight && errors.Is(err, store.ErrNotFound) {
		// A new thread whose first request is at the model: its messages
		// wait to be written with the reply (HistoryOptions.Defer). The
		// thread exists for its client, and it is deleted: the turn
		// writes nothing.
		return nil
	}
	return err
}

// Window appends nothing, compacts when the window has passed its trigger,
// and returns the window for the next model call.
func (t *Thread) Window(ctx context.Context, opts WindowOptions) (*window.Window, error) {
	ts, err := t.load(ctx)
	if err != nil {
		return nil, err
	}
	defer t.m.unlock(ts)
	return t.windowLocked(ctx, ts, opts, false, false)
}

// AppendWindow appends msgs and returns the window in one call, under one
// lock: what the proxy does per request.
func (t *Thread) AppendWindow(ctx context.Context, msgs []message.Message, opts WindowOptions) ([]store.Event, *window.Window, error) {
	return t.appendWindow(ctx, -1, msgs, opts)
}

// AppendWindowAt is AppendWindow for a caller that chose msgs by comparing
// a history with the log up to seq after (the proxy's resend dedup): if the
// log has moved past after, in this process or another, nothing is appended
// and the error is store.ErrConflict, so the caller compares again. Two
// replicas receiving the same resent history thus append its new suffix
// once.
func (t *Thread) AppendWindowAt(ctx context.Context, after int64, msgs []message.Message, opts WindowOptions) ([]store.Event, *window.Window, error) {
	return t.appendWindow(ctx, after, msgs, opts)
}

func (t *Thread) appendWindow(ctx context.Context, after int64, msgs []message.Message, opts WindowOptions) ([]store.Event, *window.Window, error) {
	if err := validate(msgs); err != nil {
		return nil, nil, err
	}
	ts, err := t.load(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer t.m.unlock(ts)
	if after >= 0 && ts.st.LastSeq() != after {
		return nil, nil, store.ErrConflict
	}
	var stored []store.Event
	if len(msgs) > 0 {
		if stored, err = t.appendLocked(ctx, ts, msgs, after >= 0); err != nil {
			return nil, nil, err
		}
	}
	w, err := t.windowLocked(ctx, ts, opts, false, len(stored) > 0)
	return stored, w, err
}

// Compact compacts now, whatever the trigger says (the manual request), and
// returns the resulting window.
func (t *Thread) Compact(ctx context.Context, opts WindowOptions) (*window.Window, error) {
	ts, err := t.load(ctx)
	if err != nil {
		return nil, err
	}
	defer t.m.unlock(ts)
	return t.windowLocked(ctx, ts, opts, true, false)
}

func (t *Thread) request(ts *threadState, opts WindowOptions) window.Request {
	r := window.Request{RecallTokens: opts.RecallTokens}
	if r.RecallTokens == 0 {
		r.RecallTokens = t.m.recallCost.tokens(ts.sz.c, len(opts.Tools) > 0)
	}
	for _, m := range opts.System {
		// Keyed by content (the empty key): a caller may reuse or edit its
		// slice between calls, so an address says nothing about the text.
		r.SystemTokens += ts.sz.Message("", m)
	}
	if len(opts.Tools) > 0 {
		r.ToolsTokens = token.ToolsTokens(ts.sz.c, opts.Tools)
	}
	return r
}

// windowLocked compacts when over the trigger (or forced) and builds the
// window. grew says the call appended messages: only growth starts a
// background observation.
func (t *Thread) windowLocked(ctx context.Context, ts *threadState, opts WindowOptions, force, grew bool) (*window.Window, error) {
	if p := t.requestPolicy(ts, opts); p != nil {
		if err := t.setPolicyLocked(ctx, ts, *p); err != nil {
			return nil, err
		}
	}
	req := t.request(ts, opts)
	sysDelta := t.systemDelta(ts, &req)
	done, err := t.activateReflection(ctx, ts)
	if err != nil {
		return nil, err
	}
	if force || (ts.st.OverTrigger(req) && !t.deferToBuffer(ts, req)) {
		c, err := t.compactLocked(ctx, ts, req, force)
		if err != nil {
			return nil, err
		}
		if c != nil && done != nil && c.Reflected == nil {
			c.Reflected = done.Reflected
		}
		if c != nil {
			done = c
		}
	}
	dropped, err := t.autoRecall(ctx, ts, req, done != nil)
	if err != nil {
		return nil, err
	}
	w, err := ts.st.Build(req)
	if err != nil {
		return nil, err
	}
	t.applySystem(ts, w, sysDelta)
	if done != nil {
		w.Usage.Step = true
		w.Usage.Compacted = done.Compacted
		w.Usage.Reflected = done.Reflected
	} else if grew {
		t.startBuffer(ts, req)
	}
	if dropped {
		w.Usage.Step = true // stale recalled blocks left: the prefix changed
	}
	w.Usage.Evicted = ts.st.RefsByForm(window.Evicted)
	w.Usage.Masked = ts.st.RefsByForm(window.Masked)
	if t.m.cfg.OnUsage != nil {
		t.m.cfg.OnUsage(t.tenant, t.id, w.Usage)
	}
	return w, nil
}

func (t *Thread) requestPolicy(ts *threadState, opts WindowOptions) *Policy {
	p := ts.policy
	if opts.Policy != nil {
		p = *opts.Policy
	}
	if opts.Model != "" {
		p.Model = opts.Model
	}
	if p == ts.policy {
		return nil
	}
	return &p
}

// compactLocked plans a compaction, writes it to the log and applies it;
// then reflects when the memory block has grown past its threshold.
func (t *Thread) compactLocked(ctx context.Context, ts *threadState, req window.Request, force bool) (*CompactEvent, error) {
	// The lease and the early write of a deferred request guard a model
	// call (lease.go): a step that makes none takes neither, and on a
	// deferred request its events go with the request and its reply, in
	// one durable append (writeStep).
	model := t.observesWithModel(ts)
	release := func() {}
	if model {
		var ok bool
		release, ok = t.lease(ctx, leaseCompact)
		if !ok && t.awaitOtherCompaction(ctx, ts, req) {
			return nil, nil // another replica compacts this thread
		}
	}
	defer func() { release() }()
	if model && len(ts.pending) > 0 {
		// A deferred request is written before the summarizer is called:
		// had another process written the thread meanwhile, the request
		// would be dropped at the compaction's append, its observation
		// with it, and the compaction point summarized again when the
		// request is placed again. Now the conflict comes first, before
		// any model call, and the caller compares against the log again.
		if _, err := t.appendEvents(ctx, ts, nil, nil); err != nil {
			return nil, err
		}
	}
	buffered := false
	var memo *window.CompactedData
	plan := func() ([]store.Event, *window.Plan, error) {
		var p *window.Plan
		var err error
		if memo != nil { // after a conflict: keep the observed cut if it holds
			p, err = ts.st.PlanUpTo(req, memo.To)
		}
		if p == nil && err == nil {
			p, err = ts.st.Plan(req)
		}
		if err != nil || p.Empty() {
			return nil, p, err
		}
		if p.From > 0 && p.Strategy == window.Observe {
			if evs := t.activateBuffer(ctx, ts, req, p); evs != nil {
				buffered = true
				return evs, p, nil
			}
			// A conflict that leaves the cut where it was (another writer
			// only appended) reuses the observation: the summarizer is
			// called once per compaction point.
			if memo != nil && memo.From == p.From && memo.To == p.To {
				evs, err := p.Events(*memo)
				return evs, p, err
			}
			catTok := ts.sz.Text(p.Catalogue)
			// The recalled block is chosen again after the step, in what
			// the observation leaves: it takes no room from it.
			room := ts.policy.Trigger.TokensOf(ts.st.Budget()) - (p.UsedAfter - catTok - ts.st.RecalledTokens()) - 100
			// With buffering on, the request path never waits for the
			// model: what the buffer cannot serve is observed extractively.
			d := t.observe(ctx, ts, p.Leaving, p.Catalogue, room, t.m.buffering)
			if t.m.buffering && d.Fallback == "" {
				d.Fallback = "no background observation ready: extractive"
			}
			d.From, d.To = p.From, p.To
			memo = &d
			evs, err := p.Events(d)
			return evs, p, err
		}
		evs, err := p.Events(window.CompactedData{Strategy: p.Strategy})
		return evs, p, err
	}
	// Long-term memories are chosen here, with the compaction, so that the
	// memory block changes only at compaction points (I6).
	mem := t.injectMemories(ctx, ts)
	withMemories := func(evs []store.Event) []store.Event {
		if len(evs) == 0 || mem == ts.st.Injected() {
			return evs
		}
		b, _ := json.Marshal(window.NoteData{Memories: &mem})
		return append(evs, store.Event{Kind: store.KindNote, Data: b})
	}
	evs, p, err := plan()
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	stored, err := t.writeStep(ctx, ts, withMemories(evs), func() ([]store.Event, error) {
		if !force && !ts.st.OverTrigger(req) {
			return nil, nil // another writer compacted already
		}
		buffered = false
		evs, p2, err := plan()
		p = p2
		return withMemories(evs), err
	})
	if err != nil || len(stored) == 0 {
		return nil, err
	}
	ce := &CompactEvent{Seq: stored[len(stored)-1].Seq, Masked: len(p.Mask), Buffered: buffered}
	for _, ev := range stored {
		if ev.Kind == store.KindCompacted {
			var d window.CompactedData
			if json.Unmarshal(ev.Data, &d) == nil {
				if c := ce.Compacted; c != nil { // several buffered parts: report them as one
					c.To, c.Text = d.To, c.Text+"\n"+d.Text
					c.TokensBefore += d.TokensBefore
					c.TokensAfter += d.TokensAfter
					c.DurationMS += d.DurationMS
					c.CostUSD += d.CostUSD
					if c.Fallback == "" {
						c.Fallback = d.Fallback
					}
					continue
				}
				ce.Compacted = &d
			}
		}
	}
	ts.buf.prune(ts.st)
	if t.m.buffering && !t.m.jobsFull() {
		t.startReflect(ts) // the model condenses in the background
	} else if r, err := t.reflectInline(ctx, ts, model, &release); err != nil {
		return nil, err
	} else if r != nil {
		ce.Reflected, ce.Seq = r, ts.st.LastSeq()
	}
	if t.m.cfg.OnCompact != nil {
		t.m.cfg.OnCompact(t.tenant, t.id, *ce)
	}
	return ce, nil
}

// observe asks the Compactor for observations of items; when it fails or
// its observation would not fit under the trigger, the catalogue stands in
// and the event says why (I5). extractive skips the model (the request
// path must not wait for it).
//
// room is what the observation may cost and keep the window under its
// trigger; catalogue is the items' deterministic rendering.
func (t *Thread) observe(ctx context.Context, ts *threadState, items []*window.Item, catalogue string, room int, extractive bool) window.CompactedData {
	catTok := ts.sz.Text(catalogue)
	maxTok := max(200, room)
	in := CompactInput{
		Tenant: t.tenant, Thread: t.id, From: items[0].Seq, To: items[len(items)-1].Seq,
		Items: items, Catalogue: catalogue, Policy: ts.policy, Blocks: ts.st.Blocks(),
		Counter: ts.sz.c, MaxTokens: maxTok,
	}
	start := time.Now()
	c := t.m.compactor
	if extractive {
		c = NewCompactor(nil)
	}
	d, err := c.Observe(ctx, in)
	switch {
	case err != nil || strings.TrimSpace(d.Text) == "":
		cause := "empty observation"
		if err != nil {
			cause = err.Error()
		}
		return window.CompactedData{Strategy: window.Mask, Fallback: "compactor failed: " + cause + ": catalogue", DurationMS: time.Since(start).Milliseconds()}
	case ts.sz.Text(d.Text) > maxTok && ts.sz.Text(d.Text) > catTok:
		return window.CompactedData{Strategy: window.Mask, Fallback: fmt.Sprintf("observation of %d tokens does not fit the %d left under the trigger: catalogue", ts.sz.Text(d.Text), maxTok), DurationMS: time.Since(start).Milliseconds()}
	}
	if d.DurationMS == 0 {
		d.DurationMS = time.Since(start).Milliseconds()
	}
	d.Strategy = window.Observe
	d.TokensAfter = ts.sz.Text(d.Text)
	return d
}

// reflectLocked condenses the memory block when it has passed its
// threshold: one reflected event replacing every block. It returns nil when
// there was nothing to do (or another writer moved the log meanwhile: the
// next compaction tries again).
func (t *Thread) reflectLocked(ctx context.Context, ts *threadState) (*window.ReflectedData, error) {
	blocks := ts.st.Blocks()
	threshold := reflectThreshold(ts.policy, ts.st.Budget())
	total := 0
	for _, b := range blocks {
		total += b.Tokens
	}
	if len(blocks) == 0 || total <= threshold {
		return nil, nil
	}
	d, err := t.m.reflector.Reflect(ctx, ReflectInput{Tenant: t.tenant, Thread: t.id, Blocks: blocks, Target: threshold / 2, Policy: ts.policy, Counter: ts.sz.c})
	if err != nil || strings.TrimSpace(d.Text) == "" || ts.sz.Text(d.Text) >= total {
		t.m.log.Warn("reflection skipped", "tenant", t.tenant, "thread", t.id, "err", err)
		return nil, nil
	}
	d.TokensAfter = ts.sz.Text(d.Text)
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	stored, err := t.writeStep(ctx, ts, []store.Event{{Kind: store.KindReflected, Data: b}}, func() ([]store.Event, error) { return nil, nil })
	if err != nil || len(stored) == 0 {
		return nil, err
	}
	return &d, nil
}

// Inspect runs f on the thread's materialised window state, caught up with
// the log, under the thread's lock: how the inspector and the API read the
// forms of messages and the memory block without building or compacting a
// window. f must not keep st or call back into the thread.
func (t *Thread) Inspect(ctx context.Context, f func(st *window.State) error) error {
	ts, err := t.load(ctx)
	if err != nil {
		return err
	}
	defer t.m.unlock(ts)
	return f(ts.st)
}

// RunningJobs returns how many background jobs (buffered observations,
// reflections, the embedding indexer) are running now.
func (m *Engine) RunningJobs() int { return int(m.running.Load()) }
