package fakellm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/mnemehq/mneme/internal/fakellm"
)

// newOpenAI returns an official SDK client pointed at s, without retries.
func newOpenAI(s *fakellm.Server, opts ...option.RequestOption) *openai.Client {
	base := []option.RequestOption{
		option.WithBaseURL(s.URL() + "/v1/"),
		option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0),
	}
	c := openai.NewClient(append(base, opts...)...)
	return &c
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

func chatParams(user string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are terse."),
			openai.UserMessage(user),
		},
		Tools: []openai.ChatCompletionToolUnionParam{weatherTool()},
	}
}

// wantCall is a tool call a test expects; an empty ID asks for a generated
// one with the API's prefix.
type wantCall struct{ ID, Name, Args string }

func TestOpenAIChatCompletion(t *testing.T) {
	long := strings.Repeat("word ", 40)
	tests := []struct {
		name       string
		script     *fakellm.Reply
		user       string
		maxTokens  int64
		wantText   string
		wantFinish string
		wantCalls  []wantCall
	}{
		{name: "default answer", user: "hello   there\nfriend", wantText: "ok: hello there friend", wantFinish: "stop"},
		{name: "default answer cut to 60 chars", user: strings.Repeat("abcdefghij", 10), wantText: "ok: " + strings.Repeat("abcdefghij", 6), wantFinish: "stop"},
		{name: "scripted text", script: &fakellm.Reply{Text: "Paris."}, user: "capital?", wantText: "Paris.", wantFinish: "stop"},
		{name: "stop reason override maps across APIs", script: &fakellm.Reply{Text: "cut", StopReason: "max_tokens"}, user: "x", wantText: "cut", wantFinish: "length"},
		{name: "max_tokens truncates", script: &fakellm.Reply{Text: long}, user: "x", maxTokens: 5, wantText: long[:20], wantFinish: "length"},
		{
			name:       "tool calls with generated and given ids",
			script:     &fakellm.Reply{ToolCalls: []fakellm.ToolCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`}, {ID: "call_given", Name: "get_weather"}}},
			user:       "weather?",
			wantFinish: "tool_calls",
			wantCalls:  []wantCall{{Name: "get_weather", Args: `{"city":"Paris"}`}, {ID: "call_given", Name: "get_weather", Args: "{}"}},
		},
		{
			name:       "text and a tool call",
			script:     &fakellm.Reply{Text: "Let me check.", ToolCalls: []fakellm.ToolCall{{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}},
			user:       "weather?",
			wantText:   "Let me check.",
			wantFinish: "tool_calls",
			wantCalls:  []wantCall{{Name: "get_weather", Args: `{"city":"Oslo"}`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakellm.Start()
			defer s.Close()
			if tt.script != nil {
				s.Enqueue(*tt.script)
			}
			params := chatParams(tt.user)
			if tt.maxTokens > 0 {
				params.MaxCompletionTokens = openai.Int(tt.maxTokens)
			}
			client := newOpenAI(s)

			res, err := client.Chat.Completions.New(context.Background(), params)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			checkOpenAICompletion(t, res, tt.wantText, tt.wantFinish, tt.wantCalls)
			if !strings.HasPrefix(res.ID, "chatcmpl-") || res.Object != "chat.completion" || res.Model != "gpt-4o-mini" {
				t.Errorf("id/object/model = %q/%q/%q", res.ID, res.Object, res.Model)
			}

			// The same script, streamed and accumulated, must give the same message.
			if tt.script != nil {
				s.Enqueue(*tt.script)
			}
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			stream := client.Chat.Completions.NewStreaming(context.Background(), params)
			var acc openai.ChatCompletionAccumulator
			chunks := 0
			for stream.Next() {
				if !acc.AddChunk(stream.Current()) {
					t.Fatalf("accumulator rejected chunk %d", chunks)
				}
				chunks++
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			if chunks < 3 {
				t.Errorf("got %d chunks, want a role chunk, deltas and a finish chunk", chunks)
			}
			checkOpenAICompletion(t, &acc.ChatCompletion, tt.wantText, tt.wantFinish, tt.wantCalls)
		})
	}
}

func checkOpenAICompletion(t *testing.T, res *openai.ChatCompletion, text, finish string, calls []wantCall) {
	t.Helper()
	if len(res.Choices) != 1 {
		t.Fatalf("got %d choices", len(res.Choices))
	}
	c := res.Choices[0]
	if c.Message.Content != text {
		t.Errorf("content = %q, want %q", c.Message.Content, text)
	}
	if c.FinishReason != finish {
		t.Errorf("finish_reason = %q, want %q", c.FinishReason, finish)
	}
	if len(c.Message.ToolCalls) != len(calls) {
		t.Fatalf("got %d tool calls, want %d", len(c.Message.ToolCalls), len(calls))
	}
	for i, w := range calls {
		g := c.Message.ToolCalls[i]
		if w.ID != "" && g.ID != w.ID || w.ID == "" && !strings.HasPrefix(g.ID, "call_") {
			t.Errorf("call %d id = %q, want %q (or a generated call_ id)", i, g.ID, w.ID)
		}
		if g.Type != "function" || g.Function.Name != w.Name || g.Function.Arguments != w.Args {
			t.Errorf("call %d = %s %s(%s), want function %s(%s)", i, g.Type, g.Function.Name, g.Function.Arguments, w.Name, w.Args)
		}
	}
	u := res.Usage
	if u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage = %+v", u)
	}
}

func TestOpenAIUsageOverride(t *testing.T) {
	s := fakellm.Start()
	defer s.Close()
	s.Enqueue(fakellm.Reply{Text: "x", Usage: &fakellm.Usage{InputTokens: 1234, OutputTokens: 56}})
	res, err := newOpenAI(s).Chat.Completions.New(context.Background(), chatParams("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.PromptTokens != 1234 || res.Usage.CompletionTokens != 56 || res.Usage.TotalTokens != 1290 {
		t.Errorf("usage = %+v", res.Usage)
	}
}

func TestOpenAIErrorStatus(t *testing.T) {
	tests := []struct {
		name     string
		reply    fakellm.Reply
		wantType string
		wantCode string
		wantMsg  string
	}{
		{name: "rate limited", reply: fakellm.Reply{Status: 429}, wantType: "requests", wantCode: "rate_limit_exceeded"},
		{name: "server error", reply: fakellm.Reply{Status: 500}, wantType: "server_error"},
		{name: "custom body", reply: fakellm.Reply{Status: 400, Body: `{"error":{"message":"context too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`},
			wantType: "invalid_request_error", wantCode: "context_length_exceeded", wantMsg: "context too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakellm.Start()
			defer s.Close()
			s.Enqueue(tt.reply)
			_, err := newOpenAI(s).Chat.Completions.New(context.Background(), chatParams("hi"))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v (%T), want *openai.Error", err, err)
			}
			if apiErr.StatusCode != tt.reply.Status || apiErr.Type != tt.wantType || apiErr.Code != tt.wantCode {
				t.Errorf("status/type/code = %d/%q/%q, want %d/%q/%q", apiErr.StatusCode, apiErr.Type, apiErr.Code, tt.reply.Status, tt.wantType, tt.wantCode)
			}
			if tt.wantMsg != "" && apiErr.Message != tt.wantMsg {
				t.Errorf("message = %q, want %q", apiErr.Message, tt.wantMsg)
			}
		})
	}
}

// The SDK's own retry honours Retry-After-Ms and then gets the next reply.
func TestOpenAIRetryAfter(t *testing.T) {
	s := fakellm.Start()
	defer s.Close()
	s.Enqueue(fakellm.Reply{Status: 429, RetryAfter: 20 * time.Millisecond}, fakellm.Reply{Text: "second try"})
	res, err := newOpenAI(s, option.WithMaxRetries(2)).Chat.Completions.New(context.Background(), chatParams("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content != "second try" {
		t.Errorf("content = %q", res.Choices[0].Message.Content)
	}
	if n := len(s.Requests()); n != 2 {
		t.Errorf("server saw %d requests, want 2", n)
	}
}

func TestOpenAIModelsAndEmbeddings(t *testing.T) {
	s := fakellm.Start(fakellm.WithModels("m-one", "m-two"))
	defer s.Close()
	client := newOpenAI(s)
	page, err := client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "m-one,m-two" {
		t.Errorf("models = %v", ids)
	}

	embed := func(dims int64, inputs ...string) [][]float64 {
		t.Helper()
		p := openai.EmbeddingNewParams{
			Model: "text-embedding-3-small",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: inputs},
		}
		if dims > 0 {
			p.Dimensions = openai.Int(dims)
		}
		res, err := client.Embeddings.New(context.Background(), p)
		if err != nil {
			t.Fatalf("embeddings: %v", err)
		}
		var out [][]float64
		for _, d := range res.Data {
			out = append(out, d.Embedding)
		}
		return out
	}
	a := embed(0, "the cache key for user_42", "the cache key for user_42", "unrelated banana smoothie")
	if len(a) != 3 || len(a[0]) != fakellm.DefaultDimensions {
		t.Fatalf("got %d vectors of %d dims", len(a), len(a[0]))
	}
	if cos(a[0], a[1]) < 0.9999 {
		t.Errorf("same text, cosine %v", cos(a[0], a[1]))
	}
	if n := cos(a[0], a[0]); n < 0.999 || n > 1.001 {
		t.Errorf("norm² = %v, want 1", n)
	}
	if cos(a[0], a[2]) > 0.9 {
		t.Errorf("different texts, cosine %v", cos(a[0], a[2]))
	}
	b := embed(32, "the cache key for user_42")
	want := fakellm.Embed("the cache key for user_42", 32)
	if len(b[0]) != 32 {
		t.Fatalf("dims = %d, want 32", len(b[0]))
	}
	for i := range want {
		if float32(b[0][i]) != want[i] {
			t.Fatalf("vector differs from Embed at %d: %v vs %v", i, b[0][i], want[i])
		}
	}
}

func cos(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
