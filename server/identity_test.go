package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/store"
)

// logBytes is every event of every thread of tenant, as JSON: a refused
// request must leave it byte for byte as it was.
func (r *rig) logBytes(t testing.TB, tenant string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	p := store.Page{Limit: 1000}
	for {
		infos, next, err := r.st.Threads(ctx, tenant, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			evs, err := r.st.Load(ctx, tenant, in.ID, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			j, _ := json.Marshal(evs)
			b.WriteString(in.ID + " " + string(j) + "\n")
		}
		if next == "" {
			return b.String()
		}
		p.Cursor = next
	}
}

func oaCallJSON(id string) string {
	return `{"id":"` + id + `","type":"function","function":{"name":"grep","arguments":"{}"}}`
}

// TestRefusedBeforeTheLog: each hole of issue 15 item 6 is a 400 in the
// API's shape, never forwarded, and the log is byte-identical after it.
func TestRefusedBeforeTheLog(t *testing.T) {
	r := startRig(t, rigOpts{backend: "sqlite", budget: 16000})
	oa, an := "/v1/chat/completions", "/v1/messages"
	seed := func(thread string, body string, mode string) {
		t.Helper()
		hdr := []string{proxy.HeaderThread, thread}
		if mode != "" {
			hdr = append(hdr, proxy.HeaderMode, mode)
		}
		if status, _, b := r.do(t, "POST", oa, "", body, hdr...); status != 200 {
			t.Fatalf("seed %s: %d %s", thread, status, b)
		}
	}
	// A thread in append mode with a call answered (c1) and one closed by
	// a later message with a synthetic result (c2).
	seed("app", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"go"},{"role":"assistant","tool_calls":[`+oaCallJSON("c1")+`]},{"role":"tool","tool_call_id":"c1","content":"r1"}]}`, proxy.ModeAppend)
	seed("app", `{"model":"gpt-4o-mini","messages":[{"role":"assistant","tool_calls":[`+oaCallJSON("c2")+`]},{"role":"user","content":"never mind"}]}`, proxy.ModeAppend)
	seed("res", chatBody("user", "hi"), "")
	big := strings.Repeat("lorem ipsum dolor sit amet ", 60000) // ≈300k tokens
	msg := `{"role":"user","content":"hi"}`
	tests := []struct {
		name, path, thread, mode, body string
	}{
		{"duplicate messages", oa, "res", "", `{"model":"gpt-4o-mini","messages":[` + msg + `],"messages":[{"role":"user","content":"smuggled"}]}`},
		{"duplicate model", oa, "res", "", `{"model":"gpt-4o-mini","messages":[` + msg + `],"model":"gpt-4o"}`},
		{"duplicate key in a message", oa, "res", "", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi","content":"smuggled"}]}`},
		{"duplicate key deep in a tool schema", oa, "res", "", `{"model":"gpt-4o-mini","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","type":"array"}}}],"messages":[` + msg + `]}`},
		{"duplicate by escape", oa, "res", "", `{"model":"gpt-4o-mini","messages":[` + msg + `],"m\u0065ssages":[]}`},
		{"anthropic duplicate messages", an, "res-an", "", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[` + msg + `],"messages":[` + msg + `]}`},
		{"anthropic duplicate system", an, "res-an", "", `{"model":"claude-sonnet-4-5","max_tokens":10,"system":"a","system":"b","messages":[` + msg + `]}`},
		{"escape JSON does not have", oa, "res", "", `{"model":"gpt-4o-mini","mess\x61ges":[` + msg + `]}`},
		{"escape in a value", oa, "res", "", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"\x41"}]}`},
		{"append: second result", oa, "app", proxy.ModeAppend, `{"model":"gpt-4o-mini","messages":[{"role":"tool","tool_call_id":"c1","content":"again"}]}`},
		{"append: late result after a synthetic one", oa, "app", proxy.ModeAppend, `{"model":"gpt-4o-mini","messages":[{"role":"tool","tool_call_id":"c2","content":"late"}]}`},
		{"append: orphan result", oa, "app", proxy.ModeAppend, `{"model":"gpt-4o-mini","messages":[{"role":"tool","tool_call_id":"nope","content":"r"}]}`},
		{"append: duplicate call id", oa, "app", proxy.ModeAppend, `{"model":"gpt-4o-mini","messages":[{"role":"assistant","tool_calls":[` + oaCallJSON("c1") + `]},{"role":"tool","tool_call_id":"c1","content":"r"}]}`},
		{"resend: result after the call was closed", oa, "res", "", `{"model":"gpt-4o-mini","messages":[` + msg + `,{"role":"assistant","tool_calls":[` + oaCallJSON("c7") + `]},{"role":"user","content":"other"},{"role":"tool","tool_call_id":"c7","content":"late"}]}`},
		{"budget: a 300k-token first message", oa, "big", "", chatBody("user", big)},
		{"budget: a 300k-token message on a thread", oa, "res", "", chatBody("user", "hi", "assistant", "ok: hi", "user", big)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, calls := r.logBytes(t, "default"), len(r.llm.Requests())
			hdr := []string{proxy.HeaderThread, tc.thread}
			if tc.mode != "" {
				hdr = append(hdr, proxy.HeaderMode, tc.mode)
			}
			status, _, body := r.do(t, "POST", tc.path, "", tc.body, hdr...)
			if status != http.StatusBadRequest {
				t.Errorf("status %d, want 400: %.300s", status, body)
			}
			checkErrorShape(t, tc.path, body)
			if n := len(r.llm.Requests()); n != calls {
				t.Errorf("forwarded upstream (%d calls, want %d)", n, calls)
			}
			if after := r.logBytes(t, "default"); after != before {
				t.Errorf("the log changed:\n%s\nthen\n%s", before, after)
			}
		})
	}
	// The thread is still served after every refusal.
	if status, _, b := r.do(t, "POST", oa, "", chatBody("user", "hi", "assistant", "ok: hi", "user", "next"), proxy.HeaderThread, "res"); status != 200 {
		t.Errorf("after the refusals: %d %s", status, b)
	}
}

// TestDeleteRacingRequests: 50 divergent requests on one thread with a
// DELETE in the middle: no 5xx, and no thread holds half a conversation (a
// reply whose request was deleted); a request after the DELETE begins the
// thread from its own history.
func TestDeleteRacingRequests(t *testing.T) {
	gate, arrived := make(chan struct{}), make(chan struct{}, 64)
	r := startRig(t, rigOpts{backend: "sqlite", llmOpts: []fakellm.Option{fakellm.WithHandler(func(q fakellm.Request) fakellm.Reply {
		if strings.HasPrefix(q.LastUserText, "U2-") {
			arrived <- struct{}{}
			<-gate // every request is in flight when the DELETE comes
		}
		return fakellm.Reply{Text: "ok: " + q.LastUserText}
	})}})
	base := []string{"user", "U1", "assistant", "ok: U1"}
	if status, _, b := r.do(t, "POST", "/v1/chat/completions", "", chatBody(base[:2]...), proxy.HeaderThread, "race"); status != 200 {
		t.Fatalf("seed: %d %s", status, b)
	}
	var wg sync.WaitGroup
	statuses := make([]int, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := chatBody(append(base[:4:4], "user", fmt.Sprintf("U2-%d", i))...)
			statuses[i], _, _ = r.do(t, "POST", "/v1/chat/completions", "", body, proxy.HeaderThread, "race")
		}()
	}
	for range 50 {
		<-arrived // logged and upstream
	}
	if status, _, b := r.do(t, "DELETE", "/api/threads/race", "", ""); status >= 300 {
		t.Fatalf("delete: %d %s", status, b)
	}
	close(gate)
	wg.Wait()
	for i, s := range statuses {
		if s != 200 {
			t.Errorf("request %d: %d", i, s)
		}
	}
	if got := r.messagesOf(t, "default", "race"); len(got) != 0 {
		t.Errorf("the deleted thread came back: %q", summary(got))
	}
	// Every branch left holds whole conversations: each reply follows
	// the user message it answers.
	checkWhole(t, r)
	// After the DELETE a request begins the thread from its own history.
	hist := append(base[:4:4], "user", "after")
	if status, _, b := r.do(t, "POST", "/v1/chat/completions", "", chatBody(hist...), proxy.HeaderThread, "race"); status != 200 {
		t.Fatalf("after: %d %s", status, b)
	}
	equalLines(t, "thread after the delete", summary(r.messagesOf(t, "default", "race")), []string{"user:U1", "assistant:ok: U1", "user:after", "assistant:ok: after"})
}

// checkWhole checks that in every thread every assistant text reply
// "ok: X" comes right after the user message X.
func checkWhole(t *testing.T, r *rig) {
	t.Helper()
	infos, _, err := r.st.Threads(context.Background(), "default", store.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		lines := summary(r.messagesOf(t, "default", in.ID))
		if len(lines) == 0 || !strings.HasPrefix(lines[0], "user:") {
			t.Errorf("%s starts with %q", in.ID, lines)
			continue
		}
		for i, l := range lines {
			if rest, ok := strings.CutPrefix(l, "assistant:ok: "); ok && (i == 0 || lines[i-1] != "user:"+rest) {
				t.Errorf("%s: reply %q does not follow its request: %q", in.ID, l, lines)
			}
		}
	}
}

// threadsOf returns every thread id of the default tenant.
func (r *rig) threadsOf(t testing.TB) []string {
	t.Helper()
	var ids []string
	p := store.Page{Limit: 1000}
	for {
		infos, next, err := r.st.Threads(context.Background(), "default", p)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			ids = append(ids, in.ID)
		}
		if next == "" {
			return ids
		}
		p.Cursor = next
	}
}

// parallel runs n requests on 8 clients and fails on any status but 200.
func parallel(t *testing.T, n int, req func(i int) (int, []byte)) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := 0
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if status, b := req(i); status != 200 {
					mu.Lock()
					if bad++; bad < 5 {
						t.Errorf("request %d: %d %.300s", i, status, b)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if bad > 0 {
		t.Fatalf("%d of %d requests not 200", bad, n)
	}
}

// TestIdentityAtScale: what broke thread identity (issue 15 items 1-3),
// at the scale, through `mneme serve`: every request 200, and the
// threads and logs as expected.
func TestIdentityAtScale(t *testing.T) {
	oa := "/v1/chat/completions"
	t.Run("10000 re-runs of one prompt", func(t *testing.T) {
		var n atomic.Int64
		r := startRig(t, rigOpts{llmOpts: []fakellm.Option{fakellm.WithHandler(func(q fakellm.Request) fakellm.Reply {
			return fakellm.Reply{Text: fmt.Sprintf("report variant %d", n.Add(1)%7)}
		})}})
		body := chatBody("system", "You write the daily report.", "user", "daily report")
		parallel(t, 10000, func(int) (int, []byte) {
			s, _, b := r.do(t, "POST", oa, "", body)
			return s, b
		})
		ids := r.threadsOf(t)
		if len(ids) != 7 { // one thread, and a branch for each other reply
			t.Fatalf("%d threads, want 7: %q", len(ids), ids)
		}
		seen := map[string]bool{}
		for _, id := range ids {
			got := summary(r.messagesOf(t, "default", id))
			if len(got) != 3 || got[0] != "system:You write the daily report." || got[1] != "user:daily report" || seen[got[2]] {
				t.Errorf("%s: %q", id, got)
			}
			seen[got[2]] = true
		}
	})
	t.Run("1000 branches from one point", func(t *testing.T) {
		r := startRig(t, rigOpts{})
		if s, _, b := r.do(t, "POST", oa, "", chatBody("user", "U1"), proxy.HeaderThread, "chat"); s != 200 {
			t.Fatalf("%d %s", s, b)
		}
		parents := make([]string, 1000)
		parallel(t, 1000, func(i int) (int, []byte) {
			s, h, b := r.do(t, "POST", oa, "", chatBody("user", "U1", "assistant", "ok: U1", "user", fmt.Sprintf("edit %d", i)), proxy.HeaderThread, "chat")
			parents[i] = h.Get(proxy.HeaderForkedFrom)
			return s, b
		})
		ids := r.threadsOf(t)
		if len(ids) != 1000 {
			t.Fatalf("%d threads, want 1000 (the thread and 999 branches)", len(ids))
		}
		for _, id := range ids {
			if id != "chat" && (!strings.HasPrefix(id, "chat~") || strings.Count(id, "~") != 1) {
				t.Errorf("%s is not a child of chat", id)
			}
			got := summary(r.messagesOf(t, "default", id))
			if len(got) != 4 || got[0] != "user:U1" || got[1] != "assistant:ok: U1" || got[3] != "assistant:ok: "+strings.TrimPrefix(got[2], "user:") {
				t.Errorf("%s: %q", id, got)
			}
		}
		forked := 0
		for _, p := range parents {
			if p == "chat" {
				forked++
			} else if p != "" {
				t.Errorf("forked from %q, want the real parent chat", p)
			}
		}
		if forked != 999 {
			t.Errorf("%d requests forked, want 999", forked)
		}
	})
	t.Run("50 concurrent divergent requests", func(t *testing.T) {
		r := startRig(t, rigOpts{})
		if s, _, b := r.do(t, "POST", oa, "", chatBody("user", "U1"), proxy.HeaderThread, "one"); s != 200 {
			t.Fatalf("%d %s", s, b)
		}
		var wg sync.WaitGroup
		status := make([]int, 50)
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status[i], _, _ = r.do(t, "POST", oa, "", chatBody("user", "U1", "assistant", "ok: U1", "user", fmt.Sprintf("mine %d", i)), proxy.HeaderThread, "one")
			}()
		}
		wg.Wait()
		for i, s := range status {
			if s != 200 {
				t.Errorf("request %d: %d", i, s)
			}
		}
		if ids := r.threadsOf(t); len(ids) != 50 {
			t.Errorf("%d threads, want 50", len(ids))
		}
		checkWhole(t, r)
	})
	for _, named := range []bool{true, false} {
		t.Run(fmt.Sprintf("200 calls with a changing system prompt, header %v", named), func(t *testing.T) {
			r := startRig(t, rigOpts{})
			hist := []string{"user", "goal"}
			var hdr []string
			if named {
				hdr = []string{proxy.HeaderThread, "agent"}
			}
			var thread string
			for i := range 200 {
				body := chatBody(append([]string{"system", fmt.Sprintf("It is step %d.", i)}, hist...)...)
				s, h, b := r.do(t, "POST", oa, "", body, hdr...)
				if s != 200 {
					t.Fatalf("call %d: %d %s", i, s, b)
				}
				if thread == "" {
					thread = h.Get(proxy.HeaderThread)
				}
				if h.Get(proxy.HeaderThread) != thread || h.Get(proxy.HeaderForkedFrom) != "" {
					t.Fatalf("call %d went to %s (forked from %q)", i, h.Get(proxy.HeaderThread), h.Get(proxy.HeaderForkedFrom))
				}
				var up struct {
					Messages []struct{ Role, Content string }
				}
				_ = json.Unmarshal(r.llm.Requests()[i].Body, &up)
				var sys []string
				for _, m := range up.Messages {
					if m.Role == "system" {
						sys = append(sys, m.Content)
					}
				}
				if len(sys) != 1 || sys[0] != fmt.Sprintf("It is step %d.", i) || up.Messages[0].Role != "system" {
					t.Fatalf("call %d: the model saw the system prompts %q", i, sys)
				}
				hist = append(hist, "assistant", replyText(b), "user", fmt.Sprintf("next %d", i))
			}
			if ids := r.threadsOf(t); len(ids) != 1 {
				t.Fatalf("threads %q", ids)
			}
			got := summary(r.messagesOf(t, "default", thread))
			if len(got) != 1+1+2*200-1 || got[0] != "system:It is step 0." {
				t.Errorf("%d messages: %q...", len(got), got[:3])
			}
		})
	}
}

// TestForkRoute: the JSON API starts branches.
func TestForkRoute(t *testing.T) {
	r := startRig(t, rigOpts{})
	oa := "/v1/chat/completions"
	if s, _, b := r.do(t, "POST", oa, "", chatBody("user", "U1"), proxy.HeaderThread, "src"); s != 200 {
		t.Fatalf("%d %s", s, b)
	}
	if s, _, b := r.do(t, "POST", oa, "", chatBody("user", "U1", "assistant", "ok: U1", "user", "U2"), proxy.HeaderThread, "src"); s != 200 {
		t.Fatalf("%d %s", s, b)
	}
	evs, err := r.st.Load(context.Background(), "default", "src", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var through int64 // the first reply
	for _, ev := range evs {
		if ev.Message != nil && ev.Message.Role == "assistant" && through == 0 {
			through = ev.Seq
		}
	}
	s, _, b := r.do(t, "POST", "/api/threads/src/fork", "", fmt.Sprintf(`{"through_seq":%d,"id":"copy"}`, through))
	if s != http.StatusCreated || !strings.Contains(string(b), `"id":"copy"`) || !strings.Contains(string(b), `"forked_from":"src"`) {
		t.Fatalf("fork: %d %s", s, b)
	}
	equalLines(t, "branch", summary(r.messagesOf(t, "default", "copy")), []string{"user:U1", "assistant:ok: U1"})
	for _, tc := range []struct {
		path, body string
		status     int
	}{
		{"/api/threads/src/fork", `{"id":"copy"}`, http.StatusConflict},
		{"/api/threads/src/fork", `{"through_seq":99}`, http.StatusBadRequest},
		{"/api/threads/src/fork", `{"through_seq":-1}`, http.StatusBadRequest},
		{"/api/threads/src/fork", `{"nope":1}`, http.StatusBadRequest},
		{"/api/threads/missing/fork", `{}`, http.StatusNotFound},
	} {
		if s, _, b := r.do(t, "POST", tc.path, "", tc.body); s != tc.status {
			t.Errorf("%s %s: %d %s, want %d", tc.path, tc.body, s, b, tc.status)
		}
	}
	// The whole thread, with a derived id.
	if s, _, b := r.do(t, "POST", "/api/threads/src/fork", "", `{}`); s != http.StatusCreated {
		t.Errorf("fork of the whole log: %d %s", s, b)
	}
}

// TestReencodedHistoriesDoNotFork: the same conversation resent in
// another spelling (both APIs) lands on the same thread.
func TestReencodedHistoriesDoNotFork(t *testing.T) {
	r := startRig(t, rigOpts{llmOpts: []fakellm.Option{fakellm.WithHandler(func(q fakellm.Request) fakellm.Reply {
		if q.LastUserText == "use the tool" && !strings.Contains(string(q.Body), "tool_result") && !strings.Contains(string(q.Body), `"role":"tool"`) {
			return fakellm.Reply{Text: "Looking.", ToolCalls: []fakellm.ToolCall{{ID: "tc1", Name: "grep", Arguments: `{"b":2,"a":1}`}}}
		}
		return fakellm.Reply{Text: "ok: " + q.LastUserText}
	})}})
	for _, tc := range []struct {
		api, path string
		first     string
		next      []string // re-encodings of the history after the first reply, each plus a new user message
	}{
		{"openai", "/v1/chat/completions",
			`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"s"},{"role":"user","content":"use the tool"}]}`,
			[]string{
				`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"s"},{"role":"user","content":"use the tool"},{"role":"assistant","content":"Looking.","tool_calls":[{"id":"tc1","type":"function","function":{"name":"grep","arguments":"{\"b\":2,\"a\":1}"}}]},{"role":"tool","tool_call_id":"tc1","content":"r"},{"role":"user","content":"n1"}]}`,
				`{"messages":[{"content":[{"type":"text","text":"s"}],"role":"system"},{"role":"user","content":[{"type":"text","text":"use "},{"type":"text","text":"the tool"}]},{"tool_calls":[{"type":"function","id":"tc1","function":{"arguments":"{ \"a\": 1, \"b\": 2 }","name":"grep"}}],"refusal":null,"annotations":[],"role":"assistant","content":[{"type":"text","text":"Looking."}]},{"content":[{"type":"text","text":"r"}],"tool_call_id":"tc1","role":"tool"},{"role":"user","content":"n1"},{"role":"assistant","content":"ok: n1","refusal":null},{"role":"user","content":"n2"}],"model":"gpt-4o-mini"}`,
			}},
		{"anthropic", "/v1/messages",
			`{"model":"claude-sonnet-4-5","max_tokens":100,"system":"s","messages":[{"role":"user","content":"use the tool"}]}`,
			[]string{
				`{"model":"claude-sonnet-4-5","max_tokens":100,"system":"s","messages":[{"role":"user","content":"use the tool"},{"role":"assistant","content":[{"type":"text","text":"Looking."},{"type":"tool_use","id":"tc1","name":"grep","input":{"b":2,"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"tc1","content":"r"}]},{"role":"user","content":"n1"}]}`,
				`{"max_tokens":100,"system":[{"type":"text","text":"s"}],"messages":[{"content":[{"type":"text","text":"use the tool"}],"role":"user"},{"role":"assistant","content":[{"text":"Looking.","type":"text"},{"input":{"a":1,"b":2},"name":"grep","id":"tc1","type":"tool_use"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"tc1","content":[{"type":"text","text":"r"}]}]},{"role":"user","content":"n1"},{"role":"assistant","content":[{"type":"text","text":"ok: n1"}]},{"role":"user","content":"n2"}],"model":"claude-sonnet-4-5"}`,
			}},
	} {
		t.Run(tc.api, func(t *testing.T) {
			thread := "reenc-" + tc.api
			if s, _, b := r.do(t, "POST", tc.path, "", tc.first, proxy.HeaderThread, thread); s != 200 {
				t.Fatalf("%d %s", s, b)
			}
			for i, body := range tc.next {
				s, h, b := r.do(t, "POST", tc.path, "", body, proxy.HeaderThread, thread)
				if s != 200 || h.Get(proxy.HeaderThread) != thread || h.Get(proxy.HeaderForkedFrom) != "" {
					t.Fatalf("re-encoding %d: %d thread %s forked from %q: %s", i, s, h.Get(proxy.HeaderThread), h.Get(proxy.HeaderForkedFrom), b)
				}
			}
			if n := len(r.messagesOf(t, "default", thread)); n != 8 { // s, use, call, result, n1, ok: n1, n2, ok: n2: nothing doubled
				t.Errorf("%d messages: %q", n, summary(r.messagesOf(t, "default", thread)))
			}
		})
	}
}
