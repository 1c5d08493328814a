package message

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name   string
		decode func([]byte) error
		in     string
		want   string // the error text, or its prefix when it ends in "..."
	}{
		{"openai no role", openAIList, `[{"content":"hi"}]`, `messages[0].role: missing`},
		{"openai unknown role", openAIList, `[{"role":"user","content":"a"},{"role":"robot","content":"x"}]`, `messages[1].role: unknown role "robot"`},
		{"openai role not string", openAIList, `[{"role":1}]`, `messages[0].role: want string`},
		{"openai function role", openAIList, `[{"role":"function","name":"f","content":"x"}]`, `messages[0].role: unknown role "function"`},
		{"tool without tool_call_id", openAIList, `[{"role":"tool","content":"x"}]`, `messages[0].tool_call_id: missing`},
		{"tool with empty tool_call_id", openAIList, `[{"role":"tool","tool_call_id":"","content":"x"}]`, `messages[0].tool_call_id: missing`},
		{"tool_call_id not string", openAIList, `[{"role":"tool","tool_call_id":5,"content":"x"}]`, `messages[0].tool_call_id: want string`},
		{"tool call without id", openAIList, `[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]`, `messages[1].tool_calls[0].id: missing`},
		{"tool call without name", openAIList, `[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"b","type":"function","function":{"arguments":"{}"}}]}]`, `messages[0].tool_calls[1].function.name: missing`},
		{"tool call name not string", openAIList, `[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":7}}]}]`, `messages[0].tool_calls[0].function.name: want string`},
		{"tool call without function", openAIList, `[{"role":"assistant","tool_calls":[{"id":"a","type":"function"}]}]`, `messages[0].tool_calls[0].function: missing`},
		{"unsupported tool call type", openAIList, `[{"role":"assistant","tool_calls":[{"id":"a","type":"magic"}]}]`, `messages[0].tool_calls[0].type: unsupported tool call type "magic"`},
		{"tool_calls not array", openAIList, `[{"role":"assistant","tool_calls":{"id":"a"}}]`, `messages[0].tool_calls: want array`},
		{"content number", openAIList, `[{"role":"user","content":5}]`, `messages[0].content: want string, array or null`},
		{"content part not object", openAIList, `[{"role":"user","content":["hi"]}]`, `messages[0].content[0]: want object`},
		{"text part text not string", openAIList, `[{"role":"user","content":[{"type":"text","text":5}]}]`, `messages[0].content[0].text: want string`},
		{"part without type", openAIList, `[{"role":"user","content":[{"text":"x"}]}]`, `messages[0].content[0].type: missing`},
		{"image_url without url", openAIList, `[{"role":"user","content":[{"type":"image_url","image_url":{"detail":"low"}}]}]`, `messages[0].content[0].image_url.url: missing`},
		{"image_url number", openAIList, `[{"role":"user","content":[{"type":"image_url","image_url":3}]}]`, `messages[0].content[0].image_url: want object`},
		{"message not object", openAIList, `["hi"]`, `messages[0]: want object`},
		{"not an array", openAIList, `{"role":"user"}`, `messages: want an array of messages`},
		{"bad JSON", openAIList, `[{"role":"user",}]`, `messages[0]: invalid JSON at offset 16: want object key`},
		{"trailing data", openAIList, `[] x`, `messages: invalid JSON at offset 3: data after the value`},
		{"unterminated", openAIList, `[{"role":"user","content":"abc`, `messages[0]: invalid JSON at offset 30: unterminated string`},
		{"single message", openAIOne, `{"role":"tool","content":"x"}`, `tool_call_id: missing`},

		{"anthropic system bad content", anthropicList, `[{"role":"system","content":5}]`, `messages[0].content: want string, array or null`},
		{"anthropic tool role", anthropicList, `[{"role":"tool","content":"x"}]`, `messages[0].role: unknown role "tool"`},
		{"tool_use without id", anthropicList, `[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]`, `messages[0].content[0].id: missing`},
		{"tool_use without name", anthropicList, `[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_use","id":"t","input":{}}]}]`, `messages[0].content[1].name: missing`},
		{"tool_result without id", anthropicList, `[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]`, `messages[0].content[0].tool_use_id: missing`},
		{"tool_result content number", anthropicList, `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":1}]}]`, `messages[0].content[0].content: want string, array or null`},
		{"tool_result nested text bad", anthropicList, `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text"}]}]}]`, `messages[0].content[0].content[0].text: missing`},
		{"image without source", anthropicList, `[{"role":"user","content":[{"type":"image"}]}]`, `messages[0].content[0].source: missing`},
		{"thinking not string", anthropicList, `[{"role":"assistant","content":[{"type":"thinking","thinking":null}]}]`, `messages[0].content[0].thinking: want string`},
		{"anthropic content object", anthropicList, `[{"role":"user","content":{}}]`, `messages[0].content: want string, array or null`},
		{"system number", anthropicSystem, `5`, `system: want string or array of text blocks`},
		{"system block without text", anthropicSystem, `[{"type":"text","text":"a"},{"type":"text"}]`, `system[1].text: missing`},
		{"system bad JSON", anthropicSystem, `"abc`, `system: invalid JSON at offset 4: unterminated string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.decode([]byte(tt.in))
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("got %v (%T), want a *DecodeError", err, err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func openAIList(b []byte) error { _, err := DecodeOpenAIMessages(b); return err }
func openAIOne(b []byte) error  { _, err := DecodeOpenAI(b); return err }
func anthropicList(b []byte) error {
	_, err := DecodeAnthropicMessages(b)
	return err
}
func anthropicSystem(b []byte) error { _, err := DecodeAnthropicSystem(b); return err }

// TestRoundTrip covers the spellings the goldens do not: each input must
// decode and encode back JSON-equal.
func TestRoundTrip(t *testing.T) {
	openai := []string{
		`{"role":"user","content":"esc \" \\ \/ \b \f \n \r \t \u0001 \u2028 caf\u00e9 \ud83d\ude00 bad:\ud800 end"}`,
		`{"role":"user"}`,
		`{"role":"user","content":null,"name":null}`,
		`{"role":"user","content":"","name":""}`,
		`{"role":"user","content":"x","tool_calls":5,"tool_call_id":"not a tool","reasoning_content":"kept as extra"}`,
		`{"role":"tool","tool_call_id":"c","name":"f","content":[{"type":"text","text":"a","x":1}]}`,
		`{"role":"tool","tool_call_id":"c"}`,
		`{"role":"tool","tool_call_id":"c","content":null}`,
		`{"role":"assistant","reasoning_content":null,"content":"x"}`,
		`{"role":"assistant","reasoning_content":"","content":null,"tool_calls":null}`,
		`{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":null}}]}`,
		`{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"not json"},"custom":{"name":"x"}}]}`,
		`{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":[1, 2]}}]}`,
		`{"role":"assistant","tool_calls":[{"id":"a","type":"custom","custom":{"name":"f","input":"raw text","x":{"y":[]}}}]}`,
		`{"role":"user","content":[{"type":"image_url","image_url":{"url":"u","detail":"low","detail":""}}]}`,
		`{"role":"user","content":[{"type":"image_url","image_url":{"url":"u","detail":"","detail":"low"}}]}`,
		`{"role":"user","content":[{"type":"image_url","image_url":{"url":"u","detail":null,"x":1,"x":2}}]}`,
		`{"role":"user","content":[{"type":"text","text":"a","text":"b","type":"text"}]}`,
		`{"role":"user","content":[{"type":"future_part","future":{"deep":[1,2.50,-3e+10,true,false,null]}}]}`,
		` { "role" : "developer" , "content" : [ ] , "n" : 1.0e2 } `,
	}
	for i, in := range openai {
		t.Run(fmt.Sprintf("openai/%d", i), func(t *testing.T) {
			m, err := DecodeOpenAI([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			out, err := EncodeOpenAI(m)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 1 || !JSONEqual(out[0], []byte(in)) {
				t.Errorf("round trip\n in %s\nout %s", in, out)
			}
		})
	}
	anthropic := []string{
		`{"role":"user","content":"plain"}`,
		`{"role":"user"}`,
		`{"role":"user","content":null,"x":{"a":1}}`,
		`{"role":"user","content":[]}`,
		`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f"}]}`,
		`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":  { "a" : [1, 2] } }]}`,
		`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"not an object"}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":null,"is_error":"yes"}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"","is_error":true}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"tool_result","tool_use_id":"nested"},{"type":"search_result","source":"s","title":"t","content":[{"type":"text","text":"x"}]}]}]}`,
		`{"role":"assistant","content":[{"type":"thinking","thinking":"","signature":""}]}`,
		`{"role":"assistant","content":[{"type":"thinking","thinking":"hm"}]}`,
		`{"role":"assistant","content":[{"type":"redacted_thinking"},{"type":"redacted_thinking","data":"abc","x":1}]}`,
		`{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/gif","data":"R0lG"}}]}`,
		`{"role":"user","content":[{"type":"web_search_tool_result","tool_use_id":"s","content":{"type":"web_search_tool_result_error","error_code":"max_uses_exceeded"}}]}`,
		`{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}`,
	}
	for i, in := range anthropic {
		t.Run(fmt.Sprintf("anthropic/%d", i), func(t *testing.T) {
			m, err := DecodeAnthropic([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			out, err := EncodeAnthropic(m)
			if err != nil {
				t.Fatal(err)
			}
			if !JSONEqual(out, []byte(in)) {
				t.Errorf("round trip\n in %s\nout %s", in, out)
			}
		})
	}
	systems := []string{`"be brief"`, `""`, `[]`, `[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b"}]`}
	for i, in := range systems {
		t.Run(fmt.Sprintf("system/%d", i), func(t *testing.T) {
			sys, err := DecodeAnthropicSystem([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			out, msgs, err := EncodeAnthropicMessages(sys)
			if err != nil {
				t.Fatal(err)
			}
			if !JSONEqual(out, []byte(in)) || string(msgs) != "[]" {
				t.Errorf("round trip\n in %s\nout %s, messages %s", in, out, msgs)
			}
		})
	}
	for _, in := range []string{``, ` `, `null`} {
		sys, err := DecodeAnthropicSystem([]byte(in))
		if err != nil || sys != nil {
			t.Errorf("DecodeAnthropicSystem(%q) = %v, %v; want nothing", in, sys, err)
		}
	}
}

// TestDecodeModel checks what the decoders put where, beyond the goldens.
func TestDecodeModel(t *testing.T) {
	m, err := DecodeOpenAI([]byte(`{"role":"assistant","content":"x","reasoning_content":"r","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":" {\"k\": 1} "}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Part{
		{Type: Reasoning, Text: "r"},
		{Type: Text, Text: "x"},
		{Type: ToolCall, ToolCallID: "a", ToolName: "f", Arguments: ` {"k": 1} `},
	}
	if !reflect.DeepEqual(m.Parts, want) {
		t.Errorf("parts %#v", m.Parts)
	}
	m, err = DecodeAnthropic([]byte(`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{ "a" :1 }}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Parts[0].Arguments; got != `{ "a" :1 }` {
		t.Errorf("Arguments %q, want the input text exactly", got)
	}
	m, err = DecodeOpenAI([]byte(`{"role":"tool","tool_call_id":"c","name":"grep","content":"found"}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.ToolName() != "grep" || m.Name != "grep" || !m.IsToolResult() || m.ResultIDs()[0] != "c" {
		t.Errorf("tool message decoded as %#v", m)
	}
}

func TestEncodeBuilt(t *testing.T) {
	call := Part{ToolCallID: "c1", ToolName: "search", Arguments: `{"q":"x"}`}
	ms := []Message{
		NewText(System, "sys"),
		NewText(User, "hi"),
		NewToolCalls("", call),
		NewToolResult("c1", "result"),
		NewText(Assistant, "done"),
	}
	openai, err := EncodeOpenAIMessages(ms)
	if err != nil {
		t.Fatal(err)
	}
	wantOpenAI := `[{"role":"system","content":"sys"},{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"search","arguments":"{\"q\":\"x\"}"}}]},` +
		`{"role":"tool","content":"result","tool_call_id":"c1"},{"role":"assistant","content":"done"}]`
	if string(openai) != wantOpenAI {
		t.Errorf("openai\n got %s\nwant %s", openai, wantOpenAI)
	}
	sys, msgs, err := EncodeAnthropicMessages(ms)
	if err != nil {
		t.Fatal(err)
	}
	wantMsgs := `[{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"search","input":{"q":"x"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"result"}]},{"role":"assistant","content":"done"}]`
	if string(sys) != `"sys"` || string(msgs) != wantMsgs {
		t.Errorf("anthropic\n got %s %s\nwant %s", sys, msgs, wantMsgs)
	}
}

func TestEncodeErrors(t *testing.T) {
	tests := []struct {
		name string
		m    Message
	}{
		{"invalid role", Message{Role: "robot", Parts: []Part{{Type: Text, Text: "x"}}}},
		{"call without id", NewToolCalls("", Part{ToolName: "f"})},
		{"call without name", NewToolCalls("", Part{ToolCallID: "c"})},
		{"result without id", NewToolResult("", "x")},
		{"tool message without result", Message{Role: Tool}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := EncodeOpenAI(tt.m); !errors.Is(err, ErrEncode) {
				t.Errorf("EncodeOpenAI: %v, want ErrEncode", err)
			}
			if _, _, err := EncodeAnthropicMessages([]Message{tt.m}); !errors.Is(err, ErrEncode) {
				t.Errorf("EncodeAnthropicMessages: %v, want ErrEncode", err)
			}
		})
	}
	// A system message on its own is a mid-conversation one.
	if b, err := EncodeAnthropic(NewText(System, "x")); err != nil || string(b) != `{"role":"system","content":"x"}` {
		t.Errorf("EncodeAnthropic(system) = %s, %v", b, err)
	}
}

// TestEncodeDeterministic guards prefix stability (I6): unknown fields come
// out in the same order every time.
func TestEncodeDeterministic(t *testing.T) {
	in := `{"role":"user","content":[{"type":"text","text":"a","k":1,"b":2,"z":3,"c":4,"y":5}],"m":1,"a":2,"q":3,"d":4,"x":5,"e":6}`
	m, err := DecodeOpenAI([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	first, _ := EncodeOpenAI(m)
	for range 50 {
		again, _ := EncodeOpenAI(m)
		if string(again[0]) != string(first[0]) {
			t.Fatalf("encoding changed:\n%s\n%s", first[0], again[0])
		}
	}
	if !strings.Contains(string(first[0]), `"a":2,"d":4,"e":6,"m":1,"q":3,"x":5`) {
		t.Errorf("unknown fields not in key order: %s", first[0])
	}
}

func TestHelpers(t *testing.T) {
	m, err := DecodeAnthropic([]byte(`{"role":"user","content":[
		{"type":"tool_result","tool_use_id":"a","content":"1"},
		{"type":"tool_result","tool_use_id":"b","content":"2"},
		{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},
		{"type":"image","source":{"type":"url","url":"https://x/y.png"}},
		{"type":"image","source":{"type":"file","file_id":"file_1"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.ResultIDs(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("ResultIDs = %v", got)
	}
	if got := m.ToolCallIDs(); got != nil {
		t.Errorf("ToolCallIDs = %v, want none", got)
	}
	o, err := DecodeOpenAI([]byte(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/"}},{"type":"text","text":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		p    Part
		want ImageSource
		ok   bool
	}{
		{m.Parts[2], ImageSource{MediaType: "image/png", Data: "iVBO"}, true},
		{m.Parts[3], ImageSource{URL: "https://x/y.png"}, true},
		{m.Parts[4], ImageSource{FileID: "file_1"}, true},
		{o.Parts[0], ImageSource{MediaType: "image/jpeg", Data: "/9j/"}, true},
		{Part{Type: Image, ImageURL: "https://a/b.gif"}, ImageSource{URL: "https://a/b.gif"}, true},
		{o.Parts[1], ImageSource{}, false},
	}
	for i, tt := range tests {
		got, ok := tt.p.ImageSource()
		if got != tt.want || ok != tt.ok {
			t.Errorf("%d: ImageSource = %+v, %v; want %+v, %v", i, got, ok, tt.want, tt.ok)
		}
	}
}

func TestJSONEqual(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{`{"a":1,"b":[1,2]}`, ` { "b" : [1, 2], "a" : 1 } `, true},
		{`{"a":1}`, `{"a":1.0}`, true},
		{`1e2`, `100`, true},
		{`1e999999999`, `1e999999999`, true},
		{`1e999999999`, `2e999999999`, false},
		{`"caf\u00e9"`, `"café"`, true},
		{`{"a":1}`, `{"a":1,"b":null}`, false},
		{`[1,2]`, `[2,1]`, false},
		{`{"a":1,"a":2}`, `{"a":2}`, true},
		{`null`, `false`, false},
		{`"1"`, `1`, false},
		{`{}`, `{} x`, false},
		{`{`, `{`, false},
	}
	for _, tt := range tests {
		if got := JSONEqual([]byte(tt.a), []byte(tt.b)); got != tt.want {
			t.Errorf("JSONEqual(%s, %s) = %v", tt.a, tt.b, got)
		}
	}
}

// TestScannerAgreesWithEncodingJSON: the scanner accepts what encoding/json
// accepts and decodes strings the same way.
func TestScannerAgreesWithEncodingJSON(t *testing.T) {
	inputs := []string{
		`0`, `-0`, `01`, `1.`, `.5`, `1e`, `1e+`, `-`, `1.5e-3`, `-12.0E+7`, `tru`, `nul`, `true`, `[1,]`, `{"a":1,}`,
		`{"a" 1}`, `{1:2}`, `[`, `]`, `""`, `"\x"`, `"\u12"`, `"\u12G4"`, "\"\x01\"", `"\ud800\udc00"`, `"\udc00\ud800"`,
		"\"\xff\xfe\"", `"\/"`, ` [ { } , [ ] ] `, `[] []`, "\u00a0[]", `{"a":{"b":{"c":[null]}}}`,
	}
	for _, in := range inputs {
		if got, want := validJSON([]byte(in)), json.Valid([]byte(in)); got != want {
			t.Errorf("validJSON(%q) = %v, json.Valid says %v", in, got, want)
		}
		checkString(t, []byte(in))
	}
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	if validJSON([]byte(deep)) {
		t.Error("nesting beyond maxDepth accepted")
	}
}

func checkString(t testing.TB, in []byte) {
	var want string
	if json.Unmarshal(in, &want) != nil {
		return
	}
	s := scanner{data: in}
	got, err := s.str()
	if err != nil || got != want {
		t.Errorf("str(%q) = %q, %v; encoding/json gives %q", in, got, err, want)
	}
	if back := appendString(nil, got); !JSONEqual(back, in) {
		t.Errorf("appendString(%q) = %s, not equal to %s", got, back, in)
	}
}

// FuzzScan checks the scanner and the string codec against encoding/json.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e3,"x\u00e9\n"]}`, `"\ud83d\ude00"`, `[true,false,null]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if got, want := validJSON(in), json.Valid(in); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", in, got, want)
		}
		checkString(t, in)
	})
}

// TestAnthropicSystemPlacement: the system messages that lead a window go
// to the request's system field, the others are written where they stand
// (mid-conversation system messages), whichever API they came from.
func TestAnthropicSystemPlacement(t *testing.T) {
	inline := Message{Role: System, Parts: []Part{{Type: Text, Text: "agents: Explore"}}, Wire: Wire{API: apiAnthropic, Form: "string", Role: anthropicInline}}
	tests := []struct {
		name     string
		ms       []Message
		sys, out string
	}{
		{"leading only", []Message{NewText(System, "s"), NewText(User, "u")}, `"s"`, `[{"role":"user","content":"u"}]`},
		{"two leading", []Message{NewText(System, "a"), NewText(System, "b"), NewText(User, "u")},
			`[{"type":"text","text":"a"},{"type":"text","text":"b"}]`, `[{"role":"user","content":"u"}]`},
		{"after a user message", []Message{NewText(System, "s"), NewText(User, "u"), NewText(System, "late"), NewText(Assistant, "a")},
			`"s"`, `[{"role":"user","content":"u"},{"role":"system","content":"late"},{"role":"assistant","content":"a"}]`},
		{"inline first", []Message{inline, NewText(User, "u")}, ``, `[{"role":"system","content":"agents: Explore"},{"role":"user","content":"u"}]`},
		{"system field then inline", []Message{NewText(System, "s"), inline, NewText(User, "u")},
			`"s"`, `[{"role":"system","content":"agents: Explore"},{"role":"user","content":"u"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sys, out, err := EncodeAnthropicMessages(tt.ms)
			if err != nil {
				t.Fatal(err)
			}
			if string(sys) != tt.sys || string(out) != tt.out {
				t.Errorf("got system %s messages %s\nwant system %s messages %s", sys, out, tt.sys, tt.out)
			}
		})
	}
}
