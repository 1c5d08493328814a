package window

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
)

// TestCatalogueQuotesLatestResult: a catalogue line names each tool with its
// result refs and quotes the first line of the tool's latest result, so what
// a tool last reported stays readable in the window (the context-manager
// fixture tool_spam_then_followup asks for it), not only reachable by ref.
func TestCatalogueQuotesLatestResult(t *testing.T) {
	call := func(id string) message.Part {
		return message.Part{Type: message.ToolCall, ToolCallID: id, ToolName: "search_spans", Arguments: "{}"}
	}
	msgs := []message.Message{
		message.NewText(message.User, "Analyze trace T-100."),
		message.NewToolCalls("Running span search.", call("c1"), call("c2")),
		message.NewToolResult("c1", "SPAN_DUMP_V1: older run\nsecond line"),
		message.NewToolResult("c2", "SPAN_DUMP_V3_LATEST: error in payment-service\nstack"),
	}
	var items []*Item
	for i := range msgs {
		m := msgs[i]
		items = append(items, &Item{Seq: int64(i + 1), Ref: "m_" + string(rune('a'+i)), Msg: &m, Boundary: i < 2})
	}
	got := Catalogue(items, 0)
	for _, want := range []string{"search_spans×2 (m_c m_d)", `"SPAN_DUMP_V3_LATEST: error in payment-service"`} {
		if !strings.Contains(got, want) {
			t.Errorf("catalogue lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"SPAN_DUMP_V1", "stack"} {
		if strings.Contains(got, not) {
			t.Errorf("catalogue quotes %q (only the latest result's first line belongs):\n%s", not, got)
		}
	}
}

// TestCatalogueSpreadsOverTheRange: 200 turns leaving at once under a
// 22-line bound make 22 lines or fewer that cover the whole range, first
// seq to last (not the newest 22 turns), and a line that stands for several
// turns previews its most informative message, not merely its first.
func TestCatalogueSpreadsOverTheRange(t *testing.T) {
	var items []*Item
	for i := range 200 {
		text := fmt.Sprintf("Step %d: reading src/pkg/file_%d.go.", i, i)
		if i == 17 {
			text = "Root cause found: the retry wrapper in billing resends the charge after a gateway timeout."
		}
		m := message.NewText(message.Assistant, text)
		items = append(items, &Item{Seq: int64(i + 1), Ref: fmt.Sprintf("m_%03d", i+1), Msg: &m, Boundary: true})
	}
	got := Catalogue(items, 22)
	lines := strings.Split(got, "\n")
	if len(lines) > 22 {
		t.Fatalf("%d lines for a bound of 22", len(lines))
	}
	if !strings.HasPrefix(lines[0], "- [seq 1–") || !strings.Contains(lines[len(lines)-1], "–200]") {
		t.Errorf("the catalogue does not span seq 1–200:\n%s", got)
	}
	if !strings.Contains(got, "m_018 assistant: \"Root cause found") {
		t.Errorf("the finding of seq 18 is not its line's preview:\n%s", got)
	}
}
