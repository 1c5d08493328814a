package mneme

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/token"
	"github.com/mnemehq/mneme/window"
)

// Auto-recall (docs/design.md, the window pipeline, 4c): when anything is
// out of the window, the archive is searched with the current request and
// the reply before it; the best hits not in the window are recorded in a
// note event, which the window state shows as a recalled block right
// before the request. It runs when a request arrives and at compaction
// steps, never in between, so the window still only grows at its end (I6);
// a replay reads the note and searches nothing (I7).

// maxRecallQuery bounds the query's text: the request's first part and
// the reply before it carry what it is about.
const maxRecallQuery = 800

// autoRecall records a recalled block for the current request when one is
// due: the policy asks for it, something is out of the window, and the
// request has none yet (or this call took a compaction step). A failing
// search recalls nothing: it never fails the request. dropped reports that
// stale blocks of earlier requests left the window: the prefix changed.
func (t *Thread) autoRecall(ctx context.Context, ts *threadState, req window.Request, stepped bool) (dropped bool, err error) {
	p := ts.policy
	st := ts.st
	if !p.AutoRecall || p.RecallTopK <= 0 || !st.NeedsRecall() {
		return false, nil
	}
	cur := st.CurrentRequest()
	if cur == nil {
		return false, nil
	}
	_, has := st.Recalled(cur.Seq)
	tried := ts.tried.Seq == cur.Seq && ts.tried.At == st.Compactions()
	if (has || tried) && !stepped {
		return false, nil
	}
	ts.tried = recallTry{Seq: cur.Seq, At: st.Compactions(), Last: st.LastSeq()}
	if err := t.writeUnshown(ctx, ts); err != nil {
		return false, err
	}

	// The block has a share of its own above the trigger (OverTrigger
	// leaves it out), bounded by what the budget has left: it is never
	// what compacts, and the window never passes the budget (I3).
	var stale []int64
	if !has {
		stale = st.StaleRecalls(cur.Seq)
	}
	used, mine := st.Used(req), st.RecalledTokensOf(append(stale, cur.Seq))
	room := min(st.RecallShare(), st.Budget()-(used-mine))
	query := recallQuery(st.Tail(), cur)
	chosen, err := t.recallHits(ctx, ts, query, cur.Seq, stale, room)
	if err != nil || (len(chosen) == 0 && len(stale) == 0) {
		return false, err // none: the block shown so far (if any) stays
	}
	b, err := json.Marshal(window.NoteData{Recalled: &window.RecallData{For: cur.Seq, Query: query.String(), Hits: chosen, Dropped: stale}})
	if err != nil {
		return false, err
	}
	// A deferred request's note goes into the log with it and its reply
	// (writeStep). On a conflict another writer moved the log: the next
	// call recalls.
	_, err = t.writeStep(ctx, ts, []store.Event{{Kind: store.KindNote, Data: b}}, func() ([]store.Event, error) { return nil, nil })
	return err == nil && len(stale) > 0, err
}

// writeUnshown writes a deferred request's pending events (and the steps
// deferred with them, writeStep) now when a message among them is not in
// the window whole: the search reads the store, and must find it (a new
// thread's first request whose history the step just left out).
func (t *Thread) writeUnshown(ctx context.Context, ts *threadState) error {
	for i := range ts.pending {
		if ev := &ts.pending[i]; ev.Message != nil && !ts.st.Shown(ev.Seq) {
			_, err := t.appendEvents(ctx, ts, nil, nil)
			return err
		}
	}
	return nil
}

// recallHits searches the archive with query and chooses, best first, the
// hits that are not in the window whole (nor the message at exclude), as
// many as the policy's top k and room allow. Each hit comes with the
// message just before it and the two after it when they are short and out
// of the window: the exchange it belongs to (a question and its answer, a
// call and its result), which is as often where the answer is as the hit
// itself. (LoCoMo: one before and two after hold more evidence for the
// tokens than one on each side, or two.) A failing search recalls nothing: it never fails the request.
//
// The request is searched alone first, then with the reply before it
// (what it answers): the reply's ids would otherwise be terms every hit
// must have, and its words outweigh a short request's.
func (t *Thread) recallHits(ctx context.Context, ts *threadState, q recallQ, exclude int64, dropped []int64, room int) ([]window.RecallHit, error) {
	p := ts.policy
	if room < 64 || q.request == "" {
		return nil, nil
	}
	var hits []store.Hit
	seen := map[int64]bool{}
	for _, text := range q.searches() {
		found, err := t.m.recall.Search(ctx, t.tenant, store.SearchQuery{Text: text, Thread: t.id, Limit: max(20, 2*p.RecallTopK)})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			t.m.log.Warn("auto-recall: search failed", "tenant", t.tenant, "thread", t.id, "err", err)
			return nil, nil
		}
		for _, h := range found {
			if !seen[h.Seq] {
				seen[h.Seq] = true
				hits = append(hits, h)
			}
		}
	}
	bt := newBlockTokens(ts.sz)
	chosen := t.chooseHits(ctx, ts, hits, exclude, dropped, room, bt)
	if ts.sz.Message("", window.RecalledMessage(chosen)) <= room {
		return chosen, nil
	}
	// The pieces' sum said the block fits and the whole says it does not:
	// blockTokens' premise is wrong for this counter and text. Choose again
	// counting every block whole (I3).
	t.m.log.Warn("auto-recall: a recalled block's pieces undercount it", "tenant", t.tenant, "thread", t.id, "tokenizer", ts.sz.c.Name())
	bt.whole = true
	return t.chooseHits(ctx, ts, hits, exclude, dropped, room, bt), nil
}

// chooseHits chooses, best first, the hits (and their neighbours) that fit
// room, counting blocks with bt.
func (t *Thread) chooseHits(ctx context.Context, ts *threadState, hits []store.Hit, exclude int64, dropped []int64, room int, bt blockTokens) []window.RecallHit {
	p, st := ts.policy, ts.st
	var chosen []window.RecallHit
	var counts []entryTokens // chosen's entries' tokens, in step
	taken := map[int64]bool{}
	usable := func(seq int64) bool {
		return seq != exclude && !taken[seq] && seq <= st.LastSeq() && !st.ShownWithout(seq, dropped)
	}
	// try adds rh when the block still fits room.
	try := func(at int, rh window.RecallHit) bool {
		next := slices.Insert(slices.Clone(chosen), at, rh)
		nextCounts := slices.Insert(slices.Clone(counts), at, bt.entry(rh))
		if !bt.fits(next, nextCounts, room) {
			return false
		}
		chosen, counts, taken[rh.Seq] = next, nextCounts, true
		return true
	}
	// A hit may fill a third of the block: a large tool result does not
	// crowd out the rest. A neighbour is shown only whole and short.
	per := max(64, room/3)
	short := min(per/2, 160)
	var near []int64
	for _, h := range hits {
		if h.Score >= p.RecallMinScore && usable(h.Seq) {
			near = append(near, h.Seq)
		}
	}
	nb := t.newNeighbourhoods(near)
	nb.ts = ts
	primary := 0
	for _, h := range hits {
		if primary == p.RecallTopK {
			break
		}
		if h.Score < p.RecallMinScore || !usable(h.Seq) {
			continue
		}
		evs, err := nb.around(ctx, h.Seq, h.Ref)
		if err != nil {
			continue
		}
		var before, hit *store.Event
		var after []*store.Event
		for i := range evs {
			e := &evs[i]
			switch {
			case e.Message == nil:
			case e.Seq < h.Seq:
				before = e
			case e.Seq == h.Seq:
				hit = e
			case len(after) < 2:
				after = append(after, e)
			}
		}
		if hit == nil {
			continue
		}
		text, clipped := clipTokens(ts.sz, hit.Message.PlainText(), per)
		at := len(chosen)
		if !try(at, window.RecallHit{Ref: h.Ref, Seq: h.Seq, Role: h.Role, Score: h.Score, Matched: matched(h.Snippet), Text: text, Clipped: clipped}) {
			continue // a shorter hit further down may still fit
		}
		primary++
		for _, e := range append([]*store.Event{before}, after...) {
			if e == nil || !usable(e.Seq) {
				continue
			}
			text := e.Message.PlainText()
			if strings.TrimSpace(text) == "" || ts.sz.CachedText(text) > short {
				continue
			}
			i := at // before the hit, or after it in seq order
			if e.Seq > h.Seq {
				i = slices.IndexFunc(chosen, func(c window.RecallHit) bool { return c.Seq == h.Seq }) + 1
				for i < len(chosen) && chosen[i].Seq > h.Seq && chosen[i].Seq < e.Seq {
					i++
				}
			}
			try(i, window.RecallHit{Ref: e.Ref, Seq: e.Seq, Role: e.Message.Role, Context: true, Text: text})
		}
	}
	return chosen
}

// blockTokens counts recalled blocks by their pieces, so that choosing
// hits costs the hits' tokens rather than the whole block's for every hit
// tried (counting the block whole each time was most of a request's CPU
// at 500 messages). A block's text (window.RecalledMessage) is cut right
// before each entry's "## ", which follows a newline: the pieces are the
// preamble with the separator after it, and each entry with the separator
// after it, or the close after the last. The exact BPE encodings always
// start a piece of their pre-tokenizer at a "#" after a newline, so the
// block's count is the sum of its pieces' counts; the estimators weigh
// features of the text (the cl100k count, digits, newlines, runs of
// blanks) that add up over those cuts, and round up each piece, so the sum
// is never less than the block's count. TestBlockTokens checks both.
type blockTokens struct {
	sz    sizer
	exact bool // the counter is a BPE encoding: the sum is the count
	whole bool // count every block whole (the reference, and the fallback)
	base  int  // a block's tokens beyond its entries': the message's own, the preamble and one separator
	empty int  // a block without entries
}

// entryTokens are an entry's tokens with the separator after it (mid) and
// with the close after it (last).
type entryTokens struct{ mid, last int }

func newBlockTokens(sz sizer) blockTokens {
	empty := window.RecalledMessage(nil)
	own := sz.Message("", empty) - sz.Text(empty.TextOf())
	name := sz.c.Name()
	return blockTokens{
		sz:    sz,
		exact: name == token.O200kBase || name == token.Cl100kBase,
		base:  own + sz.Text(window.RecalledPreamble+window.RecalledSep),
		empty: sz.Message("", empty),
	}
}

func (b blockTokens) entry(h window.RecallHit) entryTokens {
	if b.whole {
		return entryTokens{}
	}
	e := window.RecalledEntry(h)
	return entryTokens{mid: b.sz.CachedText(e + window.RecalledSep), last: b.sz.CachedText(e + window.RecalledClose)}
}

// sum is the pieces' count of a block whose entries count es.
func (b blockTokens) sum(es []entryTokens) int {
	if len(es) == 0 {
		return b.empty
	}
	n := b.base + es[len(es)-1].last
	for _, e := range es[:len(es)-1] {
		n += e.mid
	}
	return n
}

// fits reports whether the block of hits, whose entries count es, is at
// most room tokens.
func (b blockTokens) fits(hits []window.RecallHit, es []entryTokens, room int) bool {
	if !b.whole {
		if b.sum(es) <= room {
			return true
		}
		if b.exact {
			return false
		}
	}
	return b.sz.Message("", window.RecalledMessage(hits)) <= room
}

// recallNeighbourhood is how far (in events) a hit's neighbours are looked
// for: notes and compaction events may sit between two messages.
const recallNeighbourhood = 4

// neighbourhoods reads the events around hits: each hit's neighbourhood
// (the 2*recallNeighbourhood+1 events from recallNeighbourhood before it),
// those of hits close together in one Load. One Load per hit was half of
// auto-recall's CPU on a 500-message thread: a hundred hits' neighbourhoods
// overlap, and each Load decodes (or queries) its events again.
type neighbourhoods struct {
	t *Thread
	// ts, when set, keeps what is read (ts.recall), and that serves the
	// reads it holds.
	ts     *threadState
	groups []seqSpan // sorted, disjoint
	evs    [][]store.Event
	err    []error
	done   []bool
	kept   []bool // the group's events came from ts.recall
}

// keptRecall is the events a thread's state keeps of what auto-recall read
// around its hits (neighbourhoods), by seq: the next requests' recalls read
// the same neighbourhoods again, and a SQLite Load decodes every event it
// returns (the first recall after a stale block was dropped read 480
// events of a 500-message thread again, 5 to 10 ms of the request). An
// event is the log's at its seq until the log is deleted, when the state
// is cleared; a hit whose ref is not the kept event's (the log was deleted
// and written again by another process) drops them. They are bounded per
// state (maxRecallEvs) and across the Engine's states
// (maxRecallKeptTokens), and dropped with the state.
type keptRecall struct {
	evs    map[int64]store.Event
	tokens int64
	total  *atomic.Int64 // the Engine's recallKept; nil: nothing is kept
}

const (
	maxRecallEvs        = 2048
	maxRecallKeptTokens = 4_000_000
)

// keepForRecall keeps events the thread's log now holds (what an append
// returned, as a Load returns them) for auto-recall: a hit's neighbourhood
// among them is read from the state instead of loaded and decoded again
// (the first recalls after a new thread's history was written loaded the
// neighbourhoods of a hundred hits). Within the bounds of keptRecall.
func (ts *threadState) keepForRecall(evs []store.Event) {
	if ts.policy.AutoRecall && ts.policy.RecallTopK > 0 {
		ts.recall.keep(evs)
	}
}

func (k *keptRecall) drop() {
	if k.total != nil {
		k.total.Add(-k.tokens)
	}
	k.evs, k.tokens = nil, 0
}

// keep adds evs, within the bounds: past them the state's events are
// dropped first, and when the Engine's are still passed, none is kept.
func (k *keptRecall) keep(evs []store.Event) {
	if k.total == nil {
		return
	}
	var tok int64
	for i := range evs {
		tok += eventWeight(&evs[i])
	}
	if len(k.evs)+len(evs) > maxRecallEvs || k.total.Load()+tok > maxRecallKeptTokens {
		k.drop()
		if len(evs) > maxRecallEvs || k.total.Load()+tok > maxRecallKeptTokens {
			return
		}
	}
	if k.evs == nil {
		k.evs = make(map[int64]store.Event, len(evs))
	}
	for _, ev := range evs {
		if _, ok := k.evs[ev.Seq]; !ok {
			k.evs[ev.Seq] = ev
			w := eventWeight(&ev)
			k.tokens += w
			k.total.Add(w)
		}
	}
}

// eventWeight is what an event kept costs against the bound: its tokens,
// or its data's size for an event without (a note).
func eventWeight(ev *store.Event) int64 {
	return int64(max(ev.Tokens, len(ev.Data)/4)) + 1
}

// seqSpan is the seqs [from, to].
type seqSpan struct{ from, to int64 }

// Hits whose neighbourhoods are at most neighbourhoodGap events apart are
// read together, in spans of at most neighbourhoodSpan events.
const (
	neighbourhoodGap  = 2*recallNeighbourhood + 1
	neighbourhoodSpan = 256
)

func neighbourhoodOf(seq int64) seqSpan {
	from := max(1, seq-recallNeighbourhood)
	return seqSpan{from, from + 2*recallNeighbourhood}
}

func (t *Thread) newNeighbourhoods(seqs []int64) *neighbourhoods {
	seqs = slices.Clone(seqs)
	slices.Sort(seqs)
	nb := &neighbourhoods{t: t}
	for _, s := range seqs {
		sp := neighbourhoodOf(s)
		if n := len(nb.groups); n > 0 {
			g := &nb.groups[n-1]
			if sp.from <= g.to+1+neighbourhoodGap && sp.to-g.from < neighbourhoodSpan {
				g.to = max(g.to, sp.to)
				continue
			}
		}
		nb.groups = append(nb.groups, sp)
	}
	nb.evs, nb.err, nb.done, nb.kept = make([][]store.Event, len(nb.groups)), make([]error, len(nb.groups)), make([]bool, len(nb.groups)), make([]bool, len(nb.groups))
	return nb
}

// load returns what Load(from, n) returns of the thread's log as the state
// knows it: from the state's kept events when they hold every seq of it,
// else from the store, keeping what it read. kept reports the former.
func (nb *neighbourhoods) load(ctx context.Context, from int64, n int) (evs []store.Event, kept bool, err error) {
	ts := nb.ts
	if ts != nil && ts.recall.evs != nil && ts.st != nil {
		if to := min(from+int64(n)-1, ts.logSeq()); to >= from {
			out := make([]store.Event, 0, to-from+1)
			for s := from; s <= to; s++ {
				ev, ok := ts.recall.evs[s]
				if !ok {
					break
				}
				out = append(out, ev)
			}
			if int64(len(out)) == to-from+1 {
				return out, true, nil
			}
		}
	}
	evs, err = nb.t.m.store.Load(ctx, nb.t.tenant, nb.t.id, from, n)
	if err == nil && ts != nil {
		ts.recall.keep(evs)
	}
	return evs, false, err
}

// around returns the events of seq's neighbourhood: what
// Load(neighbourhoodOf(seq).from, 2*recallNeighbourhood+1) returns. ref,
// when set, is the ref of the event at seq (the hit's): kept events that
// say otherwise are not this log's, and are dropped.
func (nb *neighbourhoods) around(ctx context.Context, seq int64, ref string) ([]store.Event, error) {
	evs, kept, err := nb.aroundOnce(ctx, seq)
	if err != nil || !kept || ref == "" {
		return evs, err
	}
	if i := slices.IndexFunc(evs, func(e store.Event) bool { return e.Seq == seq }); i >= 0 && evs[i].Ref == ref {
		return evs, nil
	}
	nb.ts.recall.drop()
	for i := range nb.groups {
		if nb.kept[i] {
			nb.done[i], nb.kept[i] = false, false
		}
	}
	evs, _, err = nb.aroundOnce(ctx, seq)
	return evs, err
}

func (nb *neighbourhoods) aroundOnce(ctx context.Context, seq int64) ([]store.Event, bool, error) {
	sp := neighbourhoodOf(seq)
	i, _ := slices.BinarySearchFunc(nb.groups, sp.from, func(g seqSpan, from int64) int { return cmp.Compare(g.to, from) })
	if i == len(nb.groups) || nb.groups[i].from > sp.from || nb.groups[i].to < sp.to {
		// Not among the seqs it was made for.
		return nb.load(ctx, sp.from, 2*recallNeighbourhood+1)
	}
	if !nb.done[i] {
		g := nb.groups[i]
		nb.evs[i], nb.kept[i], nb.err[i] = nb.load(ctx, g.from, int(g.to-g.from+1))
		nb.done[i] = true
	}
	if nb.err[i] != nil {
		return nil, false, nb.err[i]
	}
	evs := nb.evs[i]
	lo, _ := slices.BinarySearchFunc(evs, sp.from, func(e store.Event, s int64) int { return cmp.Compare(e.Seq, s) })
	hi, _ := slices.BinarySearchFunc(evs, sp.to+1, func(e store.Event, s int64) int { return cmp.Compare(e.Seq, s) })
	return evs[lo:hi], nb.kept[i], nil
}

// recallQ is what auto-recall searches with: the current request and the
// text of the reply before it (what the request answers).
type recallQ struct{ request, reply string }

func newRecallQ(request message.Message, before *message.Message) recallQ {
	q := recallQ{request: clipString(strings.TrimSpace(request.PlainText()), maxRecallQuery)}
	if before != nil && before.Role == message.Assistant {
		q.reply = strings.TrimSpace(before.TextOf())
	}
	return q
}

// String is the query as the usage reports it.
func (q recallQ) String() string {
	if q.reply == "" {
		return q.request
	}
	return clipString(q.request+"\n"+q.reply, maxRecallQuery)
}

// searches are the query texts, in order.
func (q recallQ) searches() []string {
	if q.reply == "" {
		return []string{q.request}
	}
	return []string{q.request, q.String()}
}

// recallQuery is the query for the current request cur.
func recallQuery(tail []*window.Item, cur *window.Item) recallQ {
	for i := len(tail) - 1; i >= 0; i-- {
		if tail[i].Seq < cur.Seq {
			return newRecallQ(*cur.Msg, tail[i].Msg)
		}
	}
	return newRecallQ(*cur.Msg, nil)
}

// matched returns the terms a snippet marks as matches («…»).
func matched(snippet string) []string {
	var out []string
	seen := map[string]bool{}
	for {
		i := strings.Index(snippet, "«")
		if i < 0 {
			return out
		}
		snippet = snippet[i+len("«"):]
		j := strings.Index(snippet, "»")
		if j < 0 {
			return out
		}
		w := strings.ToLower(snippet[:j])
		snippet = snippet[j+len("»"):]
		if w != "" && !seen[w] && len(out) < 8 {
			seen[w] = true
			out = append(out, w)
		}
	}
}

// clipTokens cuts text to about n tokens on a rune boundary.
func clipTokens(sz sizer, text string, n int) (string, bool) {
	if sz.CachedText(text) <= n {
		return text, false
	}
	lo, hi := 0, len(text)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if sz.Text(clipString(text, mid)) <= n {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return clipString(text, lo) + " …", true
}

func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
