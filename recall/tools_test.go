package recall_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	mem "github.com/mnemehq/mneme/memory"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"

	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/token"
)

// The recall tools' schemas must cost no more than the engine reserves for
// them. ToolsTokens charges a tools preamble once per request; a request
// that declares tools of its own pays it anyway, so the recall tools'
// own cost is what they add on top of it.
// maxRecallToolsTokens keeps the schemas short: they ride on every request
// whose window has left something out.
const maxRecallToolsTokens = 400

func TestRecallToolsFitTheirReservation(t *testing.T) {
	c, err := token.Get(token.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	for _, shape := range []recall.Shape{recall.OpenAI, recall.Anthropic, recall.MCP} {
		defs := recall.Definitions(shape)
		if len(defs) != 2 {
			t.Fatalf("%s: %d definitions", shape, len(defs))
		}
		own := token.ToolsTokens(c, defs) - token.ToolsPreambleTokens
		alone := token.ToolsTokens(c, defs)
		t.Logf("%s: recall tools cost %d tokens on top of other tools, %d alone (with the tools preamble)", shape, own, alone)
		if own > maxRecallToolsTokens {
			t.Errorf("%s: recall tools cost %d tokens, more than the %d reserved", shape, own, maxRecallToolsTokens)
		}
		for _, d := range defs {
			if !json.Valid(d) {
				t.Errorf("%s: invalid JSON %s", shape, d)
			}
		}
	}
}

func TestDefinitionShapes(t *testing.T) {
	all := append(append([]string{}, recall.RecallTools...), recall.MemoryTools...)
	for _, tc := range []struct {
		shape  recall.Shape
		name   func(map[string]any) any
		schema func(map[string]any) any
	}{
		{recall.OpenAI, func(m map[string]any) any { return m["function"].(map[string]any)["name"] },
			func(m map[string]any) any { return m["function"].(map[string]any)["parameters"] }},
		{recall.Anthropic, func(m map[string]any) any { return m["name"] }, func(m map[string]any) any { return m["input_schema"] }},
		{recall.MCP, func(m map[string]any) any { return m["name"] }, func(m map[string]any) any { return m["inputSchema"] }},
	} {
		defs := recall.Definitions(tc.shape, all...)
		if len(defs) != 4 {
			t.Fatalf("%s: %d definitions", tc.shape, len(defs))
		}
		for i, d := range defs {
			var m map[string]any
			if err := json.Unmarshal(d, &m); err != nil {
				t.Fatalf("%s: %v", tc.shape, err)
			}
			if tc.shape == recall.OpenAI && m["type"] != "function" {
				t.Errorf("%s: %s", tc.shape, d)
			}
			if tc.name(m) != all[i] {
				t.Errorf("%s: name %v, want %s", tc.shape, tc.name(m), all[i])
			}
			if s, ok := tc.schema(m).(map[string]any); !ok || s["type"] != "object" {
				t.Errorf("%s: schema of %s: %v", tc.shape, all[i], tc.schema(m))
			}
		}
	}
	if !recall.IsTool("mneme_read") || recall.IsTool("read_file") {
		t.Error("IsTool")
	}
}

func TestHandler(t *testing.T) {
	ctx := context.Background()
	s := inmem.New()
	defer s.Close()
	evs, err := s.Append(ctx, "a", "t", 0, []store.Event{
		{Kind: store.KindMessage, Message: ptr(message.NewText(message.User, "deploy INV-4401 to staging"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &recall.Handler{Recall: &recall.Recall{Store: s}, Memory: mem.New(s, mem.Options{})}
	sc := recall.Scope{Tenant: "a", Thread: "t"}
	tests := []struct {
		name, tool, args string
		wantErr          bool
		want             string
	}{
		{"search", recall.ToolSearch, `{"query":"INV-4401"}`, false, "ref " + evs[0].Ref},
		{"search none", recall.ToolSearch, `{"query":"kubernetes"}`, false, "no results"},
		{"search role", recall.ToolSearch, `{"query":"deploy","role":"assistant"}`, false, "no results"},
		{"search bad role", recall.ToolSearch, `{"query":"deploy","role":"boss"}`, true, "role must be"},
		{"search no query", recall.ToolSearch, `{}`, true, "query is required"},
		{"search 100 KB", recall.ToolSearch, `{"query":"` + strings.Repeat("a ", 50<<10) + `"}`, true, "error:"},
		{"read", recall.ToolRead, `{"ref":"` + evs[0].Ref + `"}`, false, "deploy INV-4401 to staging"},
		{"read unknown", recall.ToolRead, `{"ref":"m_000"}`, true, "no message with ref"},
		{"read no ref", recall.ToolRead, `{"offset":3}`, true, "ref is required"},
		{"not JSON", recall.ToolRead, `{"ref":`, true, "not a JSON object"},
		{"wrong types", recall.ToolRead, `{"ref":42}`, true, "not a JSON object"},
		{"unknown tool", "rm_rf", `{}`, true, "unknown tool"},
		{"remember", recall.ToolRemember, `{"namespace":["user","prefs"],"key":"editor","value":{"text":"vim"}}`, false, "remembered [user/prefs] editor"},
		{"remember path namespace", recall.ToolRemember, `{"namespace":"user/facts","key":"city","value":"Lyon"}`, false, "remembered [user/facts] city"},
		{"remember missing", recall.ToolRemember, `{"key":"x"}`, true, "required"},
		{"remember bad namespace", recall.ToolRemember, `{"namespace":["a\u0000b"],"key":"x","value":1}`, true, "error:"},
		{"recall memory", recall.ToolRecallMemory, `{"query":"vim"}`, false, `[user/prefs] editor: {"text":"vim"}`},
		{"recall memory ns", recall.ToolRecallMemory, `{"query":"Lyon","namespace":["user","prefs"]}`, false, "nothing remembered"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := h.Call(ctx, sc, tc.tool, tc.args)
			if (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, recall.ErrTool)) {
				t.Fatalf("err %v, want error %v (ErrTool)", err, tc.wantErr)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("out %q, want it to contain %q", out, tc.want)
			}
		})
	}
	// Answer returns a tool-result message for the call.
	res, err := h.Answer(ctx, sc, message.Part{Type: message.ToolCall, ToolCallID: "call_9", ToolName: recall.ToolRead, Arguments: `{"ref":"nope"}`})
	if err == nil || !res.IsToolResult() || res.ToolResults()[0].ToolCallID != "call_9" || !res.ToolResults()[0].IsError {
		t.Fatalf("answer %+v %v", res, err)
	}
	// Memory is per tenant: b recalls nothing of a's.
	out, _ := h.Call(ctx, recall.Scope{Tenant: "b", Thread: "t"}, recall.ToolRecallMemory, `{"query":"vim"}`)
	if !strings.Contains(out, "nothing remembered") {
		t.Fatalf("tenant b recalled %q", out)
	}
	// A handler without memory does not pretend to have it.
	out, err = (&recall.Handler{Recall: h.Recall}).Call(ctx, sc, recall.ToolRemember, `{}`)
	if !errors.Is(err, recall.ErrTool) || !strings.Contains(out, "not available") {
		t.Fatalf("no memory: %q %v", out, err)
	}
}

func ptr(m message.Message) *message.Message { return &m }
