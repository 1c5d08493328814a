package fakellm_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/internal/fakellm"
)

// postStrict sends body to s at path with the given headers and returns the
// status and the error message of the answer ("" on success).
func postStrict(t *testing.T, s *fakellm.Server, path, body string, header map[string]string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error.Message, b
}

func anthropicBody(system, messages, extra string) string {
	b := `{"model":"claude-sonnet-4-5","max_tokens":64`
	if system != "" {
		b += `,"system":` + system
	}
	if extra != "" {
		b += "," + extra
	}
	return b + `,"messages":` + messages + `}`
}

func cached(text string) string {
	return fmt.Sprintf(`{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}`, text)
}

// TestAnthropicStrict: what the real Messages API rejects, fakellm rejects
// with the API's message.
func TestAnthropicStrict(t *testing.T) {
	s := fakellm.Start()
	defer s.Close()
	beta := map[string]string{"anthropic-beta": "mid-conversation-system-2026-04-07"}
	four := `[{"role":"user","content":[` + cached("a") + `,` + cached("b") + `]},{"role":"assistant","content":[` + cached("c") + `]},{"role":"user","content":[` + cached("d") + `]}]`
	tests := []struct {
		name    string
		body    string
		header  map[string]string
		wantErr string // "" : accepted
	}{
		{"four breakpoints", anthropicBody("", four, ""), nil, ""},
		{"five breakpoints with the system", anthropicBody(`[`+cached("s")+`]`, four, ""), nil, "A maximum of 4 blocks with cache_control may be provided. Found 5."},
		{"five breakpoints with a tool", anthropicBody("", four, `"tools":[{"name":"f","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]`), nil, "Found 5."},
		{"breakpoint inside a tool result counts", anthropicBody(`[`+cached("s")+`]`,
			`[{"role":"user","content":[`+cached("a")+`]},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[`+cached("r")+`]},`+cached("b")+`,`+cached("c")+`]}]`, ""), nil, "Found 5."},
		{"mid-conversation system message", anthropicBody("", `[{"role":"user","content":"hi"},{"role":"system","content":"agents"},{"role":"user","content":"go"}]`, ""), beta, ""},
		{"developer role", anthropicBody("", `[{"role":"user","content":"hi"},{"role":"developer","content":"x"}]`, ""), nil, "messages.1.role: Input should be 'user', 'assistant' or 'system'"},
		{"tool role", anthropicBody("", `[{"role":"tool","content":"x"}]`, ""), nil, "messages.0.role: Input should be 'user', 'assistant' or 'system'"},
		{"unpaired tool_use", anthropicBody("", `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":"next"}]`, ""), nil, "`tool_use` ids were found without `tool_result` blocks immediately after: t1"},
		{"system message between a call and its result", anthropicBody("", `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"system","content":"x"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r"}]}]`, ""), beta, "`tool_use` ids were found without `tool_result` blocks immediately after: t1"},
		{"orphan tool_result", anthropicBody("", `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t9","content":"r"}]}]`, ""), nil, "unexpected `tool_use_id` found in `tool_result` blocks: t9"},
		{"thinking never issued", anthropicBody("", `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"Zm9v"},{"type":"text","text":"a"}]},{"role":"user","content":"go"}]`, ""), nil, "messages.1.content.0: Invalid `signature` in `thinking` block"},
		{"redacted thinking never issued", anthropicBody("", `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"redacted_thinking","data":"abc"}]},{"role":"user","content":"go"}]`, ""), nil, "Invalid `data` in `redacted_thinking` block"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, msg, raw := postStrict(t, s, "/v1/messages", tt.body, tt.header)
			if tt.wantErr == "" {
				if status != 200 {
					t.Fatalf("status %d: %s", status, raw)
				}
				return
			}
			if status != 400 || !strings.Contains(msg, tt.wantErr) {
				t.Fatalf("got %d %q, want 400 containing %q", status, msg, tt.wantErr)
			}
		})
	}
}

// TestAnthropicThinkingSigned: the thinking blocks fakellm issues (streamed
// or not) are accepted back as they came, and rejected once their thinking,
// signature or data changes.
func TestAnthropicThinkingSigned(t *testing.T) {
	s := fakellm.Start(fakellm.WithHandler(func(fakellm.Request) fakellm.Reply {
		return fakellm.Reply{Thinking: "I should answer briefly.", RedactedThinking: true, Text: "hello"}
	}))
	defer s.Close()
	thinking := `"thinking":{"type":"enabled","budget_tokens":1024}`
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			extra := thinking
			if stream {
				extra += `,"stream":true`
			}
			status, _, raw := postStrict(t, s, "/v1/messages", anthropicBody("", `[{"role":"user","content":"hi"}]`, extra), nil)
			if status != 200 {
				t.Fatalf("status %d: %s", status, raw)
			}
			content := issuedContent(t, raw, stream)
			if len(content) != 3 || content[0]["type"] != "thinking" || content[1]["type"] != "redacted_thinking" || content[2]["type"] != "text" {
				t.Fatalf("content %v", content)
			}
			resend := func(blocks []map[string]any) (int, string) {
				b, _ := json.Marshal(blocks)
				msgs := `[{"role":"user","content":"hi"},{"role":"assistant","content":` + string(b) + `},{"role":"user","content":"more"}]`
				st, msg, _ := postStrict(t, s, "/v1/messages", anthropicBody("", msgs, thinking), nil)
				return st, msg
			}
			if st, msg := resend(content); st != 200 {
				t.Fatalf("issued blocks sent back: %d %s", st, msg)
			}
			edits := map[string]func(c []map[string]any){
				"thinking text": func(c []map[string]any) { c[0]["thinking"] = "I should answer at length." },
				"signature":     func(c []map[string]any) { c[0]["signature"] = otherFirst(c[0]["signature"].(string)) },
				"redacted data": func(c []map[string]any) { c[1]["data"] = c[1]["data"].(string) + "x" },
			}
			for name, edit := range edits {
				c := make([]map[string]any, len(content))
				for i, m := range content {
					c[i] = map[string]any{}
					for k, v := range m {
						c[i][k] = v
					}
				}
				edit(c)
				if st, msg := resend(c); st != 400 || !strings.Contains(msg, "Invalid") {
					t.Errorf("%s modified: %d %q, want 400", name, st, msg)
				}
			}
		})
	}
}

// otherFirst returns sig with its first character replaced by another, so
// the edit changes the signature whatever the key made it start with.
func otherFirst(sig string) string {
	first := "x"
	if strings.HasPrefix(sig, first) {
		first = "y"
	}
	return first + sig[1:]
}

// issuedContent returns the content blocks of a Messages answer, rebuilt
// from the events when it was streamed.
func issuedContent(t *testing.T, raw []byte, stream bool) []map[string]any {
	t.Helper()
	if !stream {
		var m struct {
			Content []map[string]any `json:"content"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		return m.Content
	}
	var blocks []map[string]any
	for _, line := range bytes.Split(raw, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		var ev struct {
			Type         string         `json:"type"`
			ContentBlock map[string]any `json:"content_block"`
			Delta        map[string]any `json:"delta"`
			Index        int            `json:"index"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		switch ev.Type {
		case "content_block_start":
			blocks = append(blocks, ev.ContentBlock)
		case "content_block_delta":
			b := blocks[ev.Index]
			for _, k := range []string{"thinking", "signature", "text"} {
				if v, ok := ev.Delta[k].(string); ok {
					b[k] = b[k].(string) + v
				}
			}
		}
	}
	return blocks
}
