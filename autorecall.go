package mneme

import (
	"context"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
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
// search recalls nothing: it never fails the request.
func (t *Thread) autoRecall(ctx context.Context, ts *threadState, req window.Request, stepped bool) error {
	p := ts.policy
	st := ts.st
	if !p.AutoRecall || p.RecallTopK <= 0 || !st.NeedsRecall() {
		return nil
	}
	cur := st.CurrentRequest()
	if cur == nil {
		return nil
	}
	_, has := st.Recalled(cur.Seq)
	tried := ts.recallTried == cur.Seq && ts.recallAt == st.Compactions()
	if (has || tried) && !stepped {
		return nil
	}
	ts.recallTried, ts.recallAt = cur.Seq, st.Compactions()

	budget := st.Budget()
	room := st.RecallShare()
	// Never past the trigger: a recalled block must not be what compacts.
	// The share is each request's: blocks of earlier turns stay where they
	// are until the next compaction step (I6), but never push the window
	// past its trigger.
	used, mine := st.Used(req), 0
	if d, ok := st.Recalled(cur.Seq); ok {
		mine = ts.sz.Message("", window.RecalledMessage(d.Hits))
	}
	room = min(room, p.Trigger.TokensOf(budget)-(used-mine))
	if room < 64 {
		return nil
	}
	query := recallQuery(st, cur)
	if query == "" {
		return nil
	}
	hits, err := t.m.recall.Search(ctx, t.tenant, store.SearchQuery{Text: query, Thread: t.id, Limit: 4 * p.RecallTopK})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t.m.log.Warn("auto-recall: search failed", "tenant", t.tenant, "thread", t.id, "err", err)
		return nil
	}
	var chosen []window.RecallHit
	per := max(48, room/p.RecallTopK)
	for _, h := range hits {
		if len(chosen) == p.RecallTopK {
			break
		}
		if h.Seq == cur.Seq || h.Score < p.RecallMinScore || st.Shown(h.Seq) || h.Seq > st.LastSeq() {
			continue
		}
		evs, err := t.m.store.Load(ctx, t.tenant, t.id, h.Seq, 1)
		if err != nil || len(evs) == 0 || evs[0].Message == nil {
			continue
		}
		text, clipped := clipTokens(ts.sz, evs[0].Message.PlainText(), per)
		rh := window.RecallHit{Ref: h.Ref, Seq: h.Seq, Role: h.Role, Score: h.Score, Matched: matched(h.Snippet), Text: text, Clipped: clipped}
		if ts.sz.Message("", window.RecalledMessage(append(chosen, rh))) > room {
			break
		}
		chosen = append(chosen, rh)
	}
	if len(chosen) == 0 {
		return nil // the block shown so far (if any) stays
	}
	b, err := json.Marshal(window.NoteData{Recalled: &window.RecallData{For: cur.Seq, Query: query, Hits: chosen}})
	if err != nil {
		return err
	}
	ev := store.Event{Kind: store.KindNote, Data: b}
	if ts.owner != nil && len(ts.pending) > 0 {
		// A deferred request: the note goes into the log with it and its
		// reply, in the same durable append.
		ev.Seq, ev.At = st.LastSeq()+1, now().Round(0)
		if err := t.applyAll(ts, []store.Event{ev}); err != nil {
			ts.clear()
			return err
		}
		ts.pending = append(ts.pending, ev)
		return nil
	}
	// On a conflict another writer moved the log: the next call recalls.
	_, err = t.appendEvents(ctx, ts, []store.Event{ev}, func() ([]store.Event, error) { return nil, nil })
	return err
}

// recallQuery is what auto-recall searches with: the current request and
// the text of the reply before it (what the request answers), clipped.
func recallQuery(st *window.State, cur *window.Item) string {
	q := strings.TrimSpace(cur.Msg.PlainText())
	tail := st.Tail()
	for i := len(tail) - 1; i >= 0; i-- {
		if tail[i].Seq >= cur.Seq {
			continue
		}
		if m := tail[i].Msg; m.Role == message.Assistant {
			if prev := strings.TrimSpace(m.TextOf()); prev != "" {
				q += "\n" + prev
			}
		}
		break
	}
	return clipString(q, maxRecallQuery)
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
	if sz.Text(text) <= n {
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
