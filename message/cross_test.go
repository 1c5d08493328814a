package message

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// essence flattens messages to what must survive a translation: texts,
// tool calls (id, name, arguments exactly), tool results (id, text) in order.
func essence(ms []Message) []string {
	var out []string
	for _, m := range ms {
		for _, p := range m.Parts {
			switch p.Type {
			case Text:
				out = append(out, string(m.Role)+" text: "+p.Text)
			case ToolCall:
				// Arguments that are not a JSON object travel through
				// Anthropic as {"_raw": ...}; none at all as {}.
				out = append(out, "call "+p.ToolCallID+" "+p.ToolName+" "+unwrapRawArguments(p.Arguments))
			case ToolResult:
				var texts []string
				for _, c := range p.Content {
					if c.Type == Text {
						texts = append(texts, c.Text)
					}
				}
				out = append(out, "result "+p.ToolCallID+": "+strings.Join(texts, "|"))
			}
		}
	}
	return out
}

// checkPairing fails unless every tool call is answered by a later result
// and every result answers an earlier call.
func checkPairing(t *testing.T, ms []Message) {
	t.Helper()
	open := map[string]bool{}
	for _, m := range ms {
		for _, id := range m.ToolCallIDs() {
			open[id] = true
		}
		for _, id := range m.ResultIDs() {
			if !open[id] {
				t.Errorf("result %s answers no open call", id)
			}
			delete(open, id)
		}
	}
	if len(open) > 0 {
		t.Errorf("calls without results: %v", open)
	}
}

func TestCrossOpenAIToAnthropic(t *testing.T) {
	data, err := os.ReadFile("testdata/openai/tool_calls.json")
	if err != nil {
		t.Fatal(err)
	}
	orig, err := DecodeOpenAIMessages(data)
	if err != nil {
		t.Fatal(err)
	}
	sys, msgs, err := EncodeAnthropicMessages(orig)
	if err != nil {
		t.Fatal(err)
	}
	if string(sys) != `"You can call tools."` {
		t.Errorf("system = %s", sys)
	}
	var anth []map[string]any
	if err := json.Unmarshal(msgs, &anth); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range anth {
		roles = append(roles, m["role"].(string))
	}
	// The two tool messages of each turn merge into one user message.
	wantRoles := []string{"user", "assistant", "user", "assistant", "user", "assistant", "user"}
	if !reflect.DeepEqual(roles, wantRoles) {
		t.Errorf("roles %v, want %v", roles, wantRoles)
	}
	if strings.Contains(string(msgs), `"content":null`) || strings.Contains(string(msgs), `"text":""`) {
		t.Errorf("Anthropic output has null content or empty text: %s", msgs)
	}

	sysMs, err := DecodeAnthropicSystem(sys)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeAnthropicMessages(msgs)
	if err != nil {
		t.Fatal(err)
	}
	back = append(sysMs, back...)
	if got, want := essence(back), essence(orig); !reflect.DeepEqual(got, want) {
		t.Errorf("after Anthropic:\n got %q\nwant %q", got, want)
	}
	checkPairing(t, back)

	// And back to OpenAI: same essence again, as OpenAI messages.
	again, err := EncodeOpenAIMessages(back)
	if err != nil {
		t.Fatal(err)
	}
	final, err := DecodeOpenAIMessages(again)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := essence(final), essence(orig); !reflect.DeepEqual(got, want) {
		t.Errorf("after OpenAI -> Anthropic -> OpenAI:\n got %q\nwant %q", got, want)
	}
	checkPairing(t, final)
}

func TestCrossAnthropicToOpenAI(t *testing.T) {
	for _, name := range []string{"tools", "cache_thinking"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile("testdata/anthropic/" + name + ".json")
			if err != nil {
				t.Fatal(err)
			}
			orig, err := decodeAnthropicRequest(data)
			if err != nil {
				t.Fatal(err)
			}
			out, err := EncodeOpenAIMessages(orig)
			if err != nil {
				t.Fatal(err)
			}
			for _, bad := range []string{"thinking", "cache_control", "server_tool_use", "document", "is_error", "signature"} {
				if strings.Contains(string(out), bad) {
					t.Errorf("OpenAI output carries Anthropic-only %q: %s", bad, out)
				}
			}
			mid, err := DecodeOpenAIMessages(out)
			if err != nil {
				t.Fatal(err)
			}
			checkPairing(t, mid)
			for _, m := range mid {
				if m.Role == Tool {
					for _, c := range m.Parts[0].Content {
						if c.Type != Text {
							t.Errorf("OpenAI tool message with a %s part", c.Type)
						}
					}
				}
			}
			if got, want := essence(mid), essence(orig); !reflect.DeepEqual(got, want) {
				t.Errorf("after OpenAI:\n got %q\nwant %q", got, want)
			}
			back, err := encodeAnthropicRequest(mid)
			if err != nil {
				t.Fatal(err)
			}
			final, err := decodeAnthropicRequest(back)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := essence(final), essence(orig); !reflect.DeepEqual(got, want) {
				t.Errorf("after Anthropic -> OpenAI -> Anthropic:\n got %q\nwant %q", got, want)
			}
			checkPairing(t, final)
		})
	}
}

func TestCrossDetails(t *testing.T) {
	tests := []struct {
		name, openai, anthropic string
	}{
		{
			"arguments that are not JSON travel as _raw",
			`[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{broken"}}]}]`,
			`[{"role":"assistant","content":[{"type":"tool_use","id":"c","name":"f","input":{"_raw":"{broken"}}]}]`,
		},
		{
			"images become sources and back",
			`[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}},{"type":"image_url","image_url":{"url":"https://x/y.jpg"}}]}]`,
			`[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},{"type":"image","source":{"type":"url","url":"https://x/y.jpg"}}]}]`,
		},
		{
			"cache_control crosses, other unknown fields do not",
			`[{"role":"user","x_trace":1,"content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"},"x_tag":2}]}]`,
			`[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := DecodeOpenAIMessages([]byte(tt.openai))
			if err != nil {
				t.Fatal(err)
			}
			_, got, err := EncodeAnthropicMessages(ms)
			if err != nil {
				t.Fatal(err)
			}
			if !JSONEqual(got, []byte(tt.anthropic)) {
				t.Errorf("to Anthropic\n got %s\nwant %s", got, tt.anthropic)
			}
		})
	}
	// The _raw wrapping is undone on the way back to OpenAI.
	ms, err := DecodeAnthropicMessages([]byte(tests[0].anthropic))
	if err != nil {
		t.Fatal(err)
	}
	out, err := EncodeOpenAIMessages(ms)
	if err != nil {
		t.Fatal(err)
	}
	if !JSONEqual(out, []byte(tests[0].openai)) {
		t.Errorf("back to OpenAI\n got %s\nwant %s", out, tests[0].openai)
	}
	// And the images come back as the same URLs.
	ms, err = DecodeAnthropicMessages([]byte(tests[1].anthropic))
	if err != nil {
		t.Fatal(err)
	}
	out, err = EncodeOpenAIMessages(ms)
	if err != nil {
		t.Fatal(err)
	}
	if !JSONEqual(out, []byte(tests[1].openai)) {
		t.Errorf("back to OpenAI\n got %s\nwant %s", out, tests[1].openai)
	}
}

// TestAnthropicUserSplit: a user message with tool results and text becomes
// tool messages, then a user message with the text and any result images.
func TestAnthropicUserSplit(t *testing.T) {
	m, err := DecodeAnthropic([]byte(`{"role":"user","content":[
		{"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":"shot:"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}]},
		{"type":"tool_result","tool_use_id":"b","content":"ok","is_error":true},
		{"type":"text","text":"continue"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := EncodeOpenAI(m)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"role":"tool","content":"shot:","tool_call_id":"a"}`,
		`{"role":"tool","content":"ok","tool_call_id":"b"}`,
		`{"role":"user","content":[{"type":"text","text":"continue"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}}]}`,
	}
	if len(out) != len(want) {
		t.Fatalf("got %d messages: %s", len(out), out)
	}
	for i := range want {
		if string(out[i]) != want[i] {
			t.Errorf("message %d\n got %s\nwant %s", i, out[i], want[i])
		}
	}
}
