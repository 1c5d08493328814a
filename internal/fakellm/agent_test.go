package fakellm

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAgentReply: the script's next step follows the highest step label
// the request holds, picks the tools a client offers, and ends with the
// done marker.
func TestAgentReply(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		tools     []string
		thinking  bool
		wantTool  string
		wantCalls int
		wantStep  string
		wantDone  bool
	}{
		{"no marker", `{"messages":[{"role":"user","content":"hi"}]}`, []string{"lookup"}, false, "", 0, "", false},
		{"first step, generic tool", `mneme-steps=3`, []string{"mneme_search", "lookup"}, false, "lookup", 1, "mneme-step 1", false},
		{"after step 3, parallel at 4", `mneme-steps=5 ... mneme-step 2 ... mneme-step 3`, []string{"lookup"}, false, "lookup", 2, "mneme-step 4", false},
		{"done", `mneme-steps=3 mneme-step 3`, []string{"lookup"}, false, "", 0, "", true},
		{"no tools offered", `mneme-steps=3`, nil, false, "", 0, "", true},
		{"claude code writes", `mneme-steps=9 mneme-dir=/tmp/p mneme-step 2`, []string{"Bash", "Read", "Write", "Glob"}, true, "Write", 1, "mneme-step 3", false},
		{"claude code reads", `mneme-steps=9 mneme-dir=/tmp/p mneme-step 3`, []string{"Bash", "Read", "Write"}, false, "Read", 1, "", false},
		{"codex", `mneme-steps=9 mneme-dir=/tmp/p`, []string{"exec_command", "write_stdin"}, false, "exec_command", 1, "mneme-step 1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, ok := AgentReply(Request{Body: []byte(tt.body), Tools: tt.tools, Thinking: tt.thinking})
			if tt.wantTool == "" && !tt.wantDone {
				if ok {
					t.Fatalf("scripted a request without the marker: %+v", rep)
				}
				return
			}
			if !ok {
				t.Fatal("not scripted")
			}
			if tt.wantDone != strings.Contains(rep.Text, AgentDone) {
				t.Fatalf("text %q", rep.Text)
			}
			if len(rep.ToolCalls) != tt.wantCalls {
				t.Fatalf("%d calls, want %d", len(rep.ToolCalls), tt.wantCalls)
			}
			for _, c := range rep.ToolCalls {
				if c.Name != tt.wantTool || !json.Valid([]byte(c.Arguments)) || !strings.Contains(c.Arguments, tt.wantStep) {
					t.Fatalf("call %+v, want %s with %q", c, tt.wantTool, tt.wantStep)
				}
			}
			if tt.thinking != (rep.Thinking != "") {
				t.Fatalf("thinking %q", rep.Thinking)
			}
		})
	}
}
