package backend

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
)

// BenchmarkDecodeMessage: decoding the stored form of a tool call and of a
// 2 KB tool result, what a log replay does per event, with DecodeMessage
// and, side by side, with encoding/json (what the stores used before).
func BenchmarkDecodeMessage(b *testing.B) {
	call := message.NewToolCalls("step", message.Part{ToolCallID: "call_1", ToolName: "read_file", Arguments: `{"path":"src/f1.go"}`})
	var body strings.Builder
	for i := 0; body.Len() < 2048; i++ {
		fmt.Fprintf(&body, "src/f1.go:%d: func F%d(ctx context.Context) error { return nil }\n", i, i)
	}
	result := message.NewToolResult("call_1", body.String())
	var stored []string
	for _, m := range []message.Message{call, result} {
		s, err := EncodeMessage(&m)
		if err != nil {
			b.Fatal(err)
		}
		stored = append(stored, s)
	}
	for _, c := range []struct {
		name   string
		decode func(string) (*message.Message, error)
	}{
		{"DecodeMessage", DecodeMessage},
		{"encoding-json", func(s string) (*message.Message, error) {
			var m message.Message
			return &m, json.Unmarshal([]byte(s), &m)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := c.decode(stored[i%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDecodeMessageIsEncodingJSON: DecodeMessage gives what encoding/json
// gives, on the stored forms of every part type.
func TestDecodeMessageIsEncodingJSON(t *testing.T) {
	raw := json.RawMessage(`{"type":"server_tool_use","z":1,"a":{"y":2,"x":1}}`)
	ms := []message.Message{
		message.NewText(message.User, "héllo \u2028 <b>&</b> \x7f \\ \"q\" \t"),
		message.NewToolCalls("thinking", message.Part{ToolCallID: "c1", ToolName: "f", Arguments: `{"b": 1, "a": [true, null]}`}),
		message.NewToolResult("c1", "line 1\nline 2"),
		{Role: message.Assistant, Name: "bot", Meta: map[string]string{"k": "v"}, Parts: []message.Part{
			{Type: message.Opaque, Raw: raw, Wire: message.Wire{API: "anthropic", Type: "server_tool_use",
				Extra: map[string]json.RawMessage{"cache_control": json.RawMessage(`{"type":"ephemeral"}`)}}},
			{Type: message.Reasoning, Text: "hmm"},
		}},
	}
	for i, m := range ms {
		s, err := EncodeMessage(&m)
		if err != nil {
			t.Fatal(err)
		}
		var want message.Message
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeMessage(s)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		a, _ := json.Marshal(want)
		c, _ := json.Marshal(got)
		if string(a) != string(c) {
			t.Errorf("message %d: DecodeMessage gives %s, encoding/json %s", i, c, a)
		}
	}
	if _, err := DecodeMessage(`{"role":`); err == nil {
		t.Error("a truncated stored form decodes")
	}
}
