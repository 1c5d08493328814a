package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/message"
)

// TestCurrentRequestLiveInEveryUpstreamRequest (issue 15, item 5): a
// 200-step tool loop after one user message, through `mneme serve` in
// front of the strict fake model, with a 6,000-token budget that the loop
// outgrows many times over. The user's current request must reach the
// model as a user message of its own, verbatim, in every upstream request,
// never only quoted inside the memory block (which the model is told is
// data, not instructions).
func TestCurrentRequestLiveInEveryUpstreamRequest(t *testing.T) {
	const steps = 200
	const request = "Now rename OrderTotal to GrandTotal in src/shop and keep INV-7731 passing."
	var mu sync.Mutex
	step := 0
	h := startServer(t, harnessOpts{budget: 6000, llmOpts: []fakellm.Option{fakellm.WithHandler(func(r fakellm.Request) fakellm.Reply {
		mu.Lock()
		i := step
		mu.Unlock()
		if i == steps {
			return fakellm.Reply{Text: "Renamed everywhere; INV-7731 passes."}
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
			openai.AssistantMessage("Fixed: the rounding in total() was off by one cent."),
			openai.UserMessage("Thanks. What else calls total()?"),
			openai.AssistantMessage("checkout.go and invoice.go call it."),
			openai.UserMessage(request),
		},
		Tools: agentTools(),
	}
	ctx := context.Background()
	for i := 0; i <= steps; i++ {
		mu.Lock()
		step = i
		mu.Unlock()
		c, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		msg := c.Choices[0].Message
		params.Messages = append(params.Messages, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			params.Messages = append(params.Messages, openai.ToolMessage(toolOutput(tc.Function.Name, i), tc.ID))
		}
		if i < steps && len(msg.ToolCalls) == 0 {
			t.Fatalf("call %d ended the loop early", i)
		}
	}

	reqs := h.llm.Requests()
	if len(reqs) != steps+1 {
		t.Fatalf("the fake model received %d requests, want %d", len(reqs), steps+1)
	}
	live, quotedOnly, withMemory := 0, 0, 0
	for n, r := range reqs {
		var body struct {
			Messages json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		msgs, err := message.DecodeOpenAIMessages(body.Messages)
		if err != nil {
			t.Fatalf("request %d: %v", n, err)
		}
		found, inMemory := false, false
		for _, m := range msgs {
			text := m.PlainText()
			if strings.HasPrefix(text, "<mneme:memory>") {
				withMemory++
				inMemory = inMemory || strings.Contains(text, "OrderTotal to GrandTotal")
				continue
			}
			if m.Role == message.User && text == request {
				found = true
			}
		}
		switch {
		case found:
			live++
		case inMemory:
			quotedOnly++
			t.Errorf("request %d: the current request is only quoted inside <mneme:memory>", n)
		default:
			t.Errorf("request %d: the current request is not in the window", n)
		}
		if err := orphans(msgs); err != nil {
			t.Errorf("request %d: %v", n, err)
		}
	}
	if withMemory < steps/2 {
		t.Fatalf("only %d of %d requests had a memory block: the loop did not outgrow the budget, the test proves nothing", withMemory, len(reqs))
	}
	t.Logf("%d upstream requests: the current request live in %d, only quoted in %d; %d carried a memory block", len(reqs), live, quotedOnly, withMemory)
}
