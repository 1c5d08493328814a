package server_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/proxy"
)

// The official SDKs as real clients of `mneme serve` (loopback, fakellm
// upstream): what they get must parse, and the log must hold the
// conversation once, whatever the SDK resends.

func openAIClient(h *harness, opts ...option.RequestOption) openai.Client {
	base := []option.RequestOption{option.WithBaseURL(h.url + "/v1/"), option.WithAPIKey("sk-client"), option.WithMaxRetries(0)}
	return openai.NewClient(append(base, opts...)...)
}

func anthropicClient(h *harness, opts ...aoption.RequestOption) anthropic.Client {
	base := []aoption.RequestOption{aoption.WithBaseURL(h.url), aoption.WithAPIKey("sk-ant-client"), aoption.WithMaxRetries(0)}
	return anthropic.NewClient(append(base, opts...)...)
}

func weatherTool() openai.ChatCompletionToolUnionParam {
	return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather",
		Parameters: shared.FunctionParameters{
			"type":       "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}},
		},
	})
}

func anthropicWeatherTool() anthropic.ToolUnionParam {
	return anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
		Name:        "get_weather",
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}},
	}}
}

func TestOpenAISDK(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "non-streaming", true: "streaming"}[stream]
		t.Run(name, func(t *testing.T) {
			h := startServer(t, harnessOpts{})
			client := openAIClient(h)
			ctx := context.Background()
			h.llm.Enqueue(
				fakellm.Reply{Text: "Let me look.", ToolCalls: []fakellm.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
				fakellm.Reply{Text: "Sunny in Paris."},
				fakellm.Reply{Text: "You are welcome."},
			)
			params := openai.ChatCompletionNewParams{
				Model:    "gpt-4o-mini",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse."), openai.UserMessage("Weather in Paris?")},
				Tools:    []openai.ChatCompletionToolUnionParam{weatherTool()},
			}
			var thread string
			call := func() openai.ChatCompletionMessage {
				t.Helper()
				var resp *http.Response
				if !stream {
					c, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp))
					if err != nil {
						t.Fatal(err)
					}
					thread = resp.Header.Get(proxy.HeaderThread)
					return c.Choices[0].Message
				}
				s := client.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&resp))
				var acc openai.ChatCompletionAccumulator
				for s.Next() {
					if !acc.AddChunk(s.Current()) {
						t.Fatalf("the accumulator refused chunk %+v", s.Current())
					}
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				thread = resp.Header.Get(proxy.HeaderThread)
				if resp.Header.Get(proxy.HeaderWindow) == "" {
					t.Error("no window header on a stream")
				}
				return acc.Choices[0].Message
			}
			first := call()
			if len(first.ToolCalls) != 1 || first.ToolCalls[0].Function.Name != "get_weather" || first.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` {
				t.Fatalf("first answer: %+v", first)
			}
			params.Messages = append(params.Messages, first.ToParam(), openai.ToolMessage("sunny, 21C", first.ToolCalls[0].ID))
			second := call()
			if second.Content != "Sunny in Paris." {
				t.Fatalf("second answer %q", second.Content)
			}
			params.Messages = append(params.Messages, second.ToParam(), openai.UserMessage("Thanks!"))
			if third := call(); third.Content != "You are welcome." {
				t.Fatalf("third answer %q", third.Content)
			}
			equalLines(t, "log", summary(h.messages(t, "default", thread)), []string{
				"system:You are terse.",
				"user:Weather in Paris?",
				`assistant:Let me look.[call get_weather {"city":"Paris"}]`,
				"tool:[result sunny, 21C]",
				"assistant:Sunny in Paris.",
				"user:Thanks!",
				"assistant:You are welcome.",
			})
			if ids := h.threads(t, "default"); len(ids) != 1 {
				t.Errorf("threads %v, want one", ids)
			}
			// The client's key went upstream: the server has none of its own.
			for _, r := range h.llm.Requests() {
				if got := r.Header.Get("Authorization"); got != "Bearer sk-client" {
					t.Errorf("upstream Authorization %q", got)
				}
			}
		})
	}
}

func TestAnthropicSDK(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "non-streaming", true: "streaming"}[stream]
		t.Run(name, func(t *testing.T) {
			h := startServer(t, harnessOpts{})
			client := anthropicClient(h)
			ctx := context.Background()
			h.llm.Enqueue(
				fakellm.Reply{Text: "Let me look.", ToolCalls: []fakellm.ToolCall{{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
				fakellm.Reply{Text: "Sunny in Paris."},
				fakellm.Reply{Text: "You are welcome."},
			)
			params := anthropic.MessageNewParams{
				Model:     "claude-sonnet-4-5",
				MaxTokens: 1024,
				System:    []anthropic.TextBlockParam{{Text: "You are terse."}},
				Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))},
				Tools:     []anthropic.ToolUnionParam{anthropicWeatherTool()},
			}
			var thread string
			call := func() anthropic.Message {
				t.Helper()
				var resp *http.Response
				if !stream {
					m, err := client.Messages.New(ctx, params, aoption.WithResponseInto(&resp))
					if err != nil {
						t.Fatal(err)
					}
					thread = resp.Header.Get(proxy.HeaderThread)
					return *m
				}
				s := client.Messages.NewStreaming(ctx, params, aoption.WithResponseInto(&resp))
				var acc anthropic.Message
				for s.Next() {
					if err := acc.Accumulate(s.Current()); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				thread = resp.Header.Get(proxy.HeaderThread)
				return acc
			}
			first := call()
			if len(first.Content) != 2 || first.Content[1].Name != "get_weather" || string(first.Content[1].Input) != `{"city":"Paris"}` {
				t.Fatalf("first answer: %+v", first.Content)
			}
			params.Messages = append(params.Messages, first.ToParam(),
				anthropic.NewUserMessage(anthropic.NewToolResultBlock(first.Content[1].ID, "sunny, 21C", false)))
			second := call()
			if second.Content[0].Text != "Sunny in Paris." {
				t.Fatalf("second answer %+v", second.Content)
			}
			params.Messages = append(params.Messages, second.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("Thanks!")))
			if third := call(); third.Content[0].Text != "You are welcome." {
				t.Fatalf("third answer %+v", third.Content)
			}
			equalLines(t, "log", summary(h.messages(t, "default", thread)), []string{
				"system:You are terse.",
				"user:Weather in Paris?",
				`assistant:Let me look.[call get_weather {"city":"Paris"}]`,
				"user:[result sunny, 21C]",
				"assistant:Sunny in Paris.",
				"user:Thanks!",
				"assistant:You are welcome.",
			})
			if ids := h.threads(t, "default"); len(ids) != 1 {
				t.Errorf("threads %v, want one", ids)
			}
			for _, r := range h.llm.Requests() {
				// This SDK version sends its key as a bearer token.
				if got := r.Header.Get("X-Api-Key") + r.Header.Get("Authorization"); got != "Bearer sk-ant-client" && got != "sk-ant-client" {
					t.Errorf("upstream key %q", got)
				}
			}
		})
	}
}
