package mneme

import (
	"context"
	"slices"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/window"
)

// PreviewHistory returns the messages of the window a model call with
// history msgs would get (what AppendHistory would give, before the
// compaction it may run), appending nothing and writing nothing: the
// thread's current window followed by what msgs add to the log, under the
// request's system prompt. A history the log does not continue (it would
// start a branch or re-run a prefix), or a thread with no log yet, gives
// msgs as they are. It answers token-count requests for the window rather
// than for the client's whole history.
func (t *Thread) PreviewHistory(ctx context.Context, msgs []message.Message, o HistoryOptions) ([]message.Message, error) {
	if err := validate(msgs); err != nil {
		return nil, err
	}
	if err := backend.CheckScope(t.tenant, t.id); err != nil {
		return nil, err
	}
	ts, err := t.lockWarm(ctx)
	if err != nil {
		return nil, err
	}
	defer t.m.unlock(ts)
	if ts.st.LastSeq() == 0 {
		return msgs, nil
	}
	fresh, sys := msgs, []message.Message(nil)
	if !o.Append {
		req := requestProjection(msgs)
		have, in := ts.proj.result(), req.units
		k := 0
		for k < len(have) && k < len(in) && have[k].h == in[k].h {
			k++
		}
		if k < len(have) {
			return msgs, nil
		}
		switch {
		case k == 0:
			fresh = msgs[leadingSystem(msgs):]
		case k < len(in):
			fresh = msgs[in[k-1].last+1:]
		default:
			fresh = nil
		}
		sys = msgs[:leadingSystem(msgs)]
	}
	r := t.request(ts, o.Window)
	delta := t.systemDelta(ts, &r)
	w, err := ts.st.Build(r)
	if err != nil {
		return nil, err
	}
	t.applySystem(ts, w, delta)
	cur := w.Messages
	if len(sys) > 0 { // the request's own system prompt, as a model call would switch to it
		drop := leadingSystem(cur)
		cur = append(append([]message.Message(nil), sys...), cur[drop:]...)
	}
	out := make([]message.Message, 0, len(cur)+len(fresh)+1)
	out = append(append(out, cur...), fresh...)
	return t.previewRecall(ctx, ts, r, out, fresh)
}

// previewRecall adds the recalled block a model call would get for the
// last request among fresh, as auto-recall would choose it (searched now,
// recorded nowhere), sized by what the budget leaves after the preview.
func (t *Thread) previewRecall(ctx context.Context, ts *threadState, r window.Request, out, fresh []message.Message) ([]message.Message, error) {
	st := ts.st
	at := len(out) - len(fresh)
	for i := len(fresh) - 1; i >= 0; i-- {
		if fresh[i].StartsTurn() {
			at += i
			break
		}
		if i == 0 {
			return out, nil // fresh opens no turn: the current block stands
		}
	}
	if len(fresh) == 0 || !ts.policy.AutoRecall || ts.policy.RecallTopK <= 0 || !st.NeedsRecall() {
		return out, nil
	}
	used := st.Used(r)
	for i := range fresh {
		used += ts.sz.Message("", fresh[i])
	}
	// The stale blocks the request would drop (StaleRecalls) leave first.
	stale := st.StaleRecalls(st.LastSeq() + 1)
	used -= st.RecalledTokensOf(stale)
	for _, seq := range stale {
		text, _ := st.RecalledText(seq)
		if i := slices.IndexFunc(out[:at], func(m message.Message) bool { return m.Role == message.User && m.PlainText() == text }); i >= 0 {
			out = slices.Delete(out, i, i+1)
			at--
		}
	}
	var before *message.Message
	if at > 0 {
		before = &out[at-1]
	}
	hits, err := t.recallHits(ctx, ts, newRecallQ(out[at], before), 0, stale, min(st.RecallShare(), st.Budget()-used))
	if err != nil || len(hits) == 0 {
		return out, err
	}
	return slices.Insert(out, at, window.RecalledMessage(hits)), nil
}
