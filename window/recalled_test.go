package window

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// recallNote is the note event the engine writes for a request at seq.
func recallNote(seq int64, texts ...string) store.Event {
	d := RecallData{For: seq, Query: "q"}
	for i, t := range texts {
		d.Hits = append(d.Hits, RecallHit{Ref: fmt.Sprintf("m_old%d", i), Seq: int64(i + 3), Role: message.User, Score: 1, Matched: []string{"q"}, Text: t})
	}
	b, _ := json.Marshal(NoteData{Recalled: &d})
	return store.Event{Kind: store.KindNote, Data: b}
}

// TestRecalledBlock: a recall note shows its hits right before the request
// it was made for, the rest of the window byte for byte as before (I6);
// the block counts in the usage and the budget; it stays in place while
// the window grows; a compaction keeps the current request's block only;
// a snapshot restores it.
func TestRecalledBlock(t *testing.T) {
	p := DefaultPolicy()
	p.MinTailTokens = 500
	d := newDriver(t, p, 8000)
	d.add(message.NewText(message.System, "sys"), message.NewText(message.User, "Goal: fix INV-4401"))
	stepN := 0
	step := func() *Window {
		stepN++
		id := fmt.Sprintf("c%d", stepN)
		d.add(message.NewToolCalls("step", message.Part{ToolCallID: id, ToolName: "grep", Arguments: "{}"}),
			message.NewToolResult(id, strings.Repeat(fmt.Sprintf("hit %d of grep\n", stepN), 40)))
		w, err := d.window()
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, d, w)
		return w
	}
	for d.comps == 0 {
		step()
	}
	ask := func(text string) (*Window, *Window, int64) {
		prev, err := d.window()
		if err != nil {
			t.Fatal(err)
		}
		d.add(message.NewText(message.User, text))
		seq := d.st.LastSeq()
		d.append(recallNote(seq, "the deploy key is at secret/shop/deploy-7731"))
		w, err := d.window()
		if err != nil {
			t.Fatal(err)
		}
		return prev, w, seq
	}
	prev, w, u1 := ask("Where is the deploy key?")
	n := len(w.Messages)
	if w.Messages[n-1].PlainText() != "Where is the deploy key?" || !strings.HasPrefix(w.Messages[n-2].PlainText(), "<mneme:recalled>") {
		t.Fatalf("the recalled block is not right before the request")
	}
	if !reflect.DeepEqual(encode(prev.Messages), encode(w.Messages[:n-2])) {
		t.Fatal("the window before the block changed")
	}
	if w.Usage.Recalled == 0 || w.Usage.RecallBlock == nil || w.Usage.RecallBlock.For != u1 {
		t.Fatalf("usage: %+v", w.Usage)
	}
	total := d.req.SystemTokens + d.req.ToolsTokens + d.req.RecallTokens + ReplyPrimer
	for _, m := range w.Messages {
		total += charSizer{}.Message("", m)
	}
	if total != w.Usage.Total {
		t.Fatalf("usage total %d, recount %d", w.Usage.Total, total)
	}
	// It stays where it is while the window grows.
	comps := d.comps
	last := w
	for d.comps == comps {
		w = step()
		if d.comps == comps && !reflect.DeepEqual(encode(last.Messages), encode(w.Messages[:len(last.Messages)])) {
			t.Fatal("the prefix changed between compactions")
		}
		last = w
	}
	if _, ok := d.st.Recalled(u1); !ok {
		t.Fatal("a compaction dropped the current request's block")
	}
	// A later request gets its own block; at the next compaction the
	// earlier one leaves.
	_, w, u2 := ask("And who rotates it?")
	var all strings.Builder
	for _, m := range w.Messages {
		all.WriteString(m.PlainText())
	}
	if got := strings.Count(all.String(), "<mneme:recalled>"); got != 2 {
		t.Fatalf("%d recalled tags, want two blocks", got)
	}
	comps = d.comps
	for d.comps == comps {
		step()
	}
	if _, ok := d.st.Recalled(u1); ok {
		t.Fatal("an earlier request's block outlived a compaction")
	}
	if _, ok := d.st.Recalled(u2); !ok {
		t.Fatal("the current request's block left at a compaction")
	}
	// A snapshot restores the blocks.
	data, err := d.st.Snapshot().Encode()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(data, charSizer{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := d.st.Build(d.req)
	b, _ := r.Build(d.req)
	if !reflect.DeepEqual(encode(a.Messages), encode(b.Messages)) || a.Usage.Total != b.Usage.Total {
		t.Fatal("the restored window differs")
	}
}

// TestCompactionRecallRoom: a compaction leaves room under its target for
// the blocks of the requests to come only when blocks outlive their
// requests (an earlier request's block still shown, or the current turn a
// long tool loop): in a chat each request's block leaves with it, and the
// free share above the target is the next block's room, so the raw tail
// stays up to the target.
func TestCompactionRecallRoom(t *testing.T) {
	p := DefaultPolicy()
	p.MinTailTokens = 200
	p.MinTailTurns = 1
	const budget = 8000
	// plan returns the compaction's plan, what the current request's block
	// costs, and what the earlier request's block costs.
	plan := func(earlier, loop bool) (pl *Plan, kept, old int) {
		d := newDriver(t, p, budget)
		d.add(message.NewText(message.System, "sys"), message.NewText(message.User, "Let us talk every evening."))
		var oldSeq int64
		for i := 0; i < 200; i++ {
			d.add(message.NewText(message.User, fmt.Sprintf("Day %d: %s", i, strings.Repeat("a quiet walk by the river, ", 3))),
				message.NewText(message.Assistant, fmt.Sprintf("Noted, day %d.", i)))
			if earlier && i == 180 {
				// A request whose block is followed by a long tool turn:
				// StaleRecalls keeps it.
				d.add(message.NewText(message.User, "Which day was rainy?"))
				oldSeq = d.st.LastSeq()
				d.append(recallNote(oldSeq, strings.Repeat("day 3 was rainy. ", 60)))
				d.add(message.NewToolCalls("", message.Part{ToolCallID: "c1", ToolName: "grep", Arguments: "{}"}),
					message.NewToolResult("c1", strings.Repeat("grep hit\n", 200)))
			}
		}
		d.add(message.NewText(message.User, "What did I do on day 2?"))
		cur := d.st.LastSeq()
		d.append(recallNote(cur, strings.Repeat("day 2: a quiet walk by the river. ", 20)))
		if loop {
			d.add(message.NewToolCalls("", message.Part{ToolCallID: "c2", ToolName: "grep", Arguments: "{}"}),
				message.NewToolResult("c2", strings.Repeat("grep hit\n", 200)))
		}
		if !d.st.OverTrigger(d.req) {
			t.Fatalf("earlier %v loop %v: not over the trigger: %d of %d", earlier, loop, d.st.Used(d.req), budget)
		}
		if earlier && d.st.RecalledTokensOf([]int64{oldSeq}) == 0 {
			t.Fatal("the earlier block is not in the window")
		}
		pl, err := d.st.Plan(d.req)
		if err != nil || pl == nil {
			t.Fatalf("plan %v, %v", pl, err)
		}
		return pl, d.st.RecalledTokensOf([]int64{cur}), d.st.RecalledTokensOf([]int64{oldSeq})
	}
	target := p.Target.TokensOf(budget)
	chat, kept, _ := plan(false, false)
	if chat.UsedAfter <= target/2+kept {
		t.Errorf("chat: %d tokens after the compaction, no more than half the target %d and the block %d: it left room the next block does not need", chat.UsedAfter, target, kept)
	}
	if outlives, kept, old := plan(true, false); outlives.UsedAfter > target+kept-old {
		t.Errorf("an earlier block outlives its request: %d tokens after the compaction, over the target %d and the current block %d less the earlier block %d", outlives.UsedAfter, target, kept, old)
	}
	if loop, kept, _ := plan(false, true); loop.UsedAfter > target-target/2+kept {
		t.Errorf("the current turn is a tool loop: %d tokens after the compaction, over half the target %d and the block %d: no room left for the blocks to come", loop.UsedAfter, target, kept)
	}
}
