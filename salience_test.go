package mneme_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
)

// TestRootCauseStaysInWindow (issue 16): a 200-turn tool-heavy session in a
// 16k budget, default policy, no summarizer model. The root cause the agent
// found at turn 17 must still be in the window the last call sends (in the
// memory block: its turn left long ago), through every catalogue and
// reflection on the way, not replaced by the newest catalogue lines.
func TestRootCauseStaysInWindow(t *testing.T) {
	ctx := context.Background()
	p := mneme.DefaultPolicy()
	p.Model, p.BudgetTokens = "gpt-4o", 16384
	m, err := mneme.Open(ctx, mneme.Config{DSN: "memory:", Policy: &p})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	th := m.Thread("t", "root-cause")
	const finding = "Root cause found: the retry wrapper in billing/charge.go resends the charge after a gateway timeout (INC-2291)."
	send := func(msgs ...message.Message) string {
		t.Helper()
		_, w, err := th.AppendWindow(ctx, msgs, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, wm := range w.Messages {
			b.WriteString(wm.PlainText())
			b.WriteByte('\n')
		}
		return b.String()
	}
	send(message.NewText(message.System, "You are a coding agent."),
		message.NewText(message.User, "Customers are charged twice for some invoices. Find out why and fix it."))
	var last string
	compacted := 0
	for turn := 1; turn <= 200; turn++ {
		text := fmt.Sprintf("Step %d: reading src/pkg%d/file_%d.go.", turn, turn%7, turn)
		if turn == 17 {
			text = finding + " Reading the wrapper next."
		}
		id := fmt.Sprintf("call_%d", turn)
		call := message.Part{Type: message.ToolCall, ToolCallID: id, ToolName: []string{"read_file", "grep", "run_tests"}[turn%3], Arguments: fmt.Sprintf(`{"path":"src/pkg%d/file_%d.go"}`, turn%7, turn)}
		var body strings.Builder
		for l := 1; l <= 30; l++ {
			fmt.Fprintf(&body, "%4d  func handler%d_%d(w http.ResponseWriter, r *http.Request) { serve(r.Context(), %d) }\n", l, turn, l, l)
		}
		msgs := []message.Message{message.NewToolCalls(text, call), message.NewToolResult(id, body.String())}
		if turn%10 == 0 {
			msgs = append(msgs, message.NewText(message.User, fmt.Sprintf("Keep going, step %d.", turn)))
		}
		last = send(msgs...)
		if turn > 17 && !strings.Contains(last, "retry wrapper in billing/charge.go") {
			t.Fatalf("turn %d: the root cause found at turn 17 is not in the window", turn)
		}
		if strings.Contains(last, "<mneme:memory>") {
			compacted++
		}
	}
	if compacted < 100 {
		t.Fatalf("the memory block was in only %d windows: the session did not overflow as it should", compacted)
	}
}
