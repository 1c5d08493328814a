package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/proxy"
)

// TestAutoRecallThroughTheProxy: a fact the session left behind comes back
// when the user asks about it, in the upstream request itself: a
// <mneme:recalled> user message right before the question, holding the
// fact; the messages before it are the previous upstream request's, byte
// for byte; the block stays byte-identical in the requests after it until
// a compaction step. With auto_recall off (X-Mneme-Policy) no request has
// a recalled block.
func TestAutoRecallThroughTheProxy(t *testing.T) {
	const fact = "The deploy key lives in vault path secret/shop/deploy-7731, rotated every Friday."
	const question = "Which vault path holds the deploy key?"
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("auto_recall=%v", on), func(t *testing.T) {
			var mu sync.Mutex
			step := 0
			h := startServer(t, harnessOpts{budget: 6000, llmOpts: []fakellm.Option{fakellm.WithHandler(func(r fakellm.Request) fakellm.Reply {
				mu.Lock()
				i := step
				mu.Unlock()
				if i < 0 {
					return fakellm.Reply{Text: "Done."}
				}
				return fakellm.Reply{Text: fmt.Sprintf("Step %d.", i), ToolCalls: []fakellm.ToolCall{{ID: fmt.Sprintf("call_%d", i), Name: "read_file", Arguments: fmt.Sprintf(`{"arg":"x%d"}`, i)}}}
			})}})
			opts := []option.RequestOption{option.WithHeader(proxy.HeaderThread, "recall")}
			if !on {
				opts = append(opts, option.WithHeader(proxy.HeaderPolicy, `{"auto_recall":false}`))
			}
			client := openAIClient(h, opts...)
			params := openai.ChatCompletionNewParams{
				Model: "gpt-4o-mini",
				Messages: []openai.ChatCompletionMessageParamUnion{
					openai.SystemMessage("You are a coding agent."),
					openai.UserMessage("Fix ticket INV-4401 in src/shop/checkout.go."),
					openai.AssistantMessage("On it."),
					openai.UserMessage("Before we start, a note on the environment.\n" + fact),
					openai.AssistantMessage("Noted."),
					openai.UserMessage("Now fix the checkout rounding."),
				},
				Tools: agentTools(),
			}
			ctx := context.Background()
			var compacted []bool
			call := func(i int) {
				t.Helper()
				mu.Lock()
				step = i
				mu.Unlock()
				var resp *http.Response
				c, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp))
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				compacted = append(compacted, resp.Header.Get(proxy.HeaderCompacted) == "true")
				msg := c.Choices[0].Message
				params.Messages = append(params.Messages, msg.ToParam())
				for _, tc := range msg.ToolCalls {
					params.Messages = append(params.Messages, openai.ToolMessage(toolOutput(tc.Function.Name, i), tc.ID))
				}
			}
			for i := 0; i < 30; i++ {
				call(i)
			}
			call(-1) // "Done.": the turn ends
			asked := len(h.llm.Requests())
			params.Messages = append(params.Messages, openai.UserMessage(question))
			for i := 30; i < 36; i++ {
				call(i)
			}

			reqs := h.llm.Requests()
			msgsOf := func(n int) []json.RawMessage {
				var body struct {
					Messages []json.RawMessage `json:"messages"`
				}
				if err := json.Unmarshal(reqs[n].Body, &body); err != nil {
					t.Fatal(err)
				}
				return body.Messages
			}
			textOf := func(raw json.RawMessage) (role, text string) {
				var m struct {
					Role    string `json:"role"`
					Content any    `json:"content"`
				}
				_ = json.Unmarshal(raw, &m)
				if s, ok := m.Content.(string); ok {
					return m.Role, s
				}
				b, _ := json.Marshal(m.Content)
				return m.Role, string(b)
			}
			for n := 0; n < asked; n++ {
				for _, raw := range msgsOf(n) {
					if _, tx := textOf(raw); strings.Contains(tx, "deploy-7731") && !strings.Contains(tx, "<mneme:") && n >= asked-1 {
						t.Fatalf("request %d: the fact is still live before the question: the test proves nothing", n)
					}
				}
			}
			q := msgsOf(asked)
			k := len(q)
			if role, tx := textOf(q[k-1]); role != "user" || tx != question {
				t.Fatalf("the question is not the last message: %s %q", role, tx)
			}
			role, block := textOf(q[k-2])
			hasBlock := role == "user" && strings.HasPrefix(block, "<mneme:recalled>")
			if !on {
				for n := range reqs {
					for _, raw := range msgsOf(n) {
						if _, tx := textOf(raw); strings.Contains(tx, "<mneme:recalled>") {
							t.Fatalf("request %d has a recalled block with auto_recall off", n)
						}
					}
				}
				return
			}
			if !hasBlock || !strings.Contains(block, "secret/shop/deploy-7731") || !strings.Contains(block, "not instructions") {
				t.Fatalf("no recalled block with the fact right before the question: %s %.300q", role, block)
			}
			// The messages before the block are the previous request's and
			// its reply.
			prev := msgsOf(asked - 1)
			if len(prev) != k-3 {
				t.Fatalf("the question's request has %d messages before the block, the previous had %d and its reply", k-2, len(prev))
			}
			if role, tx := textOf(q[k-3]); role != "assistant" || tx != "Done." {
				t.Fatalf("the message before the block is %s %q, not the reply", role, tx)
			}
			for i := range prev {
				if !bytes.Equal(prev[i], q[i]) {
					t.Fatalf("message %d changed between the request before the question and the question's", i)
				}
			}
			// The block stays as it is until a compaction step.
			same := 0
			for n := asked + 1; n < len(reqs) && !compacted[n]; n++ {
				if !bytes.Equal(msgsOf(n)[k-2], q[k-2]) {
					t.Fatalf("request %d: the recalled block changed without a compaction step", n)
				}
				same++
			}
			if same == 0 {
				t.Fatal("a compaction right after the question: nothing shows the block staying")
			}
			t.Logf("the block stayed byte-identical over the %d requests after the question", same)
		})
	}
}
