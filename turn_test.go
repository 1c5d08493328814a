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

// currentRequest is the user message a long tool loop answers.
const currentRequest = "Now rename OrderTotal to GrandTotal everywhere and keep INV-7731 passing."

// toolLoop appends earlier turns, then one user message and steps tool-call
// steps answering it, under p; it calls check with every window.
func toolLoop(t *testing.T, m *mneme.Engine, thread string, steps int, check func(n int, w *window.Window)) {
	t.Helper()
	ctx := context.Background()
	th := m.Thread("default", thread)
	begin(ctx, t, th)
	// Earlier turns, so that the current request is not the pinned head's.
	for i := 0; i < 3; i++ {
		if _, _, err := th.AppendWindow(ctx, []message.Message{
			message.NewText(message.User, fmt.Sprintf("Earlier question %d about the shop module.", i)),
			message.NewText(message.Assistant, fmt.Sprintf("Earlier answer %d: %s", i, strings.Repeat("the checkout computes totals; ", 40))),
		}, mneme.WindowOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, w, err := th.AppendWindow(ctx, []message.Message{message.NewText(message.User, currentRequest)}, mneme.WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check(0, w)
	for n := 1; n <= steps; n++ {
		id := fmt.Sprintf("call_%d", n)
		var body strings.Builder
		for l := 0; l < 15+n%30; l++ {
			fmt.Fprintf(&body, "src/shop/file_%d.go:%d: total := OrderTotal(cart) // step %d\n", n, l, n)
		}
		_, w, err := th.AppendWindow(ctx, []message.Message{
			message.NewToolCalls(fmt.Sprintf("step %d: looking further", n), message.Part{ToolCallID: id, ToolName: []string{"read_file", "grep", "edit"}[n%3], Arguments: `{"path":"src/shop"}`}),
			message.NewToolResult(id, body.String()),
		}, mneme.WindowOptions{})
		if err != nil {
			t.Fatalf("step %d: %v", n, err)
		}
		check(n, w)
	}
}

// liveUser reports whether msgs hold text as a user message of its own
// (not quoted inside the memory block).
func liveUser(msgs []message.Message, text string) bool {
	for _, m := range msgs {
		if m.Role == message.User && m.PlainText() == text {
			return true
		}
	}
	return false
}

// Issue 15 item 5: in a 200-step tool loop after one user message under a
// small budget, that message is live (a user message, verbatim) in every
// window, whatever the strategy; the window fits, pairs hold, and the
// prefix changes only at compaction steps.
func TestCurrentTurnStaysLive(t *testing.T) {
	for _, strategy := range []window.Strategy{window.Mask, window.Archive, window.Observe} {
		t.Run(string(strategy), func(t *testing.T) {
			p := mneme.DefaultPolicy()
			p.BudgetTokens = 8000
			p.ReserveOutputTokens = 1000
			p.MinTailTokens = 1500
			p.Strategy = strategy
			path := filepath.Join(t.TempDir(), "m.db")
			m := openSQLite(t, path, &p)
			var prev []byte
			windows, steps, breaks, compacted := 0, 0, 0, 0
			var last *window.Window
			toolLoop(t, m, "loop", 200, func(n int, w *window.Window) {
				windows++
				if !liveUser(w.Messages, currentRequest) {
					t.Errorf("window %d: the current request is not live", n)
				}
				if w.Usage.Total > w.Usage.Budget {
					t.Errorf("window %d: %d tokens over the budget %d", n, w.Usage.Total, w.Usage.Budget)
				}
				if err := pairsHold(w.Messages); err != nil {
					t.Errorf("window %d: %v", n, err)
				}
				enc, _ := message.EncodeOpenAIMessages(w.Messages)
				if w.Usage.Step {
					steps++
				} else if prev != nil && !bytes.HasPrefix(trimArray(enc), trimArray(prev)) {
					breaks++
				}
				if w.Usage.Compacted != nil {
					compacted++
				}
				prev, last = enc, w
			})
			if compacted == 0 {
				t.Fatal("no compaction: the loop never left the budget, the test proves nothing")
			}
			if breaks > 0 {
				t.Errorf("%d prefix changes outside compaction steps", breaks)
			}
			if windows != 201 {
				t.Errorf("%d windows, want 201", windows)
			}
			// Replay from the log rebuilds the identical window (I7).
			m2 := openSQLite(t, path, &p)
			w2, err := m2.Thread("default", "loop").Window(context.Background(), mneme.WindowOptions{})
			if err != nil {
				t.Fatal(err)
			}
			a, _ := message.EncodeOpenAIMessages(last.Messages)
			b, _ := message.EncodeOpenAIMessages(w2.Messages)
			if !bytes.Equal(a, b) {
				t.Errorf("replayed window differs")
			}
			t.Logf("%s: 201 windows, %d compaction steps (%d compacted), 0 prefix breaks", strategy, steps, compacted)
		})
	}
}

// pairsHold checks I4 on a window: every call answered, every result called.
func pairsHold(msgs []message.Message) error {
	calls, results := map[string]bool{}, map[string]bool{}
	for _, m := range msgs {
		for _, p := range m.Parts {
			switch p.Type {
			case message.ToolCall:
				calls[p.ToolCallID] = true
			case message.ToolResult:
				if !calls[p.ToolCallID] {
					return fmt.Errorf("result %s without its call", p.ToolCallID)
				}
				results[p.ToolCallID] = true
			}
		}
	}
	for id := range calls {
		if !results[id] {
			return fmt.Errorf("call %s without its result", id)
		}
	}
	return nil
}
