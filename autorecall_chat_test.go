package mneme_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/window"
)

// chatFacts are planted in early user turns of a chat; each is asked about
// once it has left the window. The assistant's answer right after each is
// where a question's answer often is (LoCoMo): it must come with the hit.
var chatFacts = []struct{ said, reply, question, want, wantReply string }{
	{"My sister Marguerite adopted a greyhound called Biscotti from the shelter in Leuven last spring, after months of paperwork and home visits.",
		"What a lovely name for a greyhound!", "What is the name of the greyhound my sister adopted?", "Biscotti", "lovely name for a greyhound"},
	{"I finally finished the watercolour of the lighthouse at Cap Fréhel, the one I started during the storm week in Brittany.",
		"The storm week must have given it real drama.", "Which lighthouse did I paint in watercolour?", "Cap Fréhel", "storm week must have given"},
}

// chatSession plays the planted turns, then chit-chat until both facts are
// out of the window.
func chatSession(t *testing.T, th *mneme.Thread) *window.Window {
	t.Helper()
	ctx := context.Background()
	turn := func(user, reply string) *window.Window {
		_, w, err := th.AppendWindow(ctx, []message.Message{message.NewText(message.User, user), message.NewText(message.Assistant, reply)}, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w := turn("Hi! Can we catch up like every evening?", "Of course, tell me about your day.") // the pinned head
	for _, f := range chatFacts {
		w = turn(f.said, f.reply)
	}
	for n := 0; n < 120; n++ {
		w = turn(fmt.Sprintf("Day %d: I met Dr. Okafor-%d at 14:%02d to sign contract K-%04d for the Rotterdam depot, budget EUR %d,%03d, due on March %d.", n, n, n%60, 1000+n, 10+n, 7*n%1000, 1+n%28),
			fmt.Sprintf("Noted: contract K-%04d with Dr. Okafor-%d, EUR %d,%03d, due March %d.", 1000+n, n, 10+n, 7*n%1000, 1+n%28))
	}
	for _, f := range chatFacts {
		if strings.Contains(windowText(w.Messages), f.said) || strings.Contains(windowText(w.Messages), f.reply) {
			t.Fatalf("%q is still in the window whole: the test proves nothing", f.said)
		}
	}
	return w
}

func chatPolicy() *mneme.Policy {
	p := mneme.DefaultPolicy()
	p.BudgetTokens = 4000
	p.ReserveOutputTokens = 500
	p.MinTailTokens = 300
	return &p
}

// TestAutoRecallChat: in a chat (no tools) a question about what left the
// window gets a recalled block with the hit and the reply after it (marked
// context); the next question, after a short exchange, replaces the
// earlier (large) block: the window is the previous one without it, the
// call is a step, the note names the dropped block, and a replay from the
// log gives the same window (I7).
func TestAutoRecallChat(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	m := openSQLite(t, path, chatPolicy())
	th := m.Thread("default", "chat")
	chatSession(t, th)
	// From the target, the first question's block and the reply stay under
	// the trigger (refs are random, so sizes vary a little between runs).
	if _, err := th.Compact(ctx, mneme.WindowOptions{}); err != nil {
		t.Fatal(err)
	}

	ask := func(i int) *window.Window {
		_, w, err := th.AppendWindow(ctx, []message.Message{message.NewText(message.User, chatFacts[i].question)}, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := len(w.Messages)
		block := w.Messages[n-2].PlainText()
		if w.Messages[n-1].PlainText() != chatFacts[i].question || !strings.HasPrefix(block, "<mneme:recalled>") {
			t.Fatalf("question %d: no recalled block right before it: %+v\n%s", i, w.Usage, windowText(w.Messages[max(0, n-3):]))
		}
		if !strings.Contains(block, chatFacts[i].said) || !strings.Contains(block, chatFacts[i].reply) {
			t.Fatalf("question %d: the block lacks the fact or the reply after it: %s", i, block)
		}
		ctxHit := false
		for _, h := range w.Usage.RecallBlock.Hits {
			ctxHit = ctxHit || (h.Context && strings.Contains(h.Text, chatFacts[i].wantReply))
		}
		if !ctxHit {
			t.Fatalf("question %d: the reply is not marked as context: %+v", i, w.Usage.RecallBlock.Hits)
		}
		if w.Usage.Total > w.Usage.Budget {
			t.Fatalf("question %d: %d tokens over the budget %d", i, w.Usage.Total, w.Usage.Budget)
		}
		return w
	}
	w1 := ask(0)
	_, wr, err := th.AppendWindow(ctx, []message.Message{message.NewText(message.Assistant, "Biscotti, yes.")}, mneme.WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if wr.Usage.Step {
		t.Fatal("the reply took a step")
	}
	w2 := ask(1)
	if w2.Usage.Compactions != w1.Usage.Compactions {
		t.Fatal("a compaction came between the questions: the test is sized so that none does")
	}
	if !w2.Usage.Step || len(w2.Usage.RecallBlock.Dropped) != 1 || w2.Usage.RecallBlock.Dropped[0] != w1.Usage.RecallBlock.For {
		t.Fatalf("the earlier block was not dropped as a step: step %v, dropped %v", w2.Usage.Step, w2.Usage.RecallBlock.Dropped)
	}
	if strings.Count(windowText(w2.Messages), "<mneme:recalled>") != 1 {
		t.Fatal("two recalled blocks in the window")
	}
	// The window is the previous one without its block, then the reply,
	// the new block and the question.
	n1 := len(w1.Messages)
	want := append(append([]message.Message{}, w1.Messages[:n1-2]...), w1.Messages[n1-1], wr.Messages[len(wr.Messages)-1])
	got := w2.Messages[:len(w2.Messages)-2]
	a, _ := message.EncodeOpenAIMessages(want)
	b, _ := message.EncodeOpenAIMessages(got)
	if !bytes.Equal(a, b) {
		t.Fatalf("the window changed elsewhere than the dropped block:\n%s\n%s", a, b)
	}
	// I7: a fresh engine on the same file rebuilds the same window.
	m2 := openSQLite(t, path, chatPolicy())
	w3, err := m2.Thread("default", "chat").Window(ctx, mneme.WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ = message.EncodeOpenAIMessages(w2.Messages)
	b, _ = message.EncodeOpenAIMessages(w3.Messages)
	if !bytes.Equal(a, b) {
		t.Fatal("the replayed window differs")
	}
}

// TestPreviewRecalls: PreviewHistory shows the recalled block a call with
// the question would get, right before it, and writes nothing.
func TestPreviewRecalls(t *testing.T) {
	ctx := context.Background()
	m := openSQLite(t, filepath.Join(t.TempDir(), "m.db"), chatPolicy())
	th := m.Thread("default", "preview")
	chatSession(t, th)
	before, err := m.Store().Load(ctx, "default", "preview", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	q := message.NewText(message.User, chatFacts[1].question)
	msgs, err := th.PreviewHistory(ctx, []message.Message{q}, mneme.HistoryOptions{Append: true})
	if err != nil {
		t.Fatal(err)
	}
	n := len(msgs)
	if n < 2 || msgs[n-1].PlainText() != q.PlainText() || !strings.HasPrefix(msgs[n-2].PlainText(), "<mneme:recalled>") || !strings.Contains(msgs[n-2].PlainText(), chatFacts[1].said) {
		t.Fatalf("the preview has no recalled block with the fact before the question")
	}
	after, err := m.Store().Load(ctx, "default", "preview", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("the preview wrote %d events", len(after)-len(before))
	}
	// With auto-recall off the preview has no block.
	p := chatPolicy()
	p.AutoRecall = false
	if err := th.SetPolicy(ctx, *p); err != nil {
		t.Fatal(err)
	}
	msgs, err = th.PreviewHistory(ctx, []message.Message{q}, mneme.HistoryOptions{Append: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(windowText(msgs), "<mneme:recalled>") {
		t.Fatal("a recalled block with auto_recall off")
	}
}
