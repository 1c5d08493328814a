package message

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestWireOmittedWhenEmpty: encoding/json leaves out an empty Wire, of the
// message and of each part, whether the message is encoded through a
// pointer (the stores) or as a value, and keeps one that holds anything.
func TestWireOmittedWhenEmpty(t *testing.T) {
	m := Message{Role: Assistant, Parts: []Part{
		{Type: Text, Text: "hi"},
		{Type: ToolCall, ToolCallID: "c1", ToolName: "f", Arguments: "{}", Wire: Wire{Extra: map[string]json.RawMessage{"cache_control": json.RawMessage(`{"type":"ephemeral"}`)}}},
	}}
	for name, v := range map[string]any{"pointer": &m, "value": m} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(b), `"wire"`); got != 1 {
			t.Errorf("%s: %d wire members, want 1 (the second part's): %s", name, got, b)
		}
		if !strings.Contains(string(b), `"wire":{"extra":{"cache_control":{"type":"ephemeral"}}}`) {
			t.Errorf("%s: the part's wire is lost: %s", name, b)
		}
	}
	m.Wire = Wire{API: "openai"}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"wire":{"api":"openai"}`) {
		t.Errorf("the message's wire is lost: %s", b)
	}
}
