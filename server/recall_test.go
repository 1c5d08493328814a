package server_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/proxy"
)

// sdkChat drives one conversation through an official SDK, streaming or
// not, keeping the history as the SDK user would (ToParam of each reply).
type sdkChat interface {
	// ask sends the history plus a user text (or the results of the last
	// reply's tool calls when text is "") and returns the reply's text and
	// the names of the tools it calls.
	ask(t *testing.T, text string, results ...string) (string, []string)
	thread() string
}

type openAIChat struct {
	c      openai.Client
	p      openai.ChatCompletionNewParams
	stream bool
	last   openai.ChatCompletionMessage
	id     string
}

func (o *openAIChat) thread() string { return o.id }

func (o *openAIChat) ask(t *testing.T, text string, results ...string) (string, []string) {
	t.Helper()
	if text != "" {
		o.p.Messages = append(o.p.Messages, openai.UserMessage(text))
	}
	for i, r := range results {
		o.p.Messages = append(o.p.Messages, openai.ToolMessage(r, o.last.ToolCalls[i].ID))
	}
	var resp *http.Response
	ctx := context.Background()
	if o.stream {
		s := o.c.Chat.Completions.NewStreaming(ctx, o.p, option.WithResponseInto(&resp))
		var acc openai.ChatCompletionAccumulator
		for s.Next() {
			if !acc.AddChunk(s.Current()) {
				t.Fatalf("accumulator refused %s", s.Current().RawJSON())
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		o.last = acc.Choices[0].Message
		if fr := acc.Choices[0].FinishReason; (len(o.last.ToolCalls) > 0) != (fr == "tool_calls") {
			t.Errorf("finish reason %q with %d tool calls", fr, len(o.last.ToolCalls))
		}
	} else {
		c, err := o.c.Chat.Completions.New(ctx, o.p, option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		o.last = c.Choices[0].Message
		if fr := c.Choices[0].FinishReason; (len(o.last.ToolCalls) > 0) != (fr == "tool_calls") {
			t.Errorf("finish reason %q with %d tool calls", fr, len(o.last.ToolCalls))
		}
	}
	o.id = resp.Header.Get(proxy.HeaderThread)
	o.p.Messages = append(o.p.Messages, o.last.ToParam())
	var names []string
	for _, c := range o.last.ToolCalls {
		names = append(names, c.Function.Name)
	}
	return o.last.Content, names
}

type anthropicChat struct {
	c      anthropic.Client
	p      anthropic.MessageNewParams
	stream bool
	last   anthropic.Message
	id     string
}

func (a *anthropicChat) thread() string { return a.id }

func (a *anthropicChat) ask(t *testing.T, text string, results ...string) (string, []string) {
	t.Helper()
	var blocks []anthropic.ContentBlockParamUnion
	k := 0
	for _, b := range a.last.Content {
		if b.Type == "tool_use" && k < len(results) {
			blocks = append(blocks, anthropic.NewToolResultBlock(b.ID, results[k], false))
			k++
		}
	}
	if text != "" {
		blocks = append(blocks, anthropic.NewTextBlock(text))
	}
	a.p.Messages = append(a.p.Messages, anthropic.NewUserMessage(blocks...))
	var resp *http.Response
	ctx := context.Background()
	if a.stream {
		s := a.c.Messages.NewStreaming(ctx, a.p, aoption.WithResponseInto(&resp))
		var acc anthropic.Message
		for s.Next() {
			if err := acc.Accumulate(s.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		a.last = acc
	} else {
		m, err := a.c.Messages.New(ctx, a.p, aoption.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		a.last = *m
	}
	a.id = resp.Header.Get(proxy.HeaderThread)
	a.p.Messages = append(a.p.Messages, a.last.ToParam())
	var out strings.Builder
	var names []string
	for _, b := range a.last.Content {
		switch b.Type {
		case "text":
			out.WriteString(b.Text)
		case "tool_use":
			names = append(names, b.Name)
		}
	}
	if (len(names) > 0) != (a.last.StopReason == "tool_use") {
		t.Errorf("stop reason %q with tool calls %v", a.last.StopReason, names)
	}
	return out.String(), names
}

func newChat(h *harness, api proxy.API, stream bool) sdkChat {
	if api == proxy.Anthropic {
		return &anthropicChat{c: anthropicClient(h), stream: stream, p: anthropic.MessageNewParams{
			Model: "claude-sonnet-4-5", MaxTokens: 1024,
			System: []anthropic.TextBlockParam{{Text: "You are a coding agent."}},
			Tools:  []anthropic.ToolUnionParam{anthropicWeatherTool()},
		}}
	}
	return &openAIChat{c: openAIClient(h), stream: stream, p: openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a coding agent.")},
		Tools:    []openai.ChatCompletionToolUnionParam{weatherTool()},
	}}
}

// lastToolResult returns the text of the recall results in the last
// upstream request.
func lastUpstreamText(t *testing.T, h *harness) string {
	t.Helper()
	reqs := h.llm.Requests()
	return string(reqs[len(reqs)-1].Body)
}

var refRE = regexp.MustCompile(`m_[0-9a-f]{24}`)

func TestServerSideRecall(t *testing.T) {
	for _, api := range []proxy.API{proxy.OpenAI, proxy.Anthropic} {
		for _, stream := range []bool{false, true} {
			name := string(api) + map[bool]string{false: "/non-streaming", true: "/streaming"}[stream]
			t.Run(name, func(t *testing.T) {
				h := startServer(t, harnessOpts{})
				chat := newChat(h, api, stream)
				toolMsg := "tool"
				if api == proxy.Anthropic {
					toolMsg = "user"
				}

				chat.ask(t, "Fix ticket INV-4401 in src/shop/checkout.go")
				thread := chat.thread()

				// The model searches, then answers: the client sees the answer only.
				h.llm.Enqueue(
					fakellm.Reply{Text: "Searching.", ToolCalls: []fakellm.ToolCall{{ID: "call_s1", Name: proxy.ToolSearch, Arguments: `{"query":"INV-4401"}`}}},
					fakellm.Reply{Text: " Found it."},
				)
				before := len(h.llm.Requests())
				text, calls := chat.ask(t, "Which ticket was it?")
				if len(calls) != 0 {
					t.Fatalf("the client saw tool calls %v", calls)
				}
				wantText := " Found it."
				if stream { // a stream shows the first round's text as it comes
					wantText = "Searching. Found it."
				}
				if text != wantText {
					t.Errorf("client text %q, want %q", text, wantText)
				}
				if n := len(h.llm.Requests()) - before; n != 2 {
					t.Fatalf("%d upstream calls, want 2", n)
				}
				body := lastUpstreamText(t, h)
				if !strings.Contains(body, "INV-4401") || !refRE.MatchString(body) || !strings.Contains(body, "results for") {
					t.Errorf("the second upstream call lacks the search result: %s", body)
				}

				// mneme_read by the ref of the first user message.
				msgs, err := h.m.Thread("default", thread).Events(context.Background(), 1, 0)
				if err != nil {
					t.Fatal(err)
				}
				var ref string
				for _, ev := range msgs {
					if ev.Message != nil && ev.Message.Role == message.User {
						ref = ev.Ref
						break
					}
				}
				h.llm.Enqueue(
					fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: "call_r1", Name: proxy.ToolRead, Arguments: `{"ref":"` + ref + `","offset":1,"limit":5}`}}},
					fakellm.Reply{Text: "Read it."},
				)
				if text, calls = chat.ask(t, "Read the goal again."); text != "Read it." || len(calls) != 0 {
					t.Errorf("after read: %q %v", text, calls)
				}
				if body := lastUpstreamText(t, h); !strings.Contains(body, "lines 1-1 of 1 (43 bytes)") || !strings.Contains(body, "Fix ticket INV-4401") {
					t.Errorf("the read result is not in the next call: %s", body)
				}

				// Mneme's and the client's tools in one reply: the client gets
				// its own call only; the next request pairs up upstream.
				h.llm.Enqueue(
					fakellm.Reply{ToolCalls: []fakellm.ToolCall{
						{ID: "call_m2", Name: proxy.ToolSearch, Arguments: `{"query":"checkout.go"}`},
						{ID: "call_w2", Name: "get_weather", Arguments: `{"city":"Oslo"}`},
					}},
					fakellm.Reply{Text: "Done."},
				)
				_, calls = chat.ask(t, "Check the weather too.")
				if strings.Join(calls, ",") != "get_weather" {
					t.Fatalf("client calls %v, want get_weather only", calls)
				}
				if text, _ = chat.ask(t, "", "rainy"); text != "Done." {
					t.Errorf("after the tool result: %q", text)
				}
				if ids := h.threads(t, "default"); len(ids) != 1 {
					t.Errorf("threads %v: the resent history forked", ids)
				}

				// A non-streamed recall round never reaches the client: it is
				// marked so; a streamed one showed the client its text.
				first := "assistant:Searching.[call mneme_search {\"query\":\"INV-4401\"}]"
				read := `assistant:[call mneme_read {"ref":"REF","offset":1,"limit":5}]`
				if !stream {
					first += " (recall)"
					read += " (recall)"
				}
				got := summary(h.messages(t, "default", thread))
				for i := range got {
					got[i] = refRE.ReplaceAllString(got[i], "REF")
					if strings.HasPrefix(got[i], toolMsg+":[result ") {
						got[i] = got[i][:len(toolMsg)+9] + "…" // the result's text is checked upstream
					}
				}
				equalLines(t, "log", got, []string{
					"system:You are a coding agent.",
					"user:Fix ticket INV-4401 in src/shop/checkout.go",
					"assistant:ok: Fix ticket INV-4401 in src/shop/checkout.go",
					"user:Which ticket was it?",
					first,
					toolMsg + ":[result …",
					"assistant: Found it.",
					"user:Read the goal again.",
					read,
					toolMsg + ":[result …",
					"assistant:Read it.",
					"user:Check the weather too.",
					`assistant:[call mneme_search {"query":"checkout.go"}][call get_weather {"city":"Oslo"}]`,
					toolMsg + ":[result …",
					toolMsg + ":[result …",
					"assistant:Done.",
				})
			})
		}
	}
}

func TestRecallRoundsAreBounded(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "non-streaming", true: "streaming"}[stream], func(t *testing.T) {
			h := startServer(t, harnessOpts{pxConfig: func(c *proxy.Config) { c.RecallRounds = 2 }})
			chat := newChat(h, proxy.OpenAI, stream)
			search := fakellm.Reply{ToolCalls: []fakellm.ToolCall{{Name: proxy.ToolSearch, Arguments: `{"query":"anything"}`}}}
			h.llm.Enqueue(search, search, search, search, search)
			text, calls := chat.ask(t, "loop forever")
			if len(calls) != 0 || text != "" {
				t.Errorf("client got %q %v", text, calls)
			}
			if n := len(h.llm.Requests()); n != 3 {
				t.Errorf("%d upstream calls, want 1 + 2 rounds", n)
			}
			h.llm.Reset()
			if text, _ := chat.ask(t, "then?"); text != "ok: then?" {
				t.Errorf("next request: %q", text)
			}
			if ids := h.threads(t, "default"); len(ids) != 1 {
				t.Errorf("threads %v: forked", ids)
			}
		})
	}
}
