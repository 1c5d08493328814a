package proxy_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
)

// anthropicRig is the proxy on loopback with a strict fakellm upstream and
// an in-memory store, under a small budget so that compaction happens.
type anthropicRig struct {
	url string
	llm *fakellm.Server
	m   *mneme.Engine
	st  store.Store
}

func startAnthropicRig(t *testing.T, budget int, opts ...fakellm.Option) *anthropicRig {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	llm := fakellm.Start(opts...)
	t.Cleanup(llm.Close)
	pol := mneme.DefaultPolicy()
	pol.BudgetTokens, pol.ReserveOutputTokens = budget, budget/16
	pol.MinTailTokens, pol.EvictOverTokens = budget/8, budget/4
	st := inmem.New()
	m, err := mneme.Open(context.Background(), mneme.Config{Store: st, Policy: &pol, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	px, err := proxy.New(proxy.Config{Engine: m, OpenAIUpstream: llm.URL(), AnthropicUpstream: llm.URL(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(px.Handler())
	t.Cleanup(srv.Close)
	return &anthropicRig{url: srv.URL, llm: llm, m: m, st: st}
}

// post sends an Anthropic request through the proxy; it fails the test on
// anything but a 200.
func (r *anthropicRig) post(t *testing.T, path string, body any, hdr ...string) (http.Header, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", r.url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("x-api-key", "sk-ant-test")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: status %d: %s", path, resp.StatusCode, out)
	}
	return resp.Header, out
}

// upstreamMessages returns the recorded upstream Messages requests (not
// summarization calls) as decoded JSON.
func (r *anthropicRig) upstreamMessages(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, rec := range r.llm.Requests() {
		if rec.Path != "/v1/messages" || bytes.Contains(rec.Body, []byte(fakellm.MarkerObserver)) || bytes.Contains(rec.Body, []byte(fakellm.MarkerReflector)) {
			continue
		}
		var v map[string]any
		d := json.NewDecoder(bytes.NewReader(rec.Body))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

type block = map[string]any

func cc() block { return block{"type": "ephemeral"} }

// toolLoop answers every request with one read_file call, so that a test
// client runs an agent loop against it.
func toolLoop(r fakellm.Request) fakellm.Reply {
	if r.IsSummarization() {
		return fakellm.DefaultReply(r)
	}
	n := len(r.Messages)
	return fakellm.Reply{ToolCalls: []fakellm.ToolCall{{Name: "read_file", Arguments: fmt.Sprintf(`{"path":"src/f%d.go"}`, n)}}}
}

// agent is a client that resends its whole history: the replies it got,
// a tool result of a few KB for each call, and (midSystem) system messages
// among the messages as Claude Code sends them.
type agent struct {
	hist      []any
	midSystem bool
	step      int
	lines     int // of each tool result (default 60: a few KB)
}

func newAgent(midSystem bool) *agent {
	a := &agent{midSystem: midSystem}
	a.hist = []any{block{"role": "user", "content": []any{block{"type": "text", "text": "Fix the build. Step through the files one by one."}}}}
	if midSystem {
		a.hist = append(a.hist, block{"role": "system", "content": "The following agents are available: Explore, Plan."})
	}
	return a
}

// answer appends the reply (a non-streamed Messages response) and the
// results of its tool calls.
func (a *agent) answer(t *testing.T, body []byte) {
	t.Helper()
	var resp struct {
		Content []map[string]any `json:"content"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	a.hist = append(a.hist, block{"role": "assistant", "content": resp.Content})
	var results []any
	for _, b := range resp.Content {
		if b["type"] == "tool_use" {
			results = append(results, block{"type": "tool_result", "tool_use_id": b["id"],
				"content": fmt.Sprintf("// file %d\n", a.step) + strings.Repeat(fmt.Sprintf("func f%d() { return } // padding line\n", a.step), cmp.Or(a.lines, 60))})
		}
	}
	if len(results) == 0 {
		results = []any{block{"type": "text", "text": "go on"}}
	}
	a.hist = append(a.hist, block{"role": "user", "content": results})
	if a.midSystem && a.step%5 == 4 {
		a.hist = append(a.hist, block{"role": "system", "content": fmt.Sprintf("Reminder %d: keep the todo list current.", a.step)})
	}
	a.step++
}

// withNewestBreakpoint returns hist with a breakpoint on its last block;
// hist itself is left as it was (only the last message is copied).
func withNewestBreakpoint(hist []any) []any {
	c := append([]any(nil), hist...)
	last := map[string]any{}
	for k, v := range c[len(c)-1].(map[string]any) {
		last[k] = v
	}
	blocks, ok := last["content"].([]any)
	if !ok {
		blocks = []any{block{"type": "text", "text": last["content"]}}
	}
	blocks = append([]any(nil), blocks...)
	b := map[string]any{"cache_control": cc()}
	for k, v := range blocks[len(blocks)-1].(map[string]any) {
		b[k] = v
	}
	blocks[len(blocks)-1] = b
	last["content"] = blocks
	c[len(c)-1] = last
	return c
}

// countCC counts the cache_control members anywhere in v.
func countCC(v any) int {
	n := 0
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "cache_control" {
				n++
			}
			n += countCC(e)
		}
	case []any:
		for _, e := range x {
			n += countCC(e)
		}
	}
	return n
}

// normalized is what the provider's cache sees of a request's prefix: the
// tools, the system and each message with the breakpoint markers taken out
// and string content spelled as a text block.
func normalized(req map[string]any) (head string, msgs []string) {
	strip := func(v any) any {
		b, _ := json.Marshal(v)
		var c any
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		_ = d.Decode(&c)
		var walk func(any)
		walk = func(v any) {
			switch x := v.(type) {
			case map[string]any:
				delete(x, "cache_control")
				if s, ok := x["content"].(string); ok && x["role"] != nil {
					x["content"] = []any{map[string]any{"type": "text", "text": s}}
				}
				for _, e := range x {
					walk(e)
				}
			case []any:
				for _, e := range x {
					walk(e)
				}
			}
		}
		walk(c)
		return c
	}
	sys := req["system"]
	if s, ok := sys.(string); ok {
		sys = []any{map[string]any{"type": "text", "text": s}}
	}
	hb, _ := json.Marshal([]any{strip(req["tools"]), strip(sys), req["model"]})
	for _, m := range req["messages"].([]any) {
		mb, _ := json.Marshal(strip(m))
		msgs = append(msgs, string(mb))
	}
	return string(hb), msgs
}

// lastBreakpoint returns the index of the last message holding a
// cache_control block (-1: none).
func lastBreakpoint(req map[string]any) int {
	ms := req["messages"].([]any)
	for i := len(ms) - 1; i >= 0; i-- {
		if countCC(ms[i]) > 0 {
			return i
		}
	}
	return -1
}

// TestBreakpointsOwnedByMneme: 200 calls of a client that moves its
// breakpoint to the newest block each call (plus one on the system prompt)
// through a window under a small budget. The strict upstream answers every
// call (it rejects more than 4 cache_control blocks, as the API does); each
// upstream request carries the client's system breakpoint and its newest
// one, none of the stale ones; and between compactions the prefix up to
// the last breakpoint is identical call to call.
func TestBreakpointsOwnedByMneme(t *testing.T) {
	const calls = 200
	r := startAnthropicRig(t, 12000, fakellm.WithHandler(toolLoop))
	compacted := make([]bool, calls)
	a := newAgent(false)
	a.lines = 20 // ~1 KB: 200 resent histories stay a few MB in all
	for i := 0; i < calls; i++ {
		body := block{
			"model": "claude-sonnet-4-5", "max_tokens": 256,
			"system":   []any{block{"type": "text", "text": "You are a coding agent.", "cache_control": cc()}},
			"tools":    []any{block{"name": "read_file", "input_schema": block{"type": "object"}}},
			"messages": withNewestBreakpoint(a.hist),
		}
		h, out := r.post(t, "/v1/messages", body)
		a.answer(t, out)
		if h.Get(proxy.HeaderThread) == "" {
			t.Fatalf("call %d not managed", i)
		}
		compacted[i] = h.Get(proxy.HeaderCompacted) == "true"
	}
	ups := r.upstreamMessages(t)
	if len(ups) != calls {
		t.Fatalf("%d upstream calls, want %d", len(ups), calls)
	}
	steps, stable, checked := 0, 0, 0
	var ph string
	var pm []string
	for i, u := range ups {
		h, m := normalized(u)
		prevH, prevM := ph, pm
		ph, pm = h, m
		if n := countCC(u); n > 4 || n < 2 {
			t.Fatalf("call %d: %d cache_control blocks upstream, want 2..4", i, n)
		}
		if countCC(u["system"]) != 1 {
			t.Fatalf("call %d: the client's system breakpoint is gone: %v", i, u["system"])
		}
		ms := u["messages"].([]any)
		if lastBreakpoint(u) != len(ms)-1 {
			t.Fatalf("call %d: the newest block carries no breakpoint", i)
		}
		if compacted[i] {
			steps++
		}
		if i == 0 || compacted[i] {
			continue
		}
		checked++
		k := lastBreakpoint(ups[i-1])
		ok := prevH == h && len(m) > k
		for j := 0; ok && j <= k; j++ {
			ok = prevM[j] == m[j]
		}
		if !ok {
			t.Errorf("call %d: the prefix up to the previous call's last breakpoint changed without a compaction", i)
			continue
		}
		stable++
	}
	if steps == 0 {
		t.Fatal("no compaction in 200 calls: the budget does not bind")
	}
	t.Logf("%d calls, %d compaction steps, prefix stable on %d/%d calls without one", calls, steps, stable, checked)
}

// TestMidConversationSystem: system messages inside messages go through
// the window where they stand, the strict upstream (with the beta) takes
// them, and the log holds each once, through compactions.
func TestMidConversationSystem(t *testing.T) {
	const calls = 40
	r := startAnthropicRig(t, 6000, fakellm.WithHandler(toolLoop))
	var thread string
	a := newAgent(true)
	for i := 0; i < calls; i++ {
		body := block{
			"model": "claude-sonnet-4-5", "max_tokens": 256,
			"system":   "You are a coding agent.",
			"tools":    []any{block{"name": "read_file", "input_schema": block{"type": "object"}}},
			"messages": a.hist,
		}
		h, out := r.post(t, "/v1/messages", body, "anthropic-beta", "mid-conversation-system-2026-04-07")
		a.answer(t, out)
		thread = h.Get(proxy.HeaderThread)
	}
	sawSystem := 0
	for i, u := range r.upstreamMessages(t) {
		if s, _ := u["system"].(string); s != "You are a coding agent." {
			t.Fatalf("call %d: system field upstream = %v", i, u["system"])
		}
		ms := u["messages"].([]any)
		for j, m := range ms {
			if m.(map[string]any)["role"] != "system" {
				continue
			}
			sawSystem++
			// Where the client put it: after a user message (the task or
			// tool results), never between a call and its results.
			if j == 0 || ms[j-1].(map[string]any)["role"] != "user" {
				t.Fatalf("call %d: system message at %d does not follow a user message", i, j)
			}
		}
	}
	if sawSystem < calls/5 {
		t.Fatalf("%d mid-conversation system messages upstream over %d calls", sawSystem, calls)
	}
	evs, err := r.st.Load(context.Background(), "default", thread, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	compactions := 0
	for _, ev := range evs {
		switch ev.Kind {
		case store.KindMessage:
			if ev.Message.Role == "system" {
				seen[ev.Message.TextOf()]++
			}
		case store.KindCompacted:
			compactions++
		}
	}
	// The system field, the agents list, and a reminder every 5 steps.
	if want := 2 + (calls-1)/5; len(seen) != want {
		t.Errorf("%d distinct system messages logged, want %d: %v", len(seen), want, seen)
	}
	for text, n := range seen {
		if n != 1 {
			t.Errorf("system message %q logged %d times", text, n)
		}
	}
	if compactions == 0 {
		t.Error("no compaction")
	}
}

// TestCountTokensCountsTheWindow: count_tokens answers for the window Mneme
// would send (the thread's window plus the request's new message), well
// under what the client's whole history counts, and appends nothing.
func TestCountTokensCountsTheWindow(t *testing.T) {
	r := startAnthropicRig(t, 6000, fakellm.WithHandler(toolLoop))
	a := newAgent(false)
	var thread string
	for i := 0; i < 30; i++ {
		h, out := r.post(t, "/v1/messages", block{"model": "claude-sonnet-4-5", "max_tokens": 256, "system": "You are a coding agent.", "messages": a.hist})
		a.answer(t, out)
		thread = h.Get(proxy.HeaderThread)
	}
	ctx := context.Background()
	before, err := r.st.LastSeq(ctx, "default", thread)
	if err != nil {
		t.Fatal(err)
	}
	count := block{"model": "claude-sonnet-4-5", "system": "You are a coding agent.", "messages": a.hist}
	h, out := r.post(t, "/v1/messages/count_tokens", count)
	var got struct {
		InputTokens int `json:"input_tokens"`
	}
	if err := json.Unmarshal(out, &got); err != nil || got.InputTokens <= 0 {
		t.Fatalf("count_tokens answer %s: %v", out, err)
	}
	if h.Get(proxy.HeaderThread) != thread {
		t.Errorf("count_tokens counted thread %q, want %q", h.Get(proxy.HeaderThread), thread)
	}
	after, _ := r.st.LastSeq(ctx, "default", thread)
	if after != before {
		t.Fatalf("count_tokens moved the log from seq %d to %d", before, after)
	}
	// What went upstream: the last model call's window and the new message.
	recs := r.llm.Requests()
	var counted, lastCall map[string]any
	for _, rec := range recs {
		var v map[string]any
		_ = json.Unmarshal(rec.Body, &v)
		switch {
		case rec.Path == "/v1/messages/count_tokens":
			counted = v
		case rec.Path == "/v1/messages" && !bytes.Contains(rec.Body, []byte(fakellm.MarkerObserver)):
			lastCall = v
		}
	}
	nWin, nCall := len(counted["messages"].([]any)), len(lastCall["messages"].([]any))
	if nWin != nCall+2 { // the reply to the last call, and the new results
		t.Errorf("count_tokens sent %d messages upstream, the last call's window had %d", nWin, nCall)
	}
	// The client's whole history counted directly by the same upstream.
	b, _ := json.Marshal(count)
	resp, err := http.Post(r.llm.URL()+"/v1/messages/count_tokens", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var full struct {
		InputTokens int `json:"input_tokens"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&full)
	if got.InputTokens*2 > full.InputTokens {
		t.Errorf("count_tokens = %d, the whole history %d: not the window", got.InputTokens, full.InputTokens)
	}
	t.Logf("count_tokens: window %d tokens, whole history %d", got.InputTokens, full.InputTokens)

	// A brand-new conversation counts as sent, and creates no thread.
	fresh := block{"model": "claude-sonnet-4-5", "messages": []any{block{"role": "user", "content": "a new task"}}}
	h, _ = r.post(t, "/v1/messages/count_tokens", fresh)
	if seq, _ := r.st.LastSeq(ctx, "default", h.Get(proxy.HeaderThread)); seq != 0 {
		t.Errorf("count_tokens on a new conversation wrote the log up to seq %d", seq)
	}
}
