package window

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// Request is what the caller's next model call adds around the messages:
// they count toward the budget (I3).
type Request struct {
	SystemTokens int // a system prompt sent outside the messages (Anthropic's system field)
	ToolsTokens  int // the request's tool schemas
	// RecallTokens is what the recall tools' schemas cost; they are added
	// to the request whenever anything is out of the window.
	RecallTokens int
}

// ReplyPrimer is what the chat format adds to every request.
const ReplyPrimer = 3

// Usage reports what a window costs and what the pipeline did.
type Usage struct {
	Budget  int `json:"budget"`
	Trigger int `json:"trigger"`
	Target  int `json:"target"`

	System int `json:"system"`
	Tools  int `json:"tools"`
	Recall int `json:"recall"`
	Head   int `json:"head"`
	Memory int `json:"memory"`
	// Recalled is what the recalled block costs (auto-recall).
	Recalled int `json:"recalled"`
	Tail     int `json:"tail"`
	Total    int `json:"total"`

	Messages       int   `json:"messages"`        // messages in the window
	ThreadMessages int64 `json:"thread_messages"` // messages in the log
	ThreadTokens   int64 `json:"thread_tokens"`   // their raw tokens
	LastSeq        int64 `json:"last_seq"`
	Compactions    int   `json:"compactions"`

	Evicted []string `json:"evicted,omitempty"` // refs shown as previews
	Masked  []string `json:"masked,omitempty"`  // refs shown as placeholders
	Dropped []string `json:"dropped,omitempty"` // orphan results left out
	// Compacted is set when this call compacted.
	Compacted *CompactedData `json:"compacted,omitempty"`
	Reflected *ReflectedData `json:"reflected,omitempty"`
	Repaired  int            `json:"repaired,omitempty"` // synthetic results added
	// RecallBlock is the recalled block shown before the current request:
	// the query, and each hit with its score and matched terms.
	RecallBlock *RecallData `json:"recalled_block,omitempty"`
	// Step is set when this call took a compaction step (masking,
	// compaction or reflection): the only calls whose prefix may change.
	Step bool `json:"compaction_step,omitempty"`
}

// Window is what the model sees for the next call.
type Window struct {
	Messages []message.Message
	Usage    Usage
	// NeedsRecall: something is out of the window, so the recall tools
	// belong in the request.
	NeedsRecall bool
}

// BudgetError says what cannot fit in the budget and by how much. The log
// is untouched when it is returned.
type BudgetError struct {
	What   string // "pinned head", "tool schemas", "message seq 12 (user)"
	Need   int    // tokens it needs
	Budget int    // tokens available to it
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("budget: %s needs %d tokens but only %d fit (over by %d)", e.What, e.Need, e.Budget, e.Need-e.Budget)
}

func (s *State) needsRecall() bool {
	return len(s.blocks) > 0 || len(s.RefsByForm(Evicted)) > 0 || len(s.RefsByForm(Masked)) > 0
}

// fixed is what the window costs outside the memory block and the tail.
func (s *State) fixed(r Request, recall bool) int {
	f := r.SystemTokens + r.ToolsTokens + s.headTok + ReplyPrimer
	if recall {
		f += r.RecallTokens
	}
	return f
}

// Used returns the window's tokens for request r as it stands.
func (s *State) Used(r Request) int {
	return s.fixed(r, s.needsRecall()) + s.memTokens() + s.recallTokens() + s.tailTok
}

func (s *State) windowMessages() int {
	n := len(s.head) + len(s.tail) + len(s.recalls)
	if s.memMsg != nil {
		n++
	}
	return n
}

// OverTrigger reports whether the window has passed its trigger: the
// moment to compact (hysteresis: it then goes down to the target).
// The current request's recalled block has a share of its own above the
// trigger (auto-recall sizes it to fit the budget): it is not what makes
// the window compact. Earlier requests' blocks count: a compaction they
// bring leaves the next block its whole share, which recalls more for the
// request than the raw tail it takes (LoCoMo: 0.814 against 0.752 of
// evidence at 16k when stale blocks were let past the trigger).
func (s *State) OverTrigger(r Request) bool {
	used := s.Used(r)
	if t := s.policy.Trigger; t.Messages > 0 {
		return s.windowMessages() > t.Messages || used > s.budget
	}
	return used-s.keptRecallTokens() > s.policy.Trigger.TokensOf(s.budget) || used > s.budget
}

// Plan is a compaction decided on the state: which tool results to mask and
// which range [From, To] leaves the window. The caller turns it into events.
type Plan struct {
	Strategy Strategy
	Mask     []int64
	From, To int64
	// Kept are seqs inside [From, To] that stay live: the current turn's
	// user message when the cut passes it (the turn alone is over target).
	Kept []int64
	// Leaving are the items of [From, To] but Kept; Catalogue is their
	// deterministic one-line-per-turn rendering (what archive and mask
	// record).
	Leaving      []*Item
	Catalogue    string
	TokensBefore int // tokens the leaving items had in the window
	UsedBefore   int
	UsedAfter    int // estimated with the catalogue as the memory entry
}

// Empty reports whether the plan changes nothing.
func (p *Plan) Empty() bool { return len(p.Mask) == 0 && p.From == 0 }

// catalogueLines bounds one catalogue: a sixteenth of the budget at about 40
// tokens a line (an eighth left a small budget's tail a few hundred tokens
// after each compaction: LoCoMo at 8k); lines spread over what leaves.
func (s *State) catalogueLines() int { return max(8, s.budget/16/40) }

// Plan decides the compaction that brings the window from over its trigger
// to its target: mask first (strategy mask), then cut on a safe boundary,
// keeping the pinned head and the minimum tail. It returns a *BudgetError
// when even the tightest cut does not fit. It does not change the state.
func (s *State) Plan(r Request) (*Plan, error) { return s.plan(r, 0) }

// PlanUpTo is Plan with the cut fixed just after seq `to`: the plan a writer
// made before another one appended, kept when it still holds so that its
// (costly) observation need not be written again. It returns nil, nil when
// that cut is no longer possible or would not fit the budget.
func (s *State) PlanUpTo(r Request, to int64) (*Plan, error) {
	p, err := s.plan(r, to)
	if err == errNoSuchCut {
		return nil, nil
	}
	return p, err
}

var errNoSuchCut = errors.New("window: no such cut")

func (s *State) plan(r Request, fixedTo int64) (*Plan, error) {
	p := &Plan{Strategy: s.policy.Strategy, UsedBefore: s.Used(r)}
	// The current request's recalled block (chosen again after the step)
	// is in its own share, above the target as above the trigger; and
	// where blocks outlive their requests (a tool loop), the blocks of the
	// requests to come are given room under the target, so that with them
	// steps come no more often than without. In a chat they do not stack:
	// the share above the target is room enough, and the raw tail stays.
	target := s.policy.Target.TokensOf(s.budget)
	target -= min(target/2, s.recallReserve(), s.outlivingRecalls())
	target += s.keptRecallTokens()
	if f := s.fixed(r, true); f > s.budget {
		return nil, s.fixedError(r)
	}

	// Tokens each tail item costs after the masks of this plan.
	cost := make([]int, len(s.tail))
	for i, it := range s.tail {
		cost[i] = it.cost()
	}
	if s.policy.Strategy == Mask {
		seen := map[string]int{}
		for i := len(s.tail) - 1; i >= 0; i-- {
			it := s.tail[i]
			if len(it.Tools) == 0 || it.Form == Dropped {
				continue
			}
			over := false
			for _, t := range it.Tools {
				seen[t]++
				if seen[t] > s.policy.MaskKeepPerTool {
					over = true
				}
			}
			if over && it.Form != Masked {
				p.Mask = append(p.Mask, it.Seq)
				cost[i] = s.sizer.Message(it.Ref+"#masked", maskedForm(it)) + it.PostTokens
			}
		}
		slices.Sort(p.Mask)
	}
	fixed := s.fixed(r, true)
	used := fixed + s.memTokens() + s.recallTokens()
	for _, c := range cost {
		used += c
	}
	countOK := func(msgs int) bool {
		return s.policy.Target.Messages == 0 || msgs <= s.policy.Target.Messages
	}
	if used <= target && countOK(s.windowMessages()) && fixedTo == 0 {
		p.UsedAfter = used
		return p, nil
	}

	// Candidate cuts: boundaries in the tail (never index 0: nothing would
	// leave). A cut past the current turn's user message keeps that message
	// live: it leaves with the rest only in a later turn. A cut just after
	// it is the cut before it.
	turn := s.currentTurn()
	suffix := make([]int, len(s.tail)+1)
	for i := len(s.tail) - 1; i >= 0; i-- {
		suffix[i] = suffix[i+1] + cost[i]
	}
	var bounds []int
	for i := 1; i < len(s.tail); i++ {
		if s.tail[i].Boundary {
			bounds = append(bounds, i)
		}
	}
	cuts := bounds
	if turn >= 0 {
		cuts = slices.DeleteFunc(slices.Clone(bounds), func(i int) bool { return i == turn+1 })
	}
	kept := func(c int) int {
		if turn >= 0 && c > turn {
			return cost[turn]
		}
		return 0
	}
	if len(cuts) == 0 {
		if fixedTo > 0 {
			return nil, errNoSuchCut
		}
		if used > s.budget {
			return nil, s.tailError(used)
		}
		p.UsedAfter = used
		return p, nil
	}
	// The minimum tail starts at the MinTailTurns-th last boundary (a cut
	// just after the current request is the cut before it; 0 when that
	// leaves nothing: no cut outside the minimum tail).
	minStart := bounds[max(0, len(bounds)-s.policy.MinTailTurns)]
	if minStart == turn+1 {
		minStart = turn
	}
	maxLines := s.catalogueLines()
	blockTok := func(c int) int {
		// one catalogue line is about 40 tokens; the exact count is taken
		// below once the cut is chosen.
		// cuts is sorted: the turns before c are found by bisection, so
		// that choosing a cut stays O(n log n) on a 100k-message tail.
		before, _ := slices.BinarySearch(cuts, c)
		return 12 + 40*min(1+before, maxLines)
	}
	// A compaction keeps the current request's recalled block only.
	recalled := s.keptRecallTokens()
	after := func(c int) int { return fixed + s.memTokens() + recalled + blockTok(c) + suffix[c] + kept(c) }
	msgsAfter := func(c int) int {
		n := len(s.head) + 1 + len(s.tail) - c
		if recalled > 0 {
			n++
		}
		if turn >= 0 && c > turn {
			n++
		}
		return n
	}

	if fixedTo > 0 {
		i := slices.IndexFunc(cuts, func(c int) bool { return s.tail[c-1].Seq == fixedTo })
		if i < 0 || after(cuts[i]) > s.budget {
			return nil, errNoSuchCut
		}
		return s.finishPlan(p, cuts[i], turn, fixed, suffix, maxLines), nil
	}

	chosen := -1
	for _, c := range cuts {
		if c > minStart {
			break
		}
		if after(c) <= target && countOK(msgsAfter(c)) {
			chosen = c
			break
		}
	}
	if chosen < 0 && minStart > 0 {
		chosen = minStart
		// Keep more of the min tail's tokens only while the target holds.
		for _, c := range cuts {
			if c > minStart {
				break
			}
			if suffix[c] >= s.policy.MinTailTokens && after(c) <= target {
				chosen = c
				break
			}
		}
	}
	if chosen < 0 {
		// Nothing may leave outside the minimum tail: the current request
		// opened it and nothing else is before it.
		if used <= s.budget {
			p.UsedAfter = used
			return p, nil
		}
		chosen = 0
	}
	// Over the budget even so: cut into the minimum tail.
	if chosen == 0 || after(chosen) > s.budget {
		for _, c := range cuts {
			if c > chosen {
				chosen = c
				if after(c) <= s.budget {
					break
				}
			}
		}
	}
	if chosen == 0 {
		return nil, s.tailError(used)
	}
	if after(chosen) > s.budget {
		return nil, s.tailError(after(chosen))
	}
	return s.finishPlan(p, chosen, turn, fixed, suffix, maxLines), nil
}

// finishPlan fills in the plan for a cut before tail[chosen]; turn is the
// index of the current turn's user message in the tail (-1: none), which
// stays when the cut passes it.
func (s *State) finishPlan(p *Plan, chosen, turn, fixed int, suffix []int, maxLines int) *Plan {
	p.Leaving = s.tail[:chosen]
	stays := 0
	if turn >= 0 && turn < chosen {
		u := s.tail[turn]
		p.Leaving = slices.Concat(s.tail[:turn], s.tail[turn+1:chosen])
		if turn > 0 {
			p.Kept = []int64{u.Seq}
		}
		stays = u.cost()
	}
	p.From, p.To = p.Leaving[0].Seq, p.Leaving[len(p.Leaving)-1].Seq
	for _, it := range p.Leaving {
		p.TokensBefore += it.cost()
	}
	p.Catalogue = Catalogue(p.Leaving, maxLines)
	p.UsedAfter = fixed + s.memTokens() + s.keptRecallTokens() + s.sizer.Text(p.Catalogue) + 40 + suffix[chosen] + stays
	// Masks inside the leaving range are moot.
	p.Mask = slices.DeleteFunc(p.Mask, func(q int64) bool { return q <= p.To })
	return p
}

func (s *State) fixedError(r Request) error {
	switch {
	case r.ToolsTokens > s.budget:
		return &BudgetError{What: "the tool schemas", Need: r.ToolsTokens, Budget: s.budget}
	case r.SystemTokens+r.ToolsTokens > s.budget:
		return &BudgetError{What: "the system prompt and tool schemas", Need: r.SystemTokens + r.ToolsTokens, Budget: s.budget}
	}
	return &BudgetError{What: "the pinned head (system prompt, tool schemas and first user message)", Need: s.fixed(r, true), Budget: s.budget}
}

func (s *State) tailError(need int) error {
	// Name the largest message of the last turn: it is what cannot leave.
	var big *Item
	for i := len(s.tail) - 1; i >= 0; i-- {
		it := s.tail[i]
		if big == nil || it.Tokens > big.Tokens {
			big = it
		}
		if it.Boundary {
			break
		}
	}
	if big == nil {
		return &BudgetError{What: "the window", Need: need, Budget: s.budget}
	}
	return &BudgetError{What: fmt.Sprintf("the last turn (its largest message, seq %d (%s), alone is %d tokens)", big.Seq, big.Msg.Role, big.Tokens), Need: need, Budget: s.budget}
}

// Build returns the window for request r as the state stands, repaired
// (I4) and checked against the budget (I3). It costs O(1) in the thread's
// length between compactions: the rendered messages are cached.
func (s *State) Build(r Request) (*Window, error) {
	recall := s.needsRecall()
	u := Usage{
		Budget:         s.budget,
		Trigger:        s.policy.Trigger.TokensOf(s.budget),
		Target:         s.policy.Target.TokensOf(s.budget),
		System:         r.SystemTokens,
		Tools:          r.ToolsTokens,
		Head:           s.headTok,
		Memory:         s.memTokens(),
		Recalled:       s.recallTokens(),
		Tail:           s.tailTok,
		ThreadMessages: s.messages,
		ThreadTokens:   s.threadTokens,
		LastSeq:        s.lastSeq,
		Compactions:    s.compactions,
		Dropped:        s.dropped,
	}
	if recall {
		u.Recall = r.RecallTokens
	}
	msgs := s.show(len(s.out))
	// Repair: calls of the last step still waiting for their results get a
	// synthetic one at the end. Results without a call never enter the tail
	// (Dropped on arrival), earlier dangling calls were answered when their
	// step closed, and cuts fall on boundaries: nothing else can be orphaned.
	// The window shares out's array, the repair included (no copy of the
	// window per call; see shown).
	if len(s.pending) > 0 {
		ids := s.pendingInOrder()
		msgs = s.repaired(ids)
		for _, m := range msgs[len(s.out):] {
			u.Tail += s.sizer.Message("", m)
			u.Repaired++
		}
	}
	if len(s.recalls) > 0 {
		if d, ok := s.Recalled(s.turnSeq); ok {
			u.RecallBlock = &d
		}
	}
	u.Total = u.System + u.Tools + u.Recall + u.Head + u.Memory + u.Recalled + u.Tail + ReplyPrimer
	u.Messages = len(msgs)
	if u.Total > s.budget {
		if f := s.fixed(r, recall); f > s.budget {
			return nil, s.fixedError(r)
		}
		return nil, s.tailError(u.Total)
	}
	return &Window{Messages: msgs, Usage: u, NeedsRecall: recall}, nil
}

// FormsOf lists, for tests and the inspector, how every message event the
// state has seen appears: by seq, its form. Covered seqs are those inside
// a memory block's range.
func (s *State) FormsOf() map[int64]Form {
	out := map[int64]Form{}
	for _, it := range s.head {
		out[it.Seq] = it.Form
	}
	for _, it := range s.tail {
		out[it.Seq] = it.Form
	}
	for _, b := range s.blocks {
		for q := b.From; q <= b.To; q++ {
			if _, ok := out[q]; !ok {
				out[q] = Covered
			}
		}
	}
	return out
}

// RefsByForm returns the refs of tail items in form f (Evicted or Masked),
// in tail order. The lists are kept between masks and cuts: a call costs
// O(1), not O(window). The caller must not change the slice's elements.
func (s *State) RefsByForm(f Form) []string {
	if !s.refsOK {
		s.evictedRefs, s.maskedRefs = nil, nil
		for _, it := range s.tail {
			switch it.Form {
			case Evicted:
				s.evictedRefs = append(s.evictedRefs, it.Ref)
			case Masked:
				s.maskedRefs = append(s.maskedRefs, it.Ref)
			}
		}
		s.refsOK = true
	}
	var out []string
	switch f {
	case Evicted:
		out = s.evictedRefs
	case Masked:
		out = s.maskedRefs
	default:
		for _, it := range s.tail {
			if it.Form == f {
				out = append(out, it.Ref)
			}
		}
	}
	return out[:len(out):len(out)]
}

// Tail returns the live tail's items (read-only).
func (s *State) Tail() []*Item { return s.tail }

// Head returns the pinned head's items (read-only).
func (s *State) Head() []*Item { return s.head }

// Events turns the plan into the log events that record it: a masked event
// when it masks, a compacted event when a range leaves the window. d carries
// what replaces the range (the catalogue or an observation) and its
// provenance; its range and strategy are filled in from the plan.
func (p *Plan) Events(d CompactedData) ([]store.Event, error) {
	var evs []store.Event
	if len(p.Mask) > 0 {
		b, err := json.Marshal(MaskedData{Seqs: p.Mask})
		if err != nil {
			return nil, err
		}
		evs = append(evs, store.Event{Kind: store.KindMasked, Data: b})
	}
	if p.From > 0 {
		d.From, d.To = p.From, p.To
		if d.Strategy == "" {
			d.Strategy = p.Strategy
		}
		if d.Text == "" {
			d.Text = p.Catalogue
		}
		if d.TokensBefore == 0 {
			d.TokensBefore = p.TokensBefore
		}
		d.Masked = len(p.Mask)
		d.Kept = p.Kept
		b, err := json.Marshal(d)
		if err != nil {
			return nil, err
		}
		evs = append(evs, store.Event{Kind: store.KindCompacted, Data: b})
	}
	return evs, nil
}
