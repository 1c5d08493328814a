package fakellm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mnemehq/mneme/internal/fakellm"
)

// newAnthropic returns an official SDK client pointed at s, without retries.
func newAnthropic(s *fakellm.Server, opts ...aoption.RequestOption) *anthropic.Client {
	base := []aoption.RequestOption{
		aoption.WithBaseURL(s.URL()),
		aoption.WithAPIKey("sk-ant-test"),
		aoption.WithMaxRetries(0),
	}
	c := anthropic.NewClient(append(base, opts...)...)
	return &c
}

func messageParams(user string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 1024,
		System:    []anthropic.TextBlockParam{{Text: "You are terse."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(user))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
			Name:        "get_weather",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}},
		}}},
	}
}

func TestAnthropicMessages(t *testing.T) {
	tests := []struct {
		name      string
		script    *fakellm.Reply
		user      string
		maxTokens int64
		wantText  string
		wantStop  anthropic.StopReason
		wantCalls []wantCall
	}{
		{name: "default answer", user: "hello there", wantText: "ok: hello there", wantStop: "end_turn"},
		{name: "scripted text", script: &fakellm.Reply{Text: "Paris, ünïcödé ✓ and more text to split"}, user: "capital?", wantText: "Paris, ünïcödé ✓ and more text to split", wantStop: "end_turn"},
		{name: "stop reason override maps across APIs", script: &fakellm.Reply{Text: "cut", StopReason: "length"}, user: "x", wantText: "cut", wantStop: "max_tokens"},
		{name: "max_tokens truncates", script: &fakellm.Reply{Text: strings.Repeat("abcd", 50)}, user: "x", maxTokens: 3, wantText: strings.Repeat("abcd", 3), wantStop: "max_tokens"},
		{
			name:      "tool use with generated and given ids",
			script:    &fakellm.Reply{ToolCalls: []fakellm.ToolCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`}, {ID: "toolu_given", Name: "get_weather"}}},
			user:      "weather?",
			wantStop:  "tool_use",
			wantCalls: []wantCall{{Name: "get_weather", Args: `{"city":"Paris"}`}, {ID: "toolu_given", Name: "get_weather", Args: "{}"}},
		},
		{
			name:      "text then tool use",
			script:    &fakellm.Reply{Text: "Let me check.", ToolCalls: []fakellm.ToolCall{{Name: "get_weather", Arguments: `{"city":"Oslo","days":[1,2,3]}`}}},
			user:      "weather?",
			wantText:  "Let me check.",
			wantStop:  "tool_use",
			wantCalls: []wantCall{{Name: "get_weather", Args: `{"city":"Oslo","days":[1,2,3]}`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakellm.Start()
			defer s.Close()
			client := newAnthropic(s)
			params := messageParams(tt.user)
			if tt.maxTokens > 0 {
				params.MaxTokens = tt.maxTokens
			}
			if tt.script != nil {
				s.Enqueue(*tt.script)
			}
			msg, err := client.Messages.New(context.Background(), params)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			checkAnthropicMessage(t, msg, tt.wantText, tt.wantStop, tt.wantCalls)
			if !strings.HasPrefix(msg.ID, "msg_") || msg.Type != "message" || msg.Role != "assistant" || msg.Model != "claude-sonnet-4-5" {
				t.Errorf("id/type/role/model = %q/%q/%q/%q", msg.ID, msg.Type, msg.Role, msg.Model)
			}

			if tt.script != nil {
				s.Enqueue(*tt.script)
			}
			stream := client.Messages.NewStreaming(context.Background(), params)
			var acc anthropic.Message
			events := map[string]int{}
			for stream.Next() {
				ev := stream.Current()
				events[ev.Type]++
				if err := acc.Accumulate(ev); err != nil {
					t.Fatalf("accumulate %s: %v", ev.Type, err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			blocks := len(tt.wantCalls)
			if tt.wantText != "" {
				blocks++
			}
			if events["message_start"] != 1 || events["message_delta"] != 1 || events["message_stop"] != 1 ||
				events["content_block_start"] != blocks || events["content_block_stop"] != blocks || events["content_block_delta"] < blocks {
				t.Errorf("event counts = %v", events)
			}
			checkAnthropicMessage(t, &acc, tt.wantText, tt.wantStop, tt.wantCalls)
		})
	}
}

func checkAnthropicMessage(t *testing.T, msg *anthropic.Message, text string, stop anthropic.StopReason, calls []wantCall) {
	t.Helper()
	var gotText []string
	var gotCalls []anthropic.ContentBlockUnion
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			gotText = append(gotText, b.Text)
		case "tool_use":
			gotCalls = append(gotCalls, b)
		default:
			t.Errorf("unexpected block type %q", b.Type)
		}
	}
	if strings.Join(gotText, "") != text {
		t.Errorf("text = %q, want %q", strings.Join(gotText, ""), text)
	}
	if msg.StopReason != stop {
		t.Errorf("stop_reason = %q, want %q", msg.StopReason, stop)
	}
	if len(gotCalls) != len(calls) {
		t.Fatalf("got %d tool_use blocks, want %d", len(gotCalls), len(calls))
	}
	for i, w := range calls {
		g := gotCalls[i]
		if w.ID != "" && g.ID != w.ID || w.ID == "" && !strings.HasPrefix(g.ID, "toolu_") {
			t.Errorf("tool_use %d id = %q, want %q (or a generated toolu_ id)", i, g.ID, w.ID)
		}
		if g.Name != w.Name || string(g.Input) != w.Args {
			t.Errorf("tool_use %d = %s(%s), want %s(%s)", i, g.Name, g.Input, w.Name, w.Args)
		}
	}
	if msg.Usage.InputTokens <= 0 || msg.Usage.OutputTokens <= 0 {
		t.Errorf("usage = %+v", msg.Usage)
	}
}

// A tool_use answered by a tool_result is accepted; the conversation goes on.
func TestAnthropicToolRoundTrip(t *testing.T) {
	s := fakellm.Start()
	defer s.Close()
	client := newAnthropic(s)
	s.Enqueue(fakellm.Reply{ToolCalls: []fakellm.ToolCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}})
	params := messageParams("weather in Paris?")
	first, err := client.Messages.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	params.Messages = append(params.Messages, first.ToParam(),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock(first.Content[0].ID, "sunny, 21C", false)))
	second, err := client.Messages.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	// The last user message holds only a tool result, so the default answer
	// quotes the last user text that has text.
	if second.Content[0].Text != "ok: weather in Paris?" {
		t.Errorf("second answer = %q", second.Content[0].Text)
	}
}

func TestAnthropicErrorStatus(t *testing.T) {
	tests := []struct {
		name       string
		reply      *fakellm.Reply
		maxTokens  int64
		wantStatus int
		wantType   string
	}{
		{name: "overloaded", reply: &fakellm.Reply{Status: 529}, wantStatus: 529, wantType: "overloaded_error"},
		{name: "rate limited", reply: &fakellm.Reply{Status: 429}, wantStatus: 429, wantType: "rate_limit_error"},
		{name: "server error", reply: &fakellm.Reply{Status: 500}, wantStatus: 500, wantType: "api_error"},
		{name: "validation: max_tokens 0", maxTokens: -1, wantStatus: 400, wantType: "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakellm.Start()
			defer s.Close()
			if tt.reply != nil {
				s.Enqueue(*tt.reply)
			}
			params := messageParams("hi")
			if tt.maxTokens < 0 {
				params.MaxTokens = 0
			}
			_, err := newAnthropic(s).Messages.New(context.Background(), params)
			var apiErr *anthropic.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v (%T), want *anthropic.Error", err, err)
			}
			if apiErr.StatusCode != tt.wantStatus {
				t.Errorf("status = %d, want %d", apiErr.StatusCode, tt.wantStatus)
			}
			if got := string(apiErr.Type()); got != tt.wantType {
				t.Errorf("error type = %q, want %q (raw %s)", got, tt.wantType, apiErr.RawJSON())
			}
		})
	}
}

func TestAnthropicCountTokensAndModels(t *testing.T) {
	s := fakellm.Start(fakellm.WithModels("claude-a", "claude-b"))
	defer s.Close()
	client := newAnthropic(s)
	short, err := client.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{
		Model:    "claude-sonnet-4-5",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	long, err := client.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{
		Model:    "claude-sonnet-4-5",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(strings.Repeat("many words here ", 100)))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if short.InputTokens <= 0 || long.InputTokens < short.InputTokens+300 {
		t.Errorf("count_tokens short=%d long=%d", short.InputTokens, long.InputTokens)
	}
	if n := s.Pending(); n != 0 {
		t.Errorf("pending = %d", n)
	}

	page, err := client.Models.List(context.Background(), anthropic.ModelListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "claude-a,claude-b" {
		t.Errorf("models = %v", ids)
	}
}
