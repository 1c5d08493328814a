package token

import (
	"encoding/json"
	"testing"

	"github.com/mnemehq/mneme/message"
)

// TestOpenAICookbookExample reproduces the example of OpenAI's cookbook
// "How to count tokens with tiktoken", whose prompt the API billed at 129
// tokens for cl100k_base models (gpt-3.5-turbo-0613, gpt-4-0613) and 124
// for o200k_base ones (gpt-4o, gpt-4o-mini).
func TestOpenAICookbookExample(t *testing.T) {
	named := func(name, text string) message.Message {
		m := message.NewText(message.System, text)
		m.Name = name
		return m
	}
	msgs := []message.Message{
		message.NewText(message.System, "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."),
		named("example_user", "New synergies will help drive top-line growth."),
		named("example_assistant", "Things working well together will increase revenue."),
		named("example_user", "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."),
		named("example_assistant", "Let's talk later when we're less busy about how to do better."),
		message.NewText(message.User, "This late pivot means we don't have time to boil the ocean for the client deliverable."),
	}
	for _, tt := range []struct {
		enc  string
		want int
	}{{Cl100kBase, 129}, {O200kBase, 124}} {
		c, _ := Get(tt.enc)
		got := ReplyPrimer()
		for _, m := range msgs {
			got += MessageTokens(c, m)
		}
		if got != tt.want {
			t.Errorf("%s: %d prompt tokens, the API reported %d", tt.enc, got, tt.want)
		}
	}
}

func TestMessageTokens(t *testing.T) {
	c, _ := Get(O200kBase)
	n := c.Count
	tests := []struct {
		name string
		m    message.Message
		want int
	}{
		{"text", message.NewText(message.User, "hello there"), 3 + n("user") + n("hello there")},
		{"empty", message.Message{Role: message.Assistant}, 3 + n("assistant")},
		{"name", message.Message{Role: message.User, Name: "bob", Parts: []message.Part{{Type: message.Text, Text: "hi"}}},
			3 + n("user") + 1 + n("bob") + n("hi")},
		{"tool call", message.NewToolCalls("let me look", message.Part{ToolCallID: "call_1", ToolName: "read_file", Arguments: `{"path":"a.go"}`}),
			3 + n("assistant") + n("let me look") + ToolCallOverhead + n("call_1") + n("read_file") + n(`{"path":"a.go"}`)},
		{"two tool calls", message.NewToolCalls("", message.Part{ToolCallID: "a", ToolName: "x"}, message.Part{ToolCallID: "b", ToolName: "y", Arguments: "{}"}),
			3 + n("assistant") + 2*ToolCallOverhead + n("a") + n("x") + n("b") + n("y") + n("{}")},
		{"tool result", message.NewToolResult("call_1", "package main"),
			3 + n("tool") + ToolResultOverhead + n("call_1") + n("package main")},
		{"image", message.Message{Role: message.User, Parts: []message.Part{{Type: message.Image, ImageURL: "https://x/y.png"}, {Type: message.Text, Text: "what is this?"}}},
			3 + n("user") + ImageTokens + n("what is this?")},
		{"image in tool result", message.Message{Role: message.User, Parts: []message.Part{{Type: message.ToolResult, ToolCallID: "t", Content: []message.Part{{Type: message.Image}}}}},
			3 + n("user") + ToolResultOverhead + n("t") + ImageTokens},
		{"reasoning", message.Message{Role: message.Assistant, Parts: []message.Part{{Type: message.Reasoning, Text: "think step by step", Signature: "c2lnbmF0dXJl"}}},
			3 + n("assistant") + n("think step by step")},
		{"redacted reasoning", message.Message{Role: message.Assistant, Parts: []message.Part{{Type: message.Reasoning, Raw: json.RawMessage(`"EmwKAhgBEgy3va3pzix"`)}}},
			3 + n("assistant") + n(`"EmwKAhgBEgy3va3pzix"`)},
		{"opaque", message.Message{Role: message.User, Parts: []message.Part{{Type: message.Opaque, Raw: json.RawMessage(`{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}`)}}},
			3 + n("user") + n(`{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}`)},
		{"unknown part type", message.Message{Role: message.User, Parts: []message.Part{{Type: "document", Text: "doc text"}}},
			3 + n("user") + n("doc text")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MessageTokens(c, tt.m); got != tt.want {
				t.Errorf("MessageTokens = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestMessageTokensAtLeastText checks, for every counter, that a message
// never costs less than its plain text plus the framing.
func TestMessageTokensAtLeastText(t *testing.T) {
	m := message.NewToolCalls("I'll run the tests 🧪", message.Part{ToolCallID: "toolu_01", ToolName: "bash", Arguments: `{"cmd":"go test ./..."}`})
	for _, name := range Names() {
		c, _ := Get(name)
		if got, floor := MessageTokens(c, m), TokensPerMessage+c.Count(m.PlainText()); got < floor {
			t.Errorf("%s: %d < %d", name, got, floor)
		}
	}
}

func TestToolsTokens(t *testing.T) {
	c, _ := Get(Cl100kBase)
	weather := json.RawMessage(`{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`)
	search := json.RawMessage(`{"name":"search","description":"Search the archive","input_schema":{"type":"object"}}`)
	tests := []struct {
		name  string
		tools []json.RawMessage
		want  int
	}{
		{"none", nil, 0},
		{"one", []json.RawMessage{weather}, ToolsPreambleTokens + ToolSchemaOverhead + c.Count(string(weather))},
		{"two", []json.RawMessage{weather, search},
			ToolsPreambleTokens + 2*ToolSchemaOverhead + c.Count(string(weather)) + c.Count(string(search))},
	}
	for _, tt := range tests {
		if got := ToolsTokens(c, tt.tools); got != tt.want {
			t.Errorf("%s: ToolsTokens = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestTextTokens(t *testing.T) {
	c, _ := Get(O200kBase)
	if got := TextTokens(c, "Hello, world!"); got != 4 {
		t.Errorf("TextTokens = %d, want 4", got)
	}
}
