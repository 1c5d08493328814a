package mneme

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/window"
)

// Histories and branches.
//
// A client in resend mode sends its whole history every time.
// AppendHistory compares it with the thread's projection (projection.go),
// kept in the thread's state as it catches up: when the log is a prefix of
// the history, only the rest is appended. When the history diverges from
// the log (an edited message, a regenerated answer), the request goes to a
// branch: a child thread that starts with a note naming its parent and a
// copy of the common prefix; the parent is never touched. A branch's id is
// a function of its parent, the common prefix and the first unit that
// differs, so siblings diverging at one point are all children of the
// parent, and the next request of a branch finds it again in as many steps
// as the branch itself has divergences. Nothing bounds that walk but the
// history: each step matches a longer prefix.
//
// A history that is a strict prefix of the log (a re-run of a prompt, a
// retry, "regenerate") has nothing new to log: its window is built from the
// log's prefix, and the reply decides where it goes. A reply equal to the
// one the log holds next is already there; another one starts the branch
// named by it.

// ErrDeleted says the thread was deleted while the request was in flight:
// what the request would have recorded belongs to the deleted thread and
// is not written (a deleted thread stays deleted).
var ErrDeleted = errors.New("mneme: the thread was deleted during the request")

// errLogShrank: an append found the log shorter than the state (deleted
// by another process).
var errLogShrank = errors.New("mneme: the log is shorter than its state")

// errParentGone: the parent's prefix could not be copied in full.
var errParentGone = errors.New("mneme: the parent thread is gone")

// maxHistoryConflicts bounds how often one request compares again after
// another writer moved the log under it.
const maxHistoryConflicts = 1000

// HistoryOptions says how AppendHistory reads its messages.
type HistoryOptions struct {
	// Window is what the next model call adds around the messages.
	Window WindowOptions
	// Append: the messages are new, appended after the log as they are
	// (after their tool results are checked against it). Otherwise they
	// are the whole history as the client sees it, and only what the log
	// lacks is appended.
	Append bool
	// Defer writes the request's messages with the reply: Record appends
	// them and the reply in one durable append (one fsync per request,
	// not two), and Close appends them alone when no reply was recorded
	// (the upstream failed, the client went away), so the log holds every
	// request that was answered or failed, and never a reply without its
	// request. Until then they are in the thread's state, not in the log:
	// a crash loses them, and with them nothing that was acknowledged
	// (the client has had no reply). When another process writes the
	// thread meanwhile, the request is compared with the log again at
	// Record. Without Defer the messages are in the log when
	// AppendHistory returns.
	Defer bool
}

// Turn is one request's place in a thread: the branch it landed on, what
// it appended and the window for its model call. Continue and Record
// carry on the same turn. A Turn is used by one goroutine.
type Turn struct {
	m      *Engine
	tenant string
	branch string       // the thread the turn writes to
	ts     *threadState // its state (the parent's while a re-run), pinned until Close
	gen    uint64       // ts.gen when the turn began
	closed bool
	parent string
	// at is the log's last seq after the turn's own writes; hist the
	// history it compared (resend mode). A reply finding the log moved
	// past at (a concurrent request of the same history answered first)
	// is placed as a re-run's is, so no reply lands after another.
	at    int64
	hist  []message.Message
	extra []message.Message // what Continue appended
	opts  WindowOptions
	// def is the turn's claim on its deferred request (nil: written
	// already); req the messages of an append-mode request, to place
	// again if the claim is dropped.
	def *deferral
	req []message.Message

	// Appended are the events the request added to the log.
	Appended []store.Event
	// Window is the window for the next model call.
	Window *window.Window
	// SystemChanged: the request brought a new system prompt, recorded as
	// a system event (the window's prefix changed).
	SystemChanged bool

	re *rerun
}

// rerun is a turn whose history is a strict prefix of the log: the window
// is built in memory from the log's prefix; nothing is written until the
// reply says which branch it belongs to.
type rerun struct {
	parent  *Thread
	through int64
	hist    []message.Message // the request's history
	prefix  []unit            // its units: the log's first k
	copies  []store.Event     // the parent's events up to through
	system  *[]message.Message
	ps      *threadState // private state, never written to the store
	extra   []message.Message
	logged  bool // extra is in copies already (a landed turn placed late)
}

// Thread returns the id of the thread the turn writes to (the parent's,
// while a re-run has not recorded its reply).
func (x *Turn) Thread() string {
	if x.re != nil {
		return x.re.parent.id
	}
	return x.branch
}

// ForkedFrom returns the parent of the branch the request landed on ("" when
// it landed on the thread it named). A re-run names the thread whose
// prefix it re-runs.
func (x *Turn) ForkedFrom() string {
	if x.re != nil {
		return x.re.parent.id
	}
	return x.parent
}

// AppendHistory appends what the log lacks of msgs (all of them with
// opts.Append) and returns the turn with its window. The appended messages
// are in the log when it returns (I1). Invalid tool results (an orphan, a
// second answer, a late answer to a call already closed, a reused call id)
// are refused with store.ErrInvalid before anything is written; so is a
// new thread whose first request cannot fit its budget.
func (t *Thread) AppendHistory(ctx context.Context, msgs []message.Message, o HistoryOptions) (*Turn, error) {
	if err := validate(msgs); err != nil {
		return nil, err
	}
	if err := backend.CheckScope(t.tenant, t.id); err != nil {
		return nil, err
	}
	if o.Append {
		return t.appendTurn(ctx, msgs, o.Window, o.Defer)
	}
	req := t.m.requests.project(threadKey{t.tenant, t.id}, msgs)
	in := req.units
	sys := req.system
	lead := leadingSystem(msgs)
	cur, parent := t, ""
	conflicts := 0
	for {
		ts, err := cur.lockWarm(ctx)
		if err != nil {
			return nil, err
		}
		have := ts.proj.result()
		k := 0
		for k < len(have) && k < len(in) && have[k].h == in[k].h {
			k++
		}
		var fresh []message.Message
		land := false
		switch {
		case ts.st.LastSeq() == 0:
			land, fresh = true, msgs
		case k == len(have):
			land = true
			switch {
			case k == 0:
				fresh = msgs[lead:]
			case k < len(in):
				fresh = msgs[in[k-1].last+1:]
			}
		case k == len(have)-1 && k < len(in) && ts.proj.open && have[k].kind == in[k].kind:
			// The log ends in an open run the request's run extends.
			if mi, pi, ok := runExtends(ts.proj.openCanon(), in[k].kind, msgs, in[k].first, in[k].last); ok {
				land = true
				if pi > 0 {
					m := msgs[mi]
					m.Parts = m.Parts[pi:]
					fresh = append([]message.Message{m}, msgs[mi+1:]...)
				} else {
					fresh = msgs[mi:]
				}
			}
		}
		if land {
			var sysChange *[]message.Message
			if ts.st.LastSeq() > 0 && systemKey(sys) != systemKey(ts.proj.system) {
				sysChange = &sys
			}
			x, err := cur.land(ctx, ts, fresh, sysChange, o.Window, o.Defer)
			if errors.Is(err, store.ErrConflict) || errors.Is(err, errLogShrank) {
				if errors.Is(err, errLogShrank) {
					ts.shrank() // deleted elsewhere: begin again from the log
				}
				t.m.unlock(ts)
				if conflicts++; conflicts > maxHistoryConflicts {
					return nil, errTooManyConflicts
				}
				continue
			}
			t.m.unlock(ts)
			if err != nil {
				return nil, err
			}
			x.parent, x.hist = parent, msgs
			return x, nil
		}
		if k < len(in) {
			// The history diverges from the log after k units: its branch.
			var through int64
			if k > 0 {
				through = have[k-1].last
			}
			t.m.unlock(ts)
			child := t.m.Thread(cur.tenant, branchID(cur.id, append(in[:k:k], headUnit(msgs, in[k]))))
			if err := child.startBranch(ctx, cur.id, through); err != nil {
				if errors.Is(err, errParentGone) {
					cur, parent = t, "" // the parent went away: begin again
					continue
				}
				return nil, err
			}
			parent, cur = cur.id, child
			continue
		}
		// A strict prefix of the log: a re-run.
		var through int64
		if k > 0 {
			through = have[k-1].last
		}
		t.m.pinAgain(ts) // the turn holds it
		gen := ts.gen
		t.m.unlock(ts)
		x, err := cur.startRerun(ctx, msgs, in[:k], sys, through, o.Window)
		if err != nil {
			t.m.unpin(ts)
			if errors.Is(err, errParentGone) {
				cur, parent = t, ""
				continue
			}
			return nil, err
		}
		x.ts, x.gen = ts, gen
		return x, nil
	}
}

// leadingSystem returns how many system messages open msgs.
func leadingSystem(msgs []message.Message) int {
	n := 0
	for n < len(msgs) && msgs[n].Role == message.System {
		n++
	}
	return n
}

// lockWarm returns the thread's state, locked. A state already in memory
// is trusted without reading the log: the appends are conditional on the
// state's last seq, so a log that moved (another process) shows as a
// conflict, and the caller catches up then. A cold state is loaded.
func (t *Thread) lockWarm(ctx context.Context) (*threadState, error) {
	ts := t.m.pin(threadKey{t.tenant, t.id})
	ts.mu.Lock()
	if ts.st == nil {
		if err := t.catchUp(ctx, ts); err != nil {
			t.m.unlock(ts)
			return nil, err
		}
	}
	if ts.proj.broken {
		if err := t.rebuildProjection(ctx, ts); err != nil {
			t.m.unlock(ts)
			return nil, err
		}
	}
	return ts, nil
}

// shrank forgets a state whose log was deleted by another process: the
// next use rebuilds it, and turns begun before record nothing.
func (ts *threadState) shrank() {
	ts.clear()
	ts.gen++
}

// rebuildProjection reads the projection from the whole log (a state that
// did not come from applying the log from seq 1).
func (t *Thread) rebuildProjection(ctx context.Context, ts *threadState) error {
	evs, err := t.m.store.Load(ctx, t.tenant, t.id, 1, int(ts.logSeq()))
	if err != nil {
		return err
	}
	ts.proj = newLogProjector()
	for i := range evs {
		ts.proj.applyEvent(&evs[i])
	}
	for i := range ts.pending {
		ts.proj.applyEvent(&ts.pending[i])
	}
	if ts.proj.lastSeq != ts.st.LastSeq() {
		return fmt.Errorf("mneme: thread %s: the log ends at %d, its state at %d", t.id, ts.proj.lastSeq, ts.st.LastSeq())
	}
	return nil
}

// messageEvents makes the events of msgs, with refs and token counts.
func (t *Thread) messageEvents(sz sizer, msgs []message.Message) []store.Event {
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
		evs[i] = store.Event{Kind: store.KindMessage, At: m.Time, Ref: ref, Message: &m, Tokens: sz.Message("", m)}
	}
	return evs
}

// land appends fresh (after a system event when sys is set) exactly after
// the state's last seq and builds the window; store.ErrConflict when the
// log moved meanwhile. ts is locked by the caller. With deferred (and no
// other turn's request pending on the state) the events are applied to
// the state and written later, with the reply (HistoryOptions.Defer).
func (t *Thread) land(ctx context.Context, ts *threadState, fresh []message.Message, sys *[]message.Message, opts WindowOptions, deferred bool) (*Turn, error) {
	var evs []store.Event
	if sys != nil {
		b, err := json.Marshal(historyNote{System: sys})
		if err != nil {
			return nil, err
		}
		evs = append(evs, store.Event{Kind: store.KindNote, Data: b})
	}
	// A request that changes the thread's policy (its model) records the
	// policy with its messages, before them: one append instead of two (a
	// new thread's first request brings its model), and the messages are
	// counted and checked under the policy they are sent with. A policy
	// the engine cannot use is left to windowLocked, which says why.
	pol, sz, budget := ts.policy, ts.sz, ts.st.Budget()
	if p := t.requestPolicy(ts, opts); p != nil && len(fresh) > 0 {
		if b, c, err := t.m.modelInfo(*p); err == nil && b > 0 {
			data, err := json.Marshal(*p)
			if err != nil {
				return nil, err
			}
			evs = append(evs, store.Event{Kind: store.KindPolicy, Data: data})
			pol, budget = *p, b
			if c.Name() != ts.tok {
				sz = sizer{cache: t.m.tokens, c: c}
			}
		}
	}
	msgEvs := t.messageEvents(sz, fresh)
	if err := t.checkFits(ctx, ts, pol, budget, msgEvs, opts); err != nil {
		return nil, err
	}
	evs = append(evs, msgEvs...)
	var stored []store.Event
	var def *deferral
	switch {
	case len(evs) > 0 && deferred && len(ts.pending) == 0:
		var err error
		if stored, err = t.deferEvents(ts, evs); err != nil {
			return nil, err
		}
		def = &deferral{}
		ts.owner = def
	case len(evs) > 0:
		var err error
		stored, err = t.appendEvents(ctx, ts, evs, func() ([]store.Event, error) { return nil, store.ErrConflict })
		if err != nil {
			return nil, err
		}
		t.m.index(t.tenant, stored)
	default:
		if err := t.catchUp(ctx, ts); err != nil {
			// Nothing to write: read what other processes wrote, so the
			// window is current.
			return nil, err
		}
	}
	w, err := t.windowLocked(ctx, ts, opts, false, len(msgEvs) > 0)
	if err != nil {
		if def != nil && ts.owner == def {
			// The request fails before its model call: its messages are
			// logged as they would have been without deferral.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			t.flushPending(fctx, ts)
			cancel()
		}
		return nil, err
	}
	if sys != nil {
		w.Usage.Step = true // the prefix changed
	}
	t.m.pinAgain(ts) // the turn holds it until Close
	return &Turn{m: t.m, tenant: t.tenant, branch: t.id, ts: ts, gen: ts.gen, at: ts.st.LastSeq(), opts: opts, Appended: stored, Window: w, SystemChanged: sys != nil, def: def}, nil
}

// flushTimeout bounds writing a deferred request alone, once its turn is
// over (the caller's context may be gone).
const flushTimeout = 30 * time.Second

// deferEvents applies evs to the state as the log will hold them (seqs
// after the state's last, times and messages as a Load returns them) and
// keeps them pending: the next append writes them first. They are checked
// as a store checks them, so a request the store would refuse is refused
// now, before its model call.
func (t *Thread) deferEvents(ts *threadState, evs []store.Event) ([]store.Event, error) {
	ts.pending = nil
	return t.pend(ts, evs)
}

// pend applies evs to the state as the log will hold them after its
// pending events (asLogged) and adds them to those.
func (t *Thread) pend(ts *threadState, evs []store.Event) ([]store.Event, error) {
	out, err := asLogged(ts, evs)
	if err != nil {
		return nil, err
	}
	if err := t.applyAll(ts, out); err != nil {
		ts.clear()
		return nil, err
	}
	ts.pending = append(ts.pending, out...)
	return out, nil
}

// asLogged returns evs as the log will hold them once appended after the
// state's last event: checked as a store checks them, numbered, timed,
// and their messages and data copied as a Load returns them.
func asLogged(ts *threadState, evs []store.Event) ([]store.Event, error) {
	base := ts.st.LastSeq()
	at := now().Round(0)
	out := make([]store.Event, len(evs))
	for i, ev := range evs {
		if err := backend.CheckEvent(ev); err != nil {
			return nil, err
		}
		ev.Seq = base + int64(i) + 1
		if ev.At.IsZero() {
			ev.At = at
		}
		ev.At = ev.At.UTC().Round(0)
		if ev.Message != nil {
			// As the stores give back what they store (a copy, not the
			// JSON round trip it stands for: a new thread's whole history
			// goes through here on its first request).
			m, err := backend.NormalizeMessage(ev.Message)
			if err != nil {
				return nil, err
			}
			ev.Message = m
		}
		if len(ev.Data) > 0 {
			ev.Data = append(json.RawMessage(nil), ev.Data...)
		}
		out[i] = ev
	}
	return out, nil
}

// checkFits refuses, before anything is logged, a request that cannot fit
// the budget whatever compaction does: one of its messages is larger than
// what the budget leaves around it, or (on a new thread) its whole first
// window. A refused request leaves the log as it was.
func (t *Thread) checkFits(ctx context.Context, ts *threadState, pol Policy, budget int, evs []store.Event, opts WindowOptions) error {
	req := t.request(ts, opts)
	fixed := req.SystemTokens + req.ToolsTokens + window.ReplyPrimer
	for _, ev := range evs {
		if ev.Message.IsToolResult() {
			continue // a large result is evicted to a preview
		}
		if fixed+ev.Tokens > budget {
			return fmt.Errorf("%w: %w", store.ErrInvalid, &BudgetError{What: fmt.Sprintf("a %s message", ev.Message.Role), Need: fixed + ev.Tokens, Budget: budget})
		}
	}
	if ts.st.LastSeq() > 0 || len(evs) == 0 {
		return nil
	}
	// A new thread: build its first window in memory.
	ps := &threadState{}
	if err := t.reset(ps, pol); err != nil {
		return err
	}
	for i := range evs {
		ev := evs[i]
		ev.Seq = int64(i + 1)
		if err := t.applyAll(ps, []store.Event{ev}); err != nil {
			return err
		}
	}
	_, err := t.privateWindow(ctx, ps, opts)
	var be *BudgetError
	if errors.As(err, &be) {
		return fmt.Errorf("%w: %w", store.ErrInvalid, err)
	}
	return nil
}

// privateWindow builds the window of a state that is never written to the
// store (a re-run's prefix, a dry run): compaction happens in memory, with
// the deterministic strategies only.
func (t *Thread) privateWindow(ctx context.Context, ps *threadState, opts WindowOptions) (*window.Window, error) {
	req := t.request(ps, opts)
	old := t.systemDelta(ps, &req)
	for i := 0; i < 8 && ps.st.OverTrigger(req); i++ {
		p, err := ps.st.Plan(req)
		if err != nil || p.Empty() {
			break
		}
		d := window.CompactedData{Strategy: p.Strategy}
		if p.From > 0 && p.Strategy == window.Observe {
			room := ps.policy.Trigger.TokensOf(ps.st.Budget()) - p.UsedAfter - 100
			d = t.observe(ctx, ps, p.Leaving, p.Catalogue, room, true)
			d.From, d.To = p.From, p.To
		}
		evs, err := p.Events(d)
		if err != nil {
			return nil, err
		}
		for j := range evs {
			evs[j].Seq = ps.st.LastSeq() + 1
			if err := t.applyAll(ps, evs[j:j+1]); err != nil {
				return nil, err
			}
		}
	}
	w, err := ps.st.Build(req)
	if err != nil {
		return nil, err
	}
	t.applySystem(ps, w, old)
	return w, nil
}

// systemDelta counts, when a system event replaced the thread's system
// prompt, the difference the new prompt makes into req (as system tokens),
// and returns the tokens the log's own leading system messages cost.
func (t *Thread) systemDelta(ts *threadState, req *window.Request) int {
	if !ts.proj.sysSet {
		return 0
	}
	old, n := 0, 0
	for i := range ts.proj.leadSys {
		old += ts.sz.Message("", ts.proj.leadSys[i])
	}
	for i := range ts.proj.system {
		n += ts.sz.Message("", ts.proj.system[i])
	}
	req.SystemTokens += n - old
	return n - old
}

// applySystem puts the thread's current system prompt in place of the
// log's leading system messages at the front of w (delta: what systemDelta
// counted, moved from the system share to the head).
func (t *Thread) applySystem(ts *threadState, w *window.Window, delta int) {
	if !ts.proj.sysSet {
		return
	}
	msgs := w.Messages
	drop := 0
	for drop < len(msgs) && drop < len(ts.proj.leadSys) && msgs[drop].Role == message.System {
		drop++
	}
	out := make([]message.Message, 0, len(msgs)-drop+len(ts.proj.system))
	out = append(out, ts.proj.system...)
	w.Messages = append(out, msgs[drop:]...)
	w.Usage.System -= delta
	w.Usage.Head += delta
	w.Usage.Messages = len(w.Messages)
}

// startBranch makes t a branch of parent holding parent's events up to
// seq through, unless it exists already. Of two requests starting it at
// once, one writes it and the other finds it.
func (t *Thread) startBranch(ctx context.Context, parent string, through int64) error {
	ts, err := t.lockWarm(ctx)
	if err != nil {
		return err
	}
	defer t.m.unlock(ts)
	if ts.st.LastSeq() > 0 {
		return nil
	}
	copies, err := t.m.Thread(t.tenant, parent).prefixEvents(ctx, through)
	if err != nil {
		return err
	}
	evs, err := t.m.branchEvents(parent, through, copies)
	if err != nil {
		return err
	}
	stored, err := t.appendEvents(ctx, ts, evs, func() ([]store.Event, error) { return nil, nil })
	if err == nil {
		t.m.index(t.tenant, stored)
	}
	return err
}

// prefixEvents loads the thread's events up to seq through, all of them
// or errParentGone.
func (t *Thread) prefixEvents(ctx context.Context, through int64) ([]store.Event, error) {
	if through == 0 {
		return nil, nil
	}
	evs, err := t.m.store.Load(ctx, t.tenant, t.id, 1, int(through))
	if err != nil {
		return nil, err
	}
	if int64(len(evs)) < through {
		return nil, errParentGone
	}
	return evs, nil
}

// branchEvents returns the first events of a branch: the note naming its
// parent, then copies of the parent's messages, policies and system
// events (compactions are the branch's own business).
func (m *Engine) branchEvents(parent string, through int64, evs []store.Event) ([]store.Event, error) {
	note, err := json.Marshal(historyNote{ForkedFrom: parent, ThroughSeq: through})
	if err != nil {
		return nil, err
	}
	out := []store.Event{{Kind: store.KindNote, Data: note}}
	for _, ev := range evs {
		switch ev.Kind {
		case store.KindMessage:
			if ev.Message == nil {
				continue
			}
			msg := ev.Message.Clone()
			msg.Time = ev.At
			out = append(out, store.Event{Kind: store.KindMessage, At: ev.At, Ref: m.newRef(), Message: &msg, Tokens: ev.Tokens})
		case store.KindPolicy:
			out = append(out, store.Event{Kind: store.KindPolicy, At: ev.At, Data: ev.Data})
		case store.KindNote:
			var n historyNote
			if json.Unmarshal(ev.Data, &n) == nil && n.System != nil {
				out = append(out, store.Event{Kind: store.KindNote, At: ev.At, Data: ev.Data})
			}
		}
	}
	return out, nil
}

// startRerun builds the window of a history that is a strict prefix of
// the log (units pre, up to seq through), in memory.
func (t *Thread) startRerun(ctx context.Context, hist []message.Message, pre []unit, sys []message.Message, through int64, opts WindowOptions) (*Turn, error) {
	copies, err := t.prefixEvents(ctx, through)
	if err != nil {
		return nil, err
	}
	ps := &threadState{}
	if err := t.reset(ps, t.m.policy); err != nil {
		return nil, err
	}
	if err := t.applyAll(ps, copies); err != nil {
		return nil, err
	}
	re := &rerun{parent: t, through: through, hist: hist, prefix: pre, copies: copies, ps: ps}
	if through > 0 && systemKey(sys) != systemKey(ps.proj.system) {
		re.system = &sys
		b, err := json.Marshal(historyNote{System: &sys})
		if err != nil {
			return nil, err
		}
		if err := t.applyAll(ps, []store.Event{{Kind: store.KindNote, Seq: ps.st.LastSeq() + 1, Data: b}}); err != nil {
			return nil, err
		}
	}
	if p := t.requestPolicy(ps, opts); p != nil {
		if budget, _, err := t.m.modelInfo(*p); err == nil && budget > 0 {
			_ = ps.st.SetPolicy(*p, budget)
			ps.policy = *p
		}
	}
	w, err := t.privateWindow(ctx, ps, opts)
	if err != nil {
		return nil, err
	}
	if re.system != nil {
		w.Usage.Step = true
	}
	return &Turn{m: t.m, tenant: t.tenant, opts: opts, Window: w, SystemChanged: re.system != nil, re: re}, nil
}

// Continue appends msgs (a round the engine answered itself, such as a
// recall call and its results) to the turn's branch and returns the new
// window.
func (x *Turn) Continue(ctx context.Context, msgs []message.Message) (*window.Window, error) {
	if err := validate(msgs); err != nil {
		return nil, err
	}
	if re := x.re; re != nil {
		t := re.parent
		ps := re.ps
		evs := t.messageEvents(ps.sz, msgs)
		for i := range evs {
			evs[i].Seq = ps.st.LastSeq() + 1
			if err := t.applyAll(ps, evs[i:i+1]); err != nil {
				return nil, err
			}
		}
		re.extra = append(re.extra, msgs...)
		w, err := t.privateWindow(ctx, ps, x.opts)
		if err == nil {
			x.Window = w
		}
		return w, err
	}
	t := x.m.Thread(x.tenant, x.branch)
	ts, err := x.lock()
	if err != nil {
		return nil, err
	}
	defer ts.mu.Unlock()
	stored, err := t.appendLocked(ctx, ts, msgs, false)
	if err != nil {
		return nil, x.deleted(ts, err)
	}
	x.Appended = append(x.Appended, stored...)
	x.extra = append(x.extra, msgs...)
	x.at = ts.st.LastSeq()
	w, err := t.windowLocked(ctx, ts, x.opts, false, true)
	if err == nil {
		// What the window wrote (a compaction, a recall note) is the
		// turn's own: the log has not moved under it.
		x.Window, x.at = w, ts.st.LastSeq()
	}
	return w, err
}

// lock locks the turn's state, ErrDeleted when the thread was deleted
// since the turn began.
func (x *Turn) lock() (*threadState, error) {
	if x.closed {
		return nil, errors.New("mneme: the turn is closed")
	}
	x.ts.mu.Lock()
	if x.ts.gen != x.gen || x.ts.st == nil {
		// Deleted since the turn began (the state stays pinned, so
		// nothing else clears it).
		x.ts.mu.Unlock()
		return nil, ErrDeleted
	}
	return x.ts, nil
}

// deleted maps a log that shrank under an append to ErrDeleted.
func (x *Turn) deleted(ts *threadState, err error) error {
	if errors.Is(err, errLogShrank) {
		ts.shrank()
		return ErrDeleted
	}
	return err
}

// Close releases the turn's hold on its thread's state (which may then be
// evicted from memory). Call it once the turn is over; it is idempotent.
func (x *Turn) Close() {
	if x.closed {
		return
	}
	x.closed = true
	if x.def != nil {
		// No reply was recorded: a deferred request is logged alone.
		ts := x.ts
		ts.mu.Lock()
		if ts.owner == x.def && ts.gen == x.gen && ts.st != nil {
			ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
			x.m.Thread(x.tenant, x.branch).flushPending(ctx, ts)
			cancel()
		}
		ts.mu.Unlock()
	}
	x.m.unpin(x.ts)
}

// Record appends the reply (and what goes with it) to the turn's branch.
// A re-run's reply goes where it belongs: nowhere when the log already
// holds it at that point, else to the branch it starts. ErrDeleted: the
// thread was deleted meanwhile and nothing was written.
func (x *Turn) Record(ctx context.Context, msgs ...message.Message) ([]store.Event, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if err := validate(msgs); err != nil {
		return nil, err
	}
	if x.re != nil {
		return x.recordRerun(ctx, msgs)
	}
	ts, err := x.lock()
	if err != nil {
		return nil, err
	}
	t := x.m.Thread(x.tenant, x.branch)
	if x.def != nil && x.def.dropped {
		ts.mu.Unlock()
		return x.placeAgain(ctx, msgs)
	}
	moved := x.hist != nil && ts.st.LastSeq() != x.at
	var stored []store.Event
	if !moved {
		// A deferred request still pending goes in this append, first.
		stored, err = t.appendLocked(ctx, ts, msgs, x.hist != nil)
		moved = errors.Is(err, store.ErrConflict)
		if x.def != nil && x.def.dropped && !errors.Is(err, errLogShrank) {
			ts.mu.Unlock()
			return x.placeAgain(ctx, msgs)
		}
	}
	if !moved {
		err = x.deleted(ts, err)
		ts.mu.Unlock()
		return stored, err
	}
	ts.mu.Unlock()
	// Another request of the same history was answered first.
	copies, err := t.prefixEvents(ctx, x.at)
	if err != nil {
		if errors.Is(err, errParentGone) {
			return nil, ErrDeleted
		}
		return nil, err
	}
	x.re = &rerun{parent: t, through: x.at, hist: x.hist, copies: copies, logged: true}
	pre := requestProjection(x.hist)
	x.re.prefix = pre.units
	x.re.extra = x.extra
	return x.recordRerun(ctx, msgs)
}

var endUnit = unit{h: sum([]byte("end"))}

// placeAgain records a deferred turn whose request was dropped from the
// state before it was written (another process wrote the thread
// meanwhile): the request is compared with the log again and written,
// then the reply after it. The turn takes over the new turn's place.
func (x *Turn) placeAgain(ctx context.Context, msgs []message.Message) ([]store.Event, error) {
	t := x.m.Thread(x.tenant, x.branch)
	var nx *Turn
	var err error
	if x.hist != nil {
		nx, err = t.AppendHistory(ctx, x.hist, HistoryOptions{Window: x.opts})
	} else {
		nx, err = t.appendTurn(ctx, x.req, x.opts, false)
	}
	if err != nil {
		return nil, err
	}
	stored, err := nx.Record(ctx, msgs...)
	x.m.unpin(x.ts)
	x.ts, x.gen, x.branch, x.at, x.re, x.def = nx.ts, nx.gen, nx.branch, nx.at, nx.re, nil
	if nx.parent != "" {
		x.parent = nx.parent
	}
	nx.closed = true // its pin is x's now
	return stored, err
}

func (x *Turn) recordRerun(ctx context.Context, msgs []message.Message) ([]store.Event, error) {
	re := x.re
	all := append(append(append([]message.Message(nil), re.hist...), re.extra...), msgs...)
	proj := requestProjection(all)
	units := proj.units
	k := len(re.prefix)
	key := append(append([]unit(nil), re.prefix...), endUnit)
	next := endUnit
	if len(units) > k {
		next, key[k] = units[k], headUnit(all, units[k])
	}
	p := re.parent
	// The parent already goes on with this reply: nothing to write.
	ts, err := x.lock()
	if err != nil {
		return nil, err
	}
	if ts.proj.broken {
		if err := p.rebuildProjection(ctx, ts); err != nil {
			ts.mu.Unlock()
			return nil, err
		}
	}
	have := ts.proj.result()
	same := len(have) > k && have[k].h == next.h
	ts.mu.Unlock()
	if same {
		return nil, nil
	}
	child := p.m.Thread(p.tenant, branchID(p.id, key))
	cs, err := child.lockWarm(ctx)
	if err != nil {
		return nil, err
	}
	defer p.m.unlock(cs)
	if cs.st.LastSeq() > 0 {
		return nil, nil // the branch exists: it starts with this reply
	}
	evs, err := p.m.branchEvents(p.id, re.through, re.copies)
	if err != nil {
		return nil, err
	}
	if re.system != nil {
		b, _ := json.Marshal(historyNote{System: re.system})
		evs = append(evs, store.Event{Kind: store.KindNote, Data: b})
	}
	if !re.logged {
		msgs = append(append([]message.Message(nil), re.extra...), msgs...)
	}
	evs = append(evs, child.messageEvents(cs.sz, msgs)...)
	stored, err := child.appendEvents(ctx, cs, evs, func() ([]store.Event, error) { return nil, nil })
	if err != nil {
		return nil, err
	}
	p.m.index(p.tenant, stored)
	p.m.pinAgain(cs)
	p.m.unpin(x.ts)
	x.re, x.branch, x.ts, x.gen, x.parent = nil, child.id, cs, cs.gen, p.id
	return stored, nil
}

// appendTurn appends msgs as they are (append mode), after checking their
// tool results against the log.
func (t *Thread) appendTurn(ctx context.Context, msgs []message.Message, opts WindowOptions, deferred bool) (*Turn, error) {
	conflicts := 0
	for {
		ts, err := t.lockWarm(ctx)
		if err != nil {
			return nil, err
		}
		if err := checkResults(ts.proj.calls, msgs); err != nil {
			t.m.unlock(ts)
			return nil, err
		}
		fresh := msgs
		var sys *[]message.Message
		if lead := leadingSystem(msgs); ts.st.LastSeq() > 0 {
			s := msgs[:lead]
			if lead > 0 && systemKey(s) != systemKey(ts.proj.system) {
				sys = &s
			}
			fresh = msgs[lead:]
		}
		x, err := t.land(ctx, ts, fresh, sys, opts, deferred)
		if errors.Is(err, store.ErrConflict) || errors.Is(err, errLogShrank) {
			if errors.Is(err, errLogShrank) {
				ts.shrank()
			}
			t.m.unlock(ts)
			if conflicts++; conflicts > maxHistoryConflicts {
				return nil, errTooManyConflicts
			}
			continue
		}
		t.m.unlock(ts)
		if x != nil {
			x.req = msgs
		}
		return x, err
	}
}

// checkResults checks msgs' tool calls and results against the calls of
// the log: a call id used before, a result for no open call (never made,
// answered already, or closed by a later step with a synthetic result)
// is refused.
func checkResults(log map[string]uint8, msgs []message.Message) error {
	open := map[string]bool{} // calls of msgs themselves
	for id, s := range log {
		if s == callOpen {
			open[id] = true
		}
	}
	seen := map[string]bool{}
	for i := range msgs {
		m := &msgs[i]
		for _, p := range m.Parts {
			if p.Type != message.ToolResult {
				continue
			}
			if !open[p.ToolCallID] {
				if s, known := log[p.ToolCallID]; seen[p.ToolCallID] || known && s == callClosed {
					return fmt.Errorf("%w: messages[%d]: tool call %q is answered already, or was closed by a later message", store.ErrInvalid, i, p.ToolCallID)
				}
				return fmt.Errorf("%w: messages[%d]: tool result for %q, which no open call of the thread made", store.ErrInvalid, i, p.ToolCallID)
			}
			delete(open, p.ToolCallID)
		}
		if !m.IsToolResult() {
			clear(open)
		}
		for _, p := range m.Parts {
			if p.Type != message.ToolCall {
				continue
			}
			if _, dup := log[p.ToolCallID]; dup || seen[p.ToolCallID] {
				return fmt.Errorf("%w: messages[%d]: tool call id %q is used twice", store.ErrInvalid, i, p.ToolCallID)
			}
			seen[p.ToolCallID] = true
			open[p.ToolCallID] = true
		}
	}
	return nil
}

// Fork starts a branch of the thread holding its events up to seq through
// (0: the whole log as it is now) and returns it. id names the branch; ""
// derives one from the thread and the seq. An existing thread of that id
// is an error (store.ErrConflict).
func (t *Thread) Fork(ctx context.Context, through int64, id string) (*Thread, error) {
	if err := backend.CheckScope(t.tenant, t.id); err != nil {
		return nil, err
	}
	last, err := t.m.store.LastSeq(ctx, t.tenant, t.id)
	if err != nil {
		return nil, err
	}
	if last == 0 {
		return nil, fmt.Errorf("thread %s: %w", t.id, store.ErrNotFound)
	}
	if through <= 0 {
		through = last
	}
	if through > last {
		return nil, fmt.Errorf("%w: through_seq %d is past the log's end (%d)", store.ErrInvalid, through, last)
	}
	if id == "" {
		id = branchID(t.id, []unit{{h: sum(fmt.Appendf(nil, "seq:%d", through))}})
	}
	child := t.m.Thread(t.tenant, id)
	if err := backend.CheckScope(t.tenant, id); err != nil {
		return nil, err
	}
	ts, err := child.lockWarm(ctx)
	if err != nil {
		return nil, err
	}
	defer t.m.unlock(ts)
	if ts.st.LastSeq() > 0 {
		return nil, fmt.Errorf("thread %s exists: %w", id, store.ErrConflict)
	}
	copies, err := t.prefixEvents(ctx, through)
	if err != nil {
		return nil, err
	}
	evs, err := t.m.branchEvents(t.id, through, copies)
	if err != nil {
		return nil, err
	}
	stored, err := child.appendEvents(ctx, ts, evs, func() ([]store.Event, error) { return nil, store.ErrConflict })
	if err != nil {
		return nil, err
	}
	t.m.index(t.tenant, stored)
	return child, nil
}

// Parent returns the thread this one was forked from ("" for none).
func (t *Thread) Parent(ctx context.Context) (string, error) {
	ts, err := t.lockWarm(ctx)
	if err != nil {
		return "", err
	}
	defer t.m.unlock(ts)
	return ts.proj.parent, nil
}

// A resend client's request is its previous request and a step more, so
// projecting it whole hashes again, step by step, what the previous
// request hashed. historyMemo keeps, per thread a request named, the last
// request's messages (the engine's own copies) and units: the next request
// projects only from the unit in which it stops being the same, message
// for message (message.SameContent), as the last one. What it returns is
// what requestProjection returns (TestHistoryMemoProjects).

// DefaultRequestMemoBytes bounds the text the engine's memo of each
// thread's last request keeps (Config.RequestMemoBytes): half of it per
// generation.
const DefaultRequestMemoBytes = 64 << 20

// historyMemo is safe for concurrent use; its zero value is empty and
// holds DefaultRequestMemoBytes at most.
type historyMemo struct {
	limit int // bytes per generation; 0: DefaultRequestMemoBytes/2; < 0: keep nothing

	mu       sync.Mutex
	cur, old map[threadKey]*projMemo
	size     int // the bytes of cur's messages
}

// projMemo is one request's projection: never modified once made.
type projMemo struct {
	msgs  []message.Message // copies (Clone) of the request's messages
	cum   []int             // cum[i]: the bytes of msgs[:i]
	units []unit
}

func (h *historyMemo) get(k threadKey) *projMemo {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.cur[k]; p != nil {
		return p
	}
	return h.old[k]
}

func (h *historyMemo) put(k threadKey, p *projMemo) {
	if h.limit < 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == nil {
		h.cur = map[threadKey]*projMemo{}
	}
	if q := h.cur[k]; q != nil {
		h.size -= q.cum[len(q.cum)-1]
	}
	h.cur[k] = p
	h.size += p.cum[len(p.cum)-1]
	if h.size > cmp.Or(h.limit, DefaultRequestMemoBytes/2) {
		h.old, h.cur, h.size = h.cur, map[threadKey]*projMemo{}, 0
	}
}

// project returns requestProjection(msgs), reusing the units of the last
// request on thread k as far as it is the same as msgs.
func (h *historyMemo) project(k threadKey, msgs []message.Message) projector {
	prev := h.get(k)
	same := 0
	if prev != nil {
		for same < len(prev.msgs) && same < len(msgs) && message.SameContent(&prev.msgs[same], &msgs[same]) {
			same++
		}
	}
	// Units before the last one that starts within the same messages were
	// closed by the same message that closes them now: kept. The last one
	// is projected again from its first message, as is the rest.
	j := 0
	if prev != nil {
		for j < len(prev.units) && prev.units[j].first < int64(same) {
			j++
		}
		j--
	}
	var u projector
	from := 0
	if j > 0 {
		from = int(prev.units[j].first)
		u.units = append(make([]unit, 0, len(msgs)), prev.units[:j]...)
		u.started = true
		// The leading system messages, as add reads them.
		for i := 0; i < from; i++ {
			m := &msgs[i]
			if Hidden(m) {
				continue
			}
			if m.Role != message.System {
				break
			}
			u.leadSys = append(u.leadSys, *m)
			u.system = append(u.system, *m)
		}
	} else {
		u.units = make([]unit, 0, len(msgs))
	}
	for i := from; i < len(msgs); i++ {
		u.add(&msgs[i], int64(i))
	}
	u.close()
	if len(msgs) == 0 {
		return u
	}
	p := &projMemo{msgs: make([]message.Message, len(msgs)), cum: make([]int, len(msgs)+1), units: slices.Clone(u.units)}
	if prev != nil {
		copy(p.msgs, prev.msgs[:same])
		copy(p.cum, prev.cum[:same+1])
	}
	for i := same; i < len(msgs); i++ {
		p.msgs[i] = msgs[i].Clone()
		p.cum[i+1] = p.cum[i] + contentBytes(msgs[i].Parts)
	}
	h.put(k, p)
	return u
}

// contentBytes approximates the memory a message's parts hold.
func contentBytes(ps []message.Part) int {
	n := 0
	for i := range ps {
		p := &ps[i]
		n += 64 + len(p.Text) + len(p.ImageURL) + len(p.Arguments) + len(p.Raw) + len(p.ToolCallID) + len(p.ToolName) + len(p.Signature) + contentBytes(p.Content)
	}
	return n
}
