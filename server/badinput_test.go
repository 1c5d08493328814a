package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/api"
	"github.com/mnemehq/mneme/proxy"
)

// badInput is one malformed request: for the OpenAI route, the Anthropic
// route or the JSON API.
type badInput struct {
	name   string
	method string // default POST
	path   string
	body   string
	hdr    []string
	status int // the 4xx expected; 0: any 4xx
}

func deep(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// badInputs are the cases of issue 10 item 3 for each route.
func badInputs() []badInput {
	const oa, an = "/v1/chat/completions", "/v1/messages"
	huge := strings.Repeat("h", 1<<20)
	oaCall := func(id string) string {
		call := `{"type":"function","function":{"name":"f","arguments":"{}"}}`
		if id != "" {
			call = `{"id":` + id + `,"type":"function","function":{"name":"f","arguments":"{}"}}`
		}
		return call
	}
	return []badInput{
		// OpenAI.
		{name: "openai malformed JSON", path: oa, body: `{"model":"gpt-4o-mini","messages":[`},
		{name: "openai trailing garbage", path: oa, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]} x`},
		{name: "openai not an object", path: oa, body: `"hello"`},
		{name: "openai empty body", path: oa, body: ``},
		{name: "openai messages not an array", path: oa, body: `{"model":"gpt-4o-mini","messages":"hi"}`},
		{name: "openai message not an object", path: oa, body: `{"model":"gpt-4o-mini","messages":[42]}`},
		{name: "openai content a number", path: oa, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":42}]}`},
		{name: "openai role a number", path: oa, body: `{"model":"gpt-4o-mini","messages":[{"role":1,"content":"hi"}]}`},
		{name: "openai model a number", path: oa, body: `{"model":5,"messages":[{"role":"user","content":"hi"}]}`},
		{name: "openai stream a string", path: oa, body: `{"model":"gpt-4o-mini","stream":"yes","messages":[{"role":"user","content":"hi"}]}`},
		{name: "openai tools an object", path: oa, body: `{"model":"gpt-4o-mini","tools":{},"messages":[{"role":"user","content":"hi"}]}`},
		{name: "openai max_tokens a string", path: oa, body: `{"model":"gpt-4o-mini","max_tokens":"many","messages":[{"role":"user","content":"hi"}]}`},
		{name: "openai tool_calls an object", path: oa, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":{}}]}`},
		{name: "openai huge model name", path: oa, body: `{"model":"` + huge + `","messages":[{"role":"user","content":"hi"}]}`},
		{name: "openai huge thread id", path: oa, body: chatBody("user", "hi"), hdr: []string{proxy.HeaderThread, strings.Repeat("t", 300)}},
		{name: "openai deep nesting in content", path: oa, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":` + deep(100000) + `}]}`},
		{name: "openai deep nesting in an unknown field", path: oa, body: `{"model":"gpt-4o-mini","metadata":` + deep(100000) + `,"messages":[{"role":"user","content":"hi"}]}`},
		{name: "openai invalid UTF-8", path: oa, body: "{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9 \xff\"}]}"},
		{name: "openai tool call without id", path: oa, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[` + oaCall("") + `]},{"role":"tool","tool_call_id":"c1","content":"r"}]}`},
		{name: "openai tool call with empty id", path: oa, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[` + oaCall(`""`) + `]},{"role":"tool","tool_call_id":"","content":"r"}]}`},
		{name: "openai result without call", path: oa, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"nope","content":"r"}]}`},
		{name: "openai duplicated call ids", path: oa, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[` + oaCall(`"c1"`) + `,` + oaCall(`"c1"`) + `]},{"role":"tool","tool_call_id":"c1","content":"r"},{"role":"tool","tool_call_id":"c1","content":"r"}]}`},
		{name: "openai duplicated results", path: oa, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[` + oaCall(`"c1"`) + `]},{"role":"tool","tool_call_id":"c1","content":"r"},{"role":"tool","tool_call_id":"c1","content":"again"}]}`},
		{name: "openai unknown role", path: oa, body: `{"model":"gpt-4o-mini","messages":[{"role":"wizard","content":"hi"}]}`},
		{name: "openai empty messages", path: oa, body: `{"model":"gpt-4o-mini","messages":[]}`},
		{name: "openai missing messages", path: oa, body: `{"model":"gpt-4o-mini"}`},
		{name: "openai bad mode header", path: oa, body: chatBody("user", "hi"), hdr: []string{proxy.HeaderMode, "sideways"}},
		{name: "openai bad policy header", path: oa, body: chatBody("user", "hi"), hdr: []string{proxy.HeaderPolicy, `{"trigger":`}},
		{name: "openai body over the limit", path: oa, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("x", 33<<20) + `"}]}`, status: 413},

		// Anthropic.
		{name: "anthropic malformed JSON", path: an, body: `{"model":"claude-sonnet-4-5","max_tokens":`},
		{name: "anthropic not an object", path: an, body: `[1]`},
		{name: "anthropic messages not an array", path: an, body: `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":{}}`},
		{name: "anthropic system a number", path: an, body: `{"model":"claude-sonnet-4-5","max_tokens":10,"system":3,"messages":[{"role":"user","content":"hi"}]}`},
		{name: "anthropic content block without type", path: an, body: `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":[{"text":"hi"}]}]}`},
		{name: "anthropic max_tokens a string", path: an, body: `{"model":"claude-sonnet-4-5","max_tokens":"10","messages":[{"role":"user","content":"hi"}]}`},
		{name: "anthropic huge model name", path: an, body: `{"model":"` + huge + `","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`},
		{name: "anthropic deep nesting", path: an, body: `{"model":"claude-sonnet-4-5","max_tokens":10,"metadata":{"a":` + deep(50000) + `},"messages":[{"role":"user","content":"hi"}]}`},
		{name: "anthropic invalid UTF-8", path: an, body: "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}"},
		{name: "anthropic tool_use without id", path: an, body: `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"r"}]}]}`},
		{name: "anthropic result without call", path: an, body: `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"r"}]}]}`},
		{name: "anthropic duplicated ids", path: an, body: `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r"}]}]}`},
		{name: "anthropic unknown role", path: an, body: `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"system","content":"hi"}]}`},
		{name: "anthropic empty messages", path: an, body: `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[]}`},

		// The JSON API.
		{name: "api policy malformed", method: "PUT", path: "/api/threads/seed/policy", body: `{"trigger":`},
		{name: "api policy wrong type", method: "PUT", path: "/api/threads/seed/policy", body: `{"min_tail_turns":"two"}`},
		{name: "api policy deep nesting", method: "PUT", path: "/api/threads/seed/policy", body: `{"x":` + deep(50000) + `}`},
		{name: "api policy invalid UTF-8", method: "PUT", path: "/api/threads/seed/policy", body: "{\"model\":\"\xff\"}"},
		{name: "api memory malformed", method: "PUT", path: "/api/memory/item?ns=a&key=k", body: `{"value":`},
		{name: "api memory no value", method: "PUT", path: "/api/memory/item?ns=a&key=k", body: `{}`},
		{name: "api memory negative ttl", method: "PUT", path: "/api/memory/item?ns=a&key=k", body: `{"value":1,"ttl_seconds":-1}`},
		{name: "api memory ttl wrong type", method: "PUT", path: "/api/memory/item?ns=a&key=k", body: `{"value":1,"ttl_seconds":"1h"}`},
		{name: "api memory no namespace", method: "PUT", path: "/api/memory/item?key=k", body: `{"value":1}`},
		{name: "api memory no key", method: "PUT", path: "/api/memory/item?ns=a", body: `{"value":1}`},
		{name: "api memory huge key", method: "PUT", path: "/api/memory/item?ns=a&key=" + strings.Repeat("k", 5000), body: `{"value":1}`},
		{name: "api memory invalid UTF-8 value", method: "PUT", path: "/api/memory/item?ns=a&key=k", body: "{\"value\":\"\xff\xfe\"}"},
		{name: "api memory deep value", method: "PUT", path: "/api/memory/item?ns=a&key=k", body: `{"value":` + deep(50000) + `}`},
		{name: "api memory body over 1 MiB", method: "PUT", path: "/api/memory/item?ns=a&key=k", body: `{"value":"` + strings.Repeat("v", 1<<20) + `"}`},
		{name: "api memory filter not JSON", method: "GET", path: "/api/memory?filter=%7Bnope"},
		{name: "api memory filter not an object", method: "GET", path: "/api/memory?filter=%5B1%5D"},
		{name: "api memory limit not a number", method: "GET", path: "/api/memory?limit=ten"},
		{name: "api delete namespace without ns", method: "DELETE", path: "/api/memory"},
		{name: "api search without q", method: "GET", path: "/api/search"},
		{name: "api search limit too big", method: "GET", path: "/api/search?q=x&limit=100000"},
		{name: "api thread log from negative", method: "GET", path: "/api/threads/seed?from=-1"},
		{name: "api thread huge id", method: "GET", path: "/api/threads/" + strings.Repeat("i", 300)},
		{name: "api read negative offset", method: "GET", path: "/api/read/m_0?offset=-5"},
		{name: "api threads limit zero", method: "GET", path: "/api/threads?limit=0"},
	}
}

// TestBadInput: every malformed request gets a 4xx (never a 5xx) in the
// shape of the API it speaks, and leaves the store as it was.
func TestBadInput(t *testing.T) {
	r := startRig(t, rigOpts{backend: "sqlite"})
	if status, _, b := r.do(t, "POST", "/v1/chat/completions", "", chatBody("user", "seed the store"), proxy.HeaderThread, "seed"); status != 200 {
		t.Fatalf("seed: %d %s", status, b)
	}
	if status, _, b := r.do(t, "PUT", "/api/memory/item?ns=a&key=seed", "", `{"value":"seed"}`); status != 200 {
		t.Fatalf("seed memory: %d %s", status, b)
	}
	for _, tc := range badInputs() {
		t.Run(tc.name, func(t *testing.T) {
			before := r.snapshot(t, "default")
			method := tc.method
			if method == "" {
				method = "POST"
			}
			hdr := tc.hdr
			if len(hdr) == 0 && strings.HasPrefix(tc.path, "/v1/") {
				hdr = []string{proxy.HeaderThread, "bad-input"}
			}
			status, _, body := r.do(t, method, tc.path, "", tc.body, hdr...)
			if status < 400 || status >= 500 || tc.status != 0 && status != tc.status {
				t.Errorf("status %d, want a 4xx (%d): %.300s", status, tc.status, body)
			}
			checkErrorShape(t, tc.path, body)
			if after := r.snapshot(t, "default"); after != before {
				t.Errorf("the store changed:\n%s\nthen\n%s", before, after)
			}
		})
	}
}

// checkErrorShape checks an error body against the shape of the route's
// API: OpenAI, Anthropic or the JSON API's {"error":{"code","message"}}.
func checkErrorShape(t *testing.T, path string, body []byte) {
	t.Helper()
	switch {
	case strings.HasPrefix(path, "/v1/messages"):
		errorShape(t, proxy.Anthropic, body)
	case strings.HasPrefix(path, "/v1/"):
		errorShape(t, proxy.OpenAI, body)
	default:
		var eb api.ErrorBody
		if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			t.Errorf("not the API's error shape: %.300s", body)
		}
	}
}

// TestHugeHistory: a resent history of 100,000 messages is taken (or
// refused with a 4xx), never a 5xx, and the next resend of it plus one
// message appends only that message.
func TestHugeHistory(t *testing.T) {
	r := startRig(t, rigOpts{backend: "sqlite", budget: 128000})
	r.timeout = 10 * time.Minute // the race detector makes it a minute
	var b strings.Builder
	b.WriteString(`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"s"}`)
	for i := 0; i < 100000; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `,{"role":%q,"content":"message %d"}`, role, i)
	}
	body := b.String() + `,{"role":"user","content":"and now?"}]}`
	status, _, rb := r.do(t, "POST", "/v1/chat/completions", "", body, proxy.HeaderThread, "huge")
	if status >= 500 {
		t.Fatalf("status %d: %.300s", status, rb)
	}
	if status >= 400 {
		checkErrorShape(t, "/v1/chat/completions", rb)
		if s := r.snapshot(t, "default"); s != "" {
			t.Errorf("a refused history changed the store: %s", s)
		}
		return
	}
	n := len(r.messagesOf(t, "default", "huge"))
	if n != 100003 { // system, 100,000, the last user message, the reply
		t.Errorf("logged %d messages, want 100003", n)
	}
	if status != http.StatusOK {
		t.Errorf("status %d", status)
	}
}
