package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/token"
)

// agentTools are the client's tools in the long session.
func agentTools() []openai.ChatCompletionToolUnionParam {
	var out []openai.ChatCompletionToolUnionParam
	for _, name := range []string{"read_file", "grep", "run_tests"} {
		out = append(out, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:       name,
			Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"arg": map[string]any{"type": "string"}}},
		}))
	}
	return out
}

// toolOutput is what the session's tools return at step i: file reads of
// a few kilobytes, greps and test runs.
func toolOutput(name string, i int) string {
	var b strings.Builder
	switch name {
	case "read_file":
		for l := 0; l < 40+i%40; l++ {
			fmt.Fprintf(&b, "func handler%d_%d(w http.ResponseWriter, r *http.Request) { serve(w, r, %d) }\n", i, l, l)
		}
	case "grep":
		for l := 0; l < 12; l++ {
			fmt.Fprintf(&b, "src/shop/checkout_%d.go:%d: order.Checkout%d(ctx, cart)\n", l, l*7, i)
		}
	default:
		fmt.Fprintf(&b, "--- FAIL: TestCheckout (0.%02ds)\n    checkout_test.go:%d: total = %d, want 4401\n", i%100, 40+i, 4400+i%3)
	}
	return b.String()
}

// TestLongSessionResendingHistory runs a 200-call tool-heavy session
// through the proxy with the official SDK, resending the whole history on
// every call and streaming every other one, with a 16k budget. Every
// upstream request must fit the budget and pair its tool calls, and the
// log must hold every message the client has, once, in order.
func TestLongSessionResendingHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("long session: skipped with -short")
	}
	const calls = 200
	const budget = 16000
	var mu sync.Mutex
	step := 0
	h := startServer(t, harnessOpts{budget: budget, llmOpts: []fakellm.Option{fakellm.WithHandler(func(r fakellm.Request) fakellm.Reply {
		mu.Lock()
		i := step
		mu.Unlock()
		if i%4 == 3 { // every fourth call ends the turn with text
			return fakellm.Reply{Text: fmt.Sprintf("Turn done at step %d; the rounding in total() is next.", i)}
		}
		tool := []string{"read_file", "grep", "run_tests"}[i%3]
		return fakellm.Reply{Text: fmt.Sprintf("Step %d.", i), ToolCalls: []fakellm.ToolCall{{ID: fmt.Sprintf("call_%d", i), Name: tool, Arguments: fmt.Sprintf(`{"arg":"x%d"}`, i)}}}
	})}})
	client := openAIClient(h)
	params := openai.ChatCompletionNewParams{
		Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are a coding agent."),
			openai.UserMessage("Fix ticket INV-4401 in src/shop/checkout.go."),
		},
		Tools: agentTools(),
	}
	ctx := context.Background()
	compactions, thread := 0, ""
	for i := 0; i < calls; i++ {
		mu.Lock()
		step = i
		mu.Unlock()
		var resp *http.Response
		var msg openai.ChatCompletionMessage
		if i%2 == 1 {
			s := client.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&resp))
			var acc openai.ChatCompletionAccumulator
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			msg = acc.Choices[0].Message
		} else {
			c, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp))
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			msg = c.Choices[0].Message
		}
		if resp.Header.Get(proxy.HeaderCompacted) == "true" {
			compactions++
		}
		if id := resp.Header.Get(proxy.HeaderThread); thread == "" {
			thread = id
		} else if id != thread {
			t.Fatalf("call %d went to thread %q, not %q", i, id, thread)
		}
		params.Messages = append(params.Messages, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			params.Messages = append(params.Messages, openai.ToolMessage(toolOutput(tc.Function.Name, i), tc.ID))
		}
		if len(msg.ToolCalls) == 0 {
			params.Messages = append(params.Messages, openai.UserMessage(fmt.Sprintf("Good. Now look at step %d's callers.", i)))
		}
	}
	if compactions < 3 {
		t.Errorf("%d compactions in %d calls with a %d budget: the test does not exercise compaction", compactions, calls, budget)
	}

	// Every upstream request fits the budget and pairs its tool calls.
	counter, err := token.Get("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	usable := budget - testPolicy(budget).ReserveOutputTokens
	reqs := h.llm.Requests()
	if len(reqs) != calls {
		t.Fatalf("%d upstream requests, want %d", len(reqs), calls)
	}
	maxUsed := 0
	for n, r := range reqs {
		var body struct {
			Messages json.RawMessage   `json:"messages"`
			Tools    []json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		msgs, err := message.DecodeOpenAIMessages(body.Messages)
		if err != nil {
			t.Fatalf("request %d: %v", n, err)
		}
		used := token.ToolsTokens(counter, body.Tools) + token.ReplyPrimer()
		for _, m := range msgs {
			used += token.MessageTokens(counter, m)
		}
		maxUsed = max(maxUsed, used)
		if used > usable {
			t.Errorf("request %d: %d tokens, over the usable budget %d", n, used, usable)
		}
		if err := orphans(msgs); err != nil {
			t.Errorf("request %d: %v", n, err)
		}
	}
	t.Logf("%d calls, %d compactions, largest upstream request %d of %d usable tokens", calls, compactions, maxUsed, usable)

	// The log holds the client's history, each message once, in order, and
	// the last reply.
	var want []string
	for _, p := range params.Messages {
		b, _ := json.Marshal(p)
		m, err := message.DecodeOpenAI(b)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, summary([]message.Message{m})...)
	}
	got := summary(h.messages(t, "default", thread))
	// The client's last message (a tool result or a user text) is not sent yet.
	want = want[:len(want)-1]
	equalLines(t, "log vs client history", got, want)
	if ids := h.threads(t, "default"); len(ids) != 1 {
		t.Errorf("threads %v, want one", ids)
	}
}

// orphans reports a tool call without its result or a result without its
// call, in OpenAI's order: the results follow their assistant message.
func orphans(msgs []message.Message) error {
	open := map[string]bool{}
	for i, m := range msgs {
		if m.Role == message.Tool {
			for _, r := range m.ToolResults() {
				if !open[r.ToolCallID] {
					return fmt.Errorf("message %d: result for %s without its call", i, r.ToolCallID)
				}
				delete(open, r.ToolCallID)
			}
			continue
		}
		if len(open) > 0 {
			return fmt.Errorf("message %d: calls %v without results", i, keys(open))
		}
		for _, c := range m.ToolCalls() {
			open[c.ToolCallID] = true
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("calls %v without results at the end", keys(open))
	}
	return nil
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
