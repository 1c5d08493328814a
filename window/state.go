package window

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// Sizer counts tokens for the window. Message counts a rendered message with
// its chat-format overhead; key names it stably (a ref, or a ref plus the
// form it is rendered in) so that implementations can cache the count.
type Sizer interface {
	Message(key string, m message.Message) int
	Text(s string) int
}

// Form is how a logged message appears in the window.
type Form string

// The forms a message takes (I2: every message is in the window exactly once,
// in one of these forms, or covered by a memory block).
const (
	Raw     Form = "raw"
	Evicted Form = "evicted" // a tool result's body replaced by a preview
	Masked  Form = "masked"  // tool results replaced by one-line placeholders
	Dropped Form = "dropped" // an orphan tool result: left out (I4), kept in the log
	Covered Form = "covered" // left the window; a memory block covers its seq
)

// Item is one logged message as the window holds it.
type Item struct {
	Seq    int64
	Ref    string
	At     int64 // unix seconds
	Msg    *message.Message
	Form   Form
	Out    message.Message // what the window shows
	Tokens int             // tokens of Out
	// Boundary: a cut may be made just before this item (a user turn starts,
	// or an assistant step starts with no tool call pending).
	Boundary bool
	// Tools names the tools whose results this message carries.
	Tools []string
	// Post holds synthetic results for calls of this turn that were never
	// answered, placed right after the item (I4); PostTokens counts them.
	Post       []message.Message
	PostTokens int
}

// cost is what the item adds to the window.
func (it *Item) cost() int {
	if it.Form == Dropped {
		return it.PostTokens
	}
	return it.Tokens + it.PostTokens
}

// Block is one entry of the memory block: an observation or a catalogue
// covering the log range [From, To].
type Block struct {
	EventSeq int64    `json:"event_seq"`
	Kind     Strategy `json:"kind"` // observe, or archive/mask for a catalogue
	From     int64    `json:"from"`
	To       int64    `json:"to"`
	Text     string   `json:"text"`
	Tokens   int      `json:"tokens"`
}

// MaskedData is the payload of a "masked" event.
type MaskedData struct {
	Seqs []int64 `json:"seqs"`
}

// CompactedData is the payload of a "compacted" event: the range that left
// the window and what replaces it.
type CompactedData struct {
	Strategy     Strategy `json:"strategy"`
	From         int64    `json:"from_seq"`
	To           int64    `json:"to_seq"`
	Text         string   `json:"text"`
	TokensBefore int      `json:"tokens_before"` // tokens of the messages that left
	TokensAfter  int      `json:"tokens_after"`  // tokens of Text
	Model        string   `json:"model,omitempty"`
	Fallback     string   `json:"fallback,omitempty"` // why the summarizer was not used
	DurationMS   int64    `json:"duration_ms,omitempty"`
	CostUSD      float64  `json:"cost_usd,omitempty"`
	Masked       int      `json:"masked,omitempty"` // placeholders made in the same step
	// Kept are seqs inside [From, To] that stay live in the window: the
	// current turn's user message, when the turn alone was over target.
	Kept []int64 `json:"kept,omitempty"`
}

// ReflectedData is the payload of a "reflected" event: blocks (named by the
// seqs of their events) condensed into one.
type ReflectedData struct {
	Replaces     []int64 `json:"replaces"`
	From         int64   `json:"from_seq"`
	To           int64   `json:"to_seq"`
	Text         string  `json:"text"`
	TokensBefore int     `json:"tokens_before"`
	TokensAfter  int     `json:"tokens_after"`
	Level        int     `json:"level,omitempty"`
	Model        string  `json:"model,omitempty"`
	Fallback     string  `json:"fallback,omitempty"`
	DurationMS   int64   `json:"duration_ms,omitempty"`
}

// NoteData is the payload of a "note" event. Memories, when present,
// replaces the long-term memories shown in the memory block (written at
// compaction points only).
type NoteData struct {
	Memories *string `json:"memories,omitempty"`
	Text     string  `json:"text,omitempty"`
	// Recalled, when present, is the recalled block shown before the
	// current request (auto-recall, see recalled.go).
	Recalled *RecallData `json:"recalled,omitempty"`
}

// State is the materialised window of one thread. It is not safe for
// concurrent use; the caller serialises access per thread.
type State struct {
	policy Policy
	budget int // usable budget: context window - reserve
	sizer  Sizer

	lastSeq  int64
	head     []*Item
	headDone bool
	blocks   []Block
	tail     []*Item

	headTok, memTok, tailTok int
	memStale                 bool // memTok must be recounted from memMsg
	memMsg                   *message.Message
	injected                 string     // long-term memories shown in the memory block
	recalls                  []recalled // recalled blocks, by the seq they precede
	turnSeq                  int64      // the last message that opens a turn

	// out caches the rendered messages of head, memory and tail (without
	// the repair suffix); only ever grown between compactions, and never
	// written below shown: windows share its array.
	out []message.Message
	// shown is how much of out's array windows show: Build hands out
	// out[:shown] at most, and those slots are never written again. The
	// ones past len(out) hold the synthetic results of calls Build
	// repaired; when the log closes those calls with the same synthetic
	// results (the step ended unanswered), out takes the slots as they
	// are. Anything else goes to a new array (shown 0).
	shown int

	// evictedRefs and maskedRefs cache RefsByForm while refsOK; a message
	// appended to the tail adds to them, a mask or a cut resets them.
	evictedRefs, maskedRefs []string
	refsOK                  bool

	// calls maps the id of every call made by an item of the head or the
	// tail to its tool name: what a result can still pair with. A call
	// that left the window (covered) is forgotten, so a late result to it
	// is an orphan (I4) and the map, like the snapshot, is O(window).
	calls   map[string]string
	pending map[string]bool // calls in the tail still waiting for a result
	bySeq   map[int64]*Item // tail items by seq

	// accounting
	messages      int64 // message events applied
	threadTokens  int64 // raw tokens of every message
	dropped       []string
	compactions   int
	reflections   int
	lastCompacted int64 // seq of the last compacted event
}

// NewState returns an empty state for a thread with policy p and a usable
// budget (context window minus reserved output) of budget tokens.
func NewState(p Policy, budget int, sz Sizer) (*State, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if budget <= 0 {
		return nil, &FieldError{"budget_tokens", fmt.Sprintf("usable budget %d: the context window must exceed reserve_output_tokens", budget)}
	}
	if t := p.Trigger.TokensOf(budget); p.Trigger.Tokens > 0 && t > budget {
		return nil, &FieldError{"trigger", fmt.Sprintf("%d tokens is above the usable budget %d", t, budget)}
	}
	return &State{
		policy:  p,
		budget:  budget,
		sizer:   sz,
		calls:   map[string]string{},
		pending: map[string]bool{},
		bySeq:   map[int64]*Item{},
	}, nil
}

// Policy returns the state's policy.
func (s *State) Policy() Policy { return s.policy }

// Budget returns the usable budget in tokens.
func (s *State) Budget() int { return s.budget }

// LastSeq returns the seq of the last event applied.
func (s *State) LastSeq() int64 { return s.lastSeq }

// Compactions returns how many compacted events were applied.
func (s *State) Compactions() int { return s.compactions }

// Injected returns the long-term memories the memory block shows.
func (s *State) Injected() string { return s.injected }

// Blocks returns the memory block's entries, oldest first.
func (s *State) Blocks() []Block { return append([]Block(nil), s.blocks...) }

// evictLimit is the size over which a tool result is evicted: the policy's
// threshold, never more than a quarter of the budget.
func (s *State) evictLimit() int {
	return min(s.policy.EvictOverTokens, s.budget/4)
}

// Apply folds one log event into the state. Events must come in seq order;
// an event at or below LastSeq is ignored (catching up twice is harmless).
func (s *State) Apply(ev store.Event) error {
	if ev.Seq <= s.lastSeq {
		return nil
	}
	if ev.Seq != s.lastSeq+1 {
		return fmt.Errorf("window: event seq %d after %d: the log has a gap", ev.Seq, s.lastSeq)
	}
	s.lastSeq = ev.Seq
	switch ev.Kind {
	case store.KindMessage:
		if ev.Message == nil {
			return fmt.Errorf("window: message event %d has no message", ev.Seq)
		}
		s.applyMessage(ev)
	case store.KindMasked:
		var d MaskedData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return fmt.Errorf("window: masked event %d: %w", ev.Seq, err)
		}
		s.applyMask(d.Seqs)
	case store.KindCompacted:
		var d CompactedData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return fmt.Errorf("window: compacted event %d: %w", ev.Seq, err)
		}
		s.applyCompacted(ev.Seq, d)
	case store.KindNote:
		var d NoteData
		if json.Unmarshal(ev.Data, &d) == nil && d.Memories != nil {
			s.injected = *d.Memories
			s.rebuildMemory()
			s.rebuildOut()
		}
		if d.Recalled != nil {
			s.applyRecalled(*d.Recalled)
		}
	case store.KindReflected:
		var d ReflectedData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return fmt.Errorf("window: reflected event %d: %w", ev.Seq, err)
		}
		s.applyReflected(ev.Seq, d)
	}
	return nil
}

func (s *State) applyMessage(ev store.Event) {
	m := ev.Message
	s.messages++
	it := &Item{Seq: ev.Seq, Ref: ev.Ref, At: ev.At.Unix(), Msg: m, Form: Raw}
	// The count recorded at append time is part of the log: using it keeps
	// replay deterministic (I7) and a rebuild free of re-tokenising.
	raw := ev.Tokens
	if raw <= 0 {
		raw = s.sizer.Message(ev.Ref, *m)
	}
	s.threadTokens += int64(raw)
	if m.StartsTurn() {
		s.turnSeq = ev.Seq
	}

	if s.policy.PinHead && !s.headDone {
		it.Out, it.Tokens = *m, raw
		s.noteCalls(m)
		s.head = append(s.head, it)
		s.headTok += it.Tokens
		s.push(it.Out, "")
		if m.StartsTurn() {
			s.headDone = true
		}
		return
	}

	out, orphans, tools := s.resolveResults(m)
	it.Tools = tools
	// A message that is not a tool result closes the previous step: calls
	// still unanswered get a synthetic result right after that step.
	if !m.IsToolResult() && len(s.pending) > 0 {
		s.closeDangling()
	}
	// A cut may fall before a message that opens a turn or a step, unless it
	// answers calls made before it (an Anthropic user message may mix tool
	// results and text).
	if (m.StartsTurn() || m.Role == message.Assistant) && len(m.ToolResults()) == 0 {
		it.Boundary = true
	}
	for _, p := range m.Parts {
		if p.Type == message.ToolCall {
			s.calls[p.ToolCallID] = p.ToolName
			s.pending[p.ToolCallID] = true
		}
	}
	switch {
	case out == nil:
		it.Form = Dropped
		s.dropped = append(s.dropped, ev.Ref)
	case orphans > 0:
		it.Out, it.Tokens = *out, s.sizer.Message(ev.Ref+"#repaired", *out)
	default:
		it.Out, it.Tokens = *m, raw
	}
	if it.Form == Raw && len(tools) > 0 && it.Tokens > s.evictLimit() {
		it.Form = Evicted
		it.Out = evictedForm(it, s.policy.PreviewLines, s.evictLimit())
		it.Tokens = s.sizer.Message(ev.Ref+"#evicted", it.Out)
	}
	s.tail = append(s.tail, it)
	s.bySeq[it.Seq] = it
	if it.Form != Dropped {
		s.tailTok += it.Tokens
		s.push(it.Out, "")
	}
	if s.refsOK && it.Form == Evicted {
		s.evictedRefs = append(s.evictedRefs, it.Ref)
	}
}

// push appends m to out. synth names the call m is the synthetic result
// of ("" for any other message): when a window shows the next slot with
// that very message, out takes it as it is. Any other message would change
// what a window shows: out moves to a new array first.
func (s *State) push(m message.Message, synth string) {
	if n := len(s.out); n < s.shown {
		if synth != "" && isUnavailable(s.out[:n+1][n], synth) {
			s.out = s.out[:n+1]
			return
		}
		s.unlend(1)
	}
	s.out = append(s.out, m)
}

// unlend moves out to a new array with room for at least n more messages
// (grown as append grows, so that appends stay amortised O(1)); the old
// one stays, unchanged, with the windows that show it.
func (s *State) unlend(n int) {
	s.out = slices.Grow(s.out[:len(s.out):len(s.out)], n)
	s.shown = 0
}

// repaired returns out followed by the synthetic results of calls ids, as
// a slice whose array holds them just past out (see shown): O(len(ids))
// whenever those slots are free or already hold them.
func (s *State) repaired(ids []string) []message.Message {
	n, k := len(s.out), len(ids)
	done := 0 // results a window shows already, in their slots
	for done < k && n+done < s.shown && isUnavailable(s.out[:s.shown][n+done], ids[done]) {
		done++
	}
	if n+done < s.shown || cap(s.out) < n+k {
		s.unlend(k) // a shown slot holds another message, or no room
		done = 0
	}
	ext := s.out[n : n+k]
	for i := done; i < k; i++ {
		ext[i] = message.NewToolResult(ids[i], UnavailableResult)
	}
	return s.show(n + k)
}

// show hands out out's array up to n (n >= len(out)).
func (s *State) show(n int) []message.Message {
	s.shown = max(s.shown, n)
	return s.out[:n:n]
}

// isUnavailable reports whether m is the synthetic result of call id.
func isUnavailable(m message.Message, id string) bool {
	return m.Role == message.Tool && len(m.Parts) == 1 && m.Parts[0].Type == message.ToolResult &&
		m.Parts[0].ToolCallID == id && len(m.Parts[0].Content) == 1 && m.Parts[0].Content[0].Text == UnavailableResult
}

// closeDangling answers every pending call with a synthetic result, attached
// after the last shown item of the tail, in call order.
func (s *State) closeDangling() {
	var last *Item
	for i := len(s.tail) - 1; i >= 0; i-- {
		if s.tail[i].Form != Dropped {
			last = s.tail[i]
			break
		}
	}
	ids := s.pendingInOrder()
	clear(s.pending)
	if last == nil {
		return
	}
	for _, id := range ids {
		m := message.NewToolResult(id, UnavailableResult)
		n := s.sizer.Message("", m)
		last.Post = append(last.Post, m)
		last.PostTokens += n
		s.tailTok += n
		s.push(m, id)
	}
}

// currentTurn returns the index in the tail of the current turn's user
// message (the last message that opens a turn), or -1 when the tail has
// none (it is the pinned head's, or the tail is all tool steps). No
// compaction takes that message out of the window (docs/design.md, the
// window pipeline, 4a).
func (s *State) currentTurn() int {
	for i := len(s.tail) - 1; i >= 0; i-- {
		if it := s.tail[i]; it.Form != Dropped && it.Msg.StartsTurn() {
			return i
		}
	}
	return -1
}

// pendingInOrder lists the pending call ids in the order they were made.
func (s *State) pendingInOrder() []string {
	var ids []string
	for i := len(s.tail) - 1; i >= 0 && len(ids) < len(s.pending); i-- {
		calls := s.tail[i].Msg.ToolCalls()
		for j := len(calls) - 1; j >= 0; j-- {
			if s.pending[calls[j].ToolCallID] {
				ids = append(ids, calls[j].ToolCallID)
			}
		}
	}
	slices.Reverse(ids)
	return ids
}

func (s *State) noteCalls(m *message.Message) {
	for _, p := range m.Parts {
		if p.Type == message.ToolCall {
			s.calls[p.ToolCallID] = p.ToolName
		}
	}
}

// indexCalls rebuilds calls from the items of the head and the tail, in
// seq order (a repeated id keeps its last tool name, as applying does).
func (s *State) indexCalls() {
	clear(s.calls)
	for _, it := range s.head {
		s.noteCalls(it.Msg)
	}
	for _, it := range s.tail {
		s.noteCalls(it.Msg)
	}
}

// resolveResults pairs a message's tool results with open calls: calls of
// the tail still pending, or calls of the head. A result to a call already
// answered, or closed with a synthetic result when its step ended, would
// follow no open call in the window (I4): it is an orphan, like one to a
// call never seen. It returns the message to show (nil if nothing is left
// once orphan results are removed), how many orphans it removed, and the
// tool names answered.
func (s *State) resolveResults(m *message.Message) (*message.Message, int, []string) {
	orphans := 0
	var tools []string
	var orphan []bool // by part, once there is one
	for i, p := range m.Parts {
		if p.Type != message.ToolResult {
			continue
		}
		name, ok := s.calls[p.ToolCallID]
		if ok && !s.pending[p.ToolCallID] && !s.headCall(p.ToolCallID) {
			ok = false
		}
		if !ok {
			if orphan == nil {
				orphan = make([]bool, len(m.Parts))
			}
			orphan[i] = true
			orphans++
			continue
		}
		if name == "" {
			name = p.ToolName
		}
		if name == "" {
			name = "tool"
		}
		tools = append(tools, name)
		delete(s.pending, p.ToolCallID)
	}
	if orphans == 0 {
		return m, 0, tools
	}
	c := m.Clone()
	c.Parts = c.Parts[:0]
	for i, p := range m.Parts {
		if !orphan[i] {
			c.Parts = append(c.Parts, p)
		}
	}
	if len(c.Parts) == 0 {
		return nil, orphans, nil
	}
	return &c, orphans, tools
}

// headCall reports whether the pinned head makes call id.
func (s *State) headCall(id string) bool {
	for _, it := range s.head {
		for _, p := range it.Msg.Parts {
			if p.Type == message.ToolCall && p.ToolCallID == id {
				return true
			}
		}
	}
	return false
}

func (s *State) applyMask(seqs []int64) {
	changed := false
	for _, q := range seqs {
		it := s.bySeq[q]
		if it == nil || it.Form == Masked || it.Form == Dropped || len(it.Tools) == 0 {
			continue
		}
		s.tailTok -= it.Tokens
		it.Form = Masked
		it.Out = maskedForm(it)
		it.Tokens = s.sizer.Message(it.Ref+"#masked", it.Out)
		s.tailTok += it.Tokens
		changed = true
	}
	if changed {
		s.refsOK = false
		s.rebuildOut()
	}
}

func (s *State) applyCompacted(seq int64, d CompactedData) {
	s.compactions++
	s.lastCompacted = seq
	keep := s.tail[:0:0]
	for _, it := range s.tail {
		if it.Seq >= d.From && it.Seq <= d.To && !slices.Contains(d.Kept, it.Seq) {
			s.tailTok -= it.cost()
			delete(s.bySeq, it.Seq)
			for _, p := range it.Msg.Parts {
				if p.Type == message.ToolCall {
					delete(s.pending, p.ToolCallID)
				}
			}
			continue
		}
		keep = append(keep, it)
	}
	s.tail = keep
	s.refsOK = false
	s.indexCalls()
	s.dropStaleRecalls()
	s.blocks = append(s.blocks, Block{EventSeq: seq, Kind: d.Strategy, From: d.From, To: d.To, Text: d.Text})
	s.rebuildMemory()
	s.rebuildOut()
}

func (s *State) applyReflected(seq int64, d ReflectedData) {
	s.reflections++
	drop := map[int64]bool{}
	for _, q := range d.Replaces {
		drop[q] = true
	}
	var kept []Block
	inserted := false
	for _, b := range s.blocks {
		if drop[b.EventSeq] {
			if !inserted {
				kept = append(kept, Block{EventSeq: seq, Kind: Observe, From: d.From, To: d.To, Text: d.Text})
				inserted = true
			}
			continue
		}
		kept = append(kept, b)
	}
	if !inserted {
		kept = append(kept, Block{EventSeq: seq, Kind: Observe, From: d.From, To: d.To, Text: d.Text})
	}
	s.blocks = kept
	s.rebuildMemory()
	s.rebuildOut()
}

func (s *State) rebuildMemory() {
	for i := range s.blocks {
		if s.blocks[i].Tokens == 0 {
			s.blocks[i].Tokens = s.sizer.Text(s.blocks[i].Text)
		}
	}
	if len(s.blocks) == 0 && s.injected == "" {
		s.memMsg, s.memTok, s.memStale = nil, 0, false
		return
	}
	m := memoryMessage(s.blocks, s.injected)
	s.memMsg = &m
	// Counted when next needed: a replay rebuilds the block at every
	// compaction event but asks its size once, at the end.
	s.memStale = true
}

// rebuildOut renders the window anew; only compaction and masking call it.
func (s *State) rebuildOut() {
	s.out = render(s.head, s.memMsg, s.tail, recallMessages(s.recalls))
	s.shown = 0
}

// SetPolicy switches the state to policy p with usable budget budget from
// the next event on: what is already in the window stays as it is (the
// prefix holds); eviction, triggers and strategy follow p from now.
func (s *State) SetPolicy(p Policy, budget int) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if budget <= 0 {
		return &FieldError{"budget_tokens", fmt.Sprintf("usable budget %d: the context window must exceed reserve_output_tokens", budget)}
	}
	s.policy, s.budget = p, budget
	return nil
}

// memTokens returns the memory block's tokens, counting it if it changed.
func (s *State) memTokens() int {
	if s.memStale {
		// Keyed by content (""): a key such as "memory#<seq>" names other
		// blocks in other threads sharing the Manager's count cache, and a
		// count taken from one of them would make the window depend on what
		// else the process saw (I7).
		s.memTok = s.sizer.Message("", *s.memMsg)
		s.memStale = false
	}
	return s.memTok
}

// SetSizer switches how the state counts tokens from now on (the policy
// moved to a model with another tokenizer); counts already taken stay.
func (s *State) SetSizer(sz Sizer) { s.sizer = sz }
