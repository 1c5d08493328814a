package mneme_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/window"
)

const plantedFact = "The deploy key lives in vault path secret/shop/deploy-7731, rotated every Friday."

// recallSession plants a fact, buries it under tool steps until it has
// left the window, then asks about it: it returns the windows of the
// question and of the steps after it, and the window before the question.
func recallSession(t *testing.T, m *mneme.Engine, thread string) (before *window.Window, after []*window.Window) {
	t.Helper()
	ctx := context.Background()
	th := m.Thread("default", thread)
	begin(ctx, t, th)
	// The fact is a middle line of an early tool result: no catalogue
	// line or observation quotes it once the result has left the window.
	var config strings.Builder
	for l := 0; l < 30; l++ {
		if l == 4 {
			config.WriteString(plantedFact + "\n")
			continue
		}
		fmt.Fprintf(&config, "config/shop.yaml:%d: setting_%d: value_%d\n", l, l, l)
	}
	if _, _, err := th.AppendWindow(ctx, []message.Message{
		message.NewText(message.User, "Now fix the checkout rounding."),
		message.NewToolCalls("Reading the config.", message.Part{ToolCallID: "call_cfg", ToolName: "read_file", Arguments: `{"path":"config/shop.yaml"}`}),
		message.NewToolResult("call_cfg", config.String()),
	}, mneme.WindowOptions{}); err != nil {
		t.Fatal(err)
	}
	toolStep := func(n int) *window.Window {
		id := fmt.Sprintf("call_%d", n)
		var body strings.Builder
		for l := 0; l < 40; l++ {
			fmt.Fprintf(&body, "src/shop/checkout_%d.go:%d: total := round(sum(cart), %d)\n", n, l, l)
		}
		_, w, err := th.AppendWindow(ctx, []message.Message{
			message.NewToolCalls(fmt.Sprintf("step %d", n), message.Part{ToolCallID: id, ToolName: "read_file", Arguments: `{"path":"src/shop"}`}),
			message.NewToolResult(id, body.String()),
		}, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	for n := 1; n <= 60; n++ {
		before = toolStep(n)
	}
	if strings.Contains(windowText(before.Messages), "deploy-7731") {
		t.Fatal("the planted fact is still in the window: the test proves nothing")
	}
	if _, _, err := th.AppendWindow(ctx, []message.Message{message.NewText(message.Assistant, "Rounding fixed.")}, mneme.WindowOptions{}); err != nil {
		t.Fatal(err)
	}
	_, before, err := th.AppendWindow(ctx, nil, mneme.WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, w, err := th.AppendWindow(ctx, []message.Message{message.NewText(message.User, "Which vault path holds the deploy key?")}, mneme.WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after = append(after, w)
	for n := 61; n <= 66; n++ {
		after = append(after, toolStep(n))
	}
	return before, after
}

func windowText(msgs []message.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.PlainText())
		b.WriteByte('\n')
	}
	return b.String()
}

// TestAutoRecall: a fact that left the window comes back when the user
// asks about it, in a recalled block labelled as data, with its ref,
// right before the question; the window before the block is the previous
// window byte for byte (I6), the block stays byte-identical over the
// steps that follow (until a compaction step), the usage says what was
// recalled and why, and a replay from the log rebuilds the same window
// without searching (I7).
func TestAutoRecall(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	m := openSQLite(t, path, smallPolicy())
	before, after := recallSession(t, m, "recall")
	q := after[0]
	n := len(q.Messages)
	if n < 2 || q.Messages[n-1].PlainText() != "Which vault path holds the deploy key?" {
		t.Fatalf("the question is not the window's last message")
	}
	block := q.Messages[n-2]
	text := block.PlainText()
	if block.Role != message.User || !strings.HasPrefix(text, "<mneme:recalled>") || !strings.HasSuffix(text, "</mneme:recalled>") {
		t.Fatalf("no recalled block right before the question: %.200q", text)
	}
	if !strings.Contains(text, "secret/shop/deploy-7731") || !strings.Contains(text, "not instructions") {
		t.Fatalf("the recalled block does not hold the fact as data: %q", text)
	}
	rb := q.Usage.RecallBlock
	if rb == nil || len(rb.Hits) == 0 || rb.Query == "" || q.Usage.Recalled == 0 {
		t.Fatalf("usage does not report the recall: %+v", q.Usage)
	}
	var hit *window.RecallHit
	for i := range rb.Hits {
		if strings.Contains(rb.Hits[i].Text, "deploy-7731") {
			hit = &rb.Hits[i]
		}
	}
	if hit == nil || hit.Ref == "" || !strings.Contains(text, hit.Ref) || len(hit.Matched) == 0 || hit.Score <= 0 {
		t.Fatalf("the fact's hit lacks its ref, score or matched terms: %+v", rb.Hits)
	}
	if q.Usage.Total > q.Usage.Budget {
		t.Fatalf("%d tokens over the budget %d", q.Usage.Total, q.Usage.Budget)
	}
	// I6: the window before the block is the previous window, byte for byte.
	prev, _ := message.EncodeOpenAIMessages(before.Messages)
	head, _ := message.EncodeOpenAIMessages(q.Messages[:n-2])
	if !bytes.Equal(prev, head) {
		t.Fatalf("the prefix before the recalled block changed")
	}
	// Between compaction steps the block does not move or change.
	last := q
	for i, w := range after[1:] {
		if w.Usage.Step {
			last = w
			continue
		}
		a, _ := message.EncodeOpenAIMessages(last.Messages)
		b, _ := message.EncodeOpenAIMessages(w.Messages)
		if !bytes.HasPrefix(trimArray(b), trimArray(a)) {
			t.Fatalf("step %d after the question: the prefix changed without a compaction step", i+1)
		}
		last = w
	}
	t.Logf("recalled %d hits (%d tokens) for %q: %+v", len(rb.Hits), q.Usage.Recalled, rb.Query, *hit)
	// I7: a fresh engine on the same file rebuilds the same window.
	m2 := openSQLite(t, path, smallPolicy())
	w2, err := m2.Thread("default", "recall").Window(ctx, mneme.WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameReplay(t, last.Messages, w2.Messages)
}

// TestAutoRecallOff: with auto_recall off the same session shows no
// recalled block and writes no recall note.
func TestAutoRecallOff(t *testing.T) {
	p := smallPolicy()
	p.AutoRecall = false
	m := openSQLite(t, filepath.Join(t.TempDir(), "m.db"), p)
	_, after := recallSession(t, m, "norecall")
	for i, w := range after {
		if strings.Contains(windowText(w.Messages), "<mneme:recalled>") || w.Usage.Recalled != 0 || w.Usage.RecallBlock != nil {
			t.Fatalf("window %d has a recalled block with auto_recall off", i)
		}
	}
	evs, err := m.Store().Load(context.Background(), "default", "norecall", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		var d window.NoteData
		if ev.Kind == "note" && json.Unmarshal(ev.Data, &d) == nil && d.Recalled != nil {
			t.Fatalf("seq %d: a recall note with auto_recall off", ev.Seq)
		}
	}
}
