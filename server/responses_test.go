package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/proxy"
)

// The Responses API through `mneme serve` with the official Go SDK: full
// resend and previous_response_id, streaming and not, tool calls with
// results of a few KB under a small budget.

func responsesTools() []responses.ToolUnionParam {
	var out []responses.ToolUnionParam
	for _, name := range []string{"read_file", "grep", "run_tests"} {
		out = append(out, responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
			Name:       name,
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"arg": map[string]any{"type": "string"}}},
			Strict:     openai.Bool(false),
		}})
	}
	return out
}

// asInput turns a raw item (an output item, or one built by hand) into an
// input item param, sent as it is.
func asInput(raw string) responses.ResponseInputItemUnionParam {
	return param.Override[responses.ResponseInputItemUnionParam](json.RawMessage(raw))
}

// responsesAgent scripts the upstream: three of four calls are tool calls,
// and once the recall tools are offered the model searches its memory
// every fifth step before answering.
func responsesAgent(step *int, mu *sync.Mutex, recallEvery int) fakellm.Option {
	recalled := map[int]bool{}
	return fakellm.WithHandler(func(r fakellm.Request) fakellm.Reply {
		if r.IsSummarization() {
			return fakellm.DefaultReply(r)
		}
		mu.Lock()
		i := *step
		recall := recallEvery > 0 && i%recallEvery == 2 && !recalled[i] && slices.Contains(r.Tools, proxy.ToolSearch)
		if recall {
			recalled[i] = true
		}
		mu.Unlock()
		if recall {
			return fakellm.Reply{Text: "Checking memory.", ToolCalls: []fakellm.ToolCall{{Name: proxy.ToolSearch, Arguments: `{"query":"INV-4401"}`}}}
		}
		if i%4 == 3 {
			return fakellm.Reply{Text: fmt.Sprintf("Turn done at step %d.", i)}
		}
		tool := []string{"read_file", "grep", "run_tests"}[i%3]
		return fakellm.Reply{Text: fmt.Sprintf("Step %d.", i), ToolCalls: []fakellm.ToolCall{{ID: fmt.Sprintf("call_%d", i), Name: tool, Arguments: fmt.Sprintf(`{"arg":"x%d"}`, i)}}}
	})
}

// callResponses makes one call, streamed or not, and returns the response
// as the client assembled it and the HTTP response.
func callResponses(t *testing.T, client openai.Client, params responses.ResponseNewParams, stream bool) (*responses.Response, *http.Response) {
	t.Helper()
	ctx := context.Background()
	var hr *http.Response
	if !stream {
		r, err := client.Responses.New(ctx, params, option.WithResponseInto(&hr))
		if err != nil {
			var apiErr *openai.Error
			if asError(err, &apiErr) {
				t.Fatalf("%v: %s", err, apiErr.RawJSON())
			}
			t.Fatal(err)
		}
		return r, hr
	}
	s := client.Responses.NewStreaming(ctx, params, option.WithResponseInto(&hr))
	var final *responses.Response
	var created string
	seq := int64(-1)
	added := map[int64]bool{}
	for s.Next() {
		ev := s.Current()
		if seq >= 0 && ev.SequenceNumber != seq+1 {
			t.Fatalf("sequence_number %d after %d", ev.SequenceNumber, seq)
		}
		seq = ev.SequenceNumber
		switch ev.Type {
		case "response.created":
			created = ev.Response.ID
		case "response.output_item.added":
			if added[ev.OutputIndex] || int(ev.OutputIndex) != len(added) {
				t.Fatalf("output_index %d after %d items", ev.OutputIndex, len(added))
			}
			added[ev.OutputIndex] = true
			if proxy.IsRecallTool(ev.Item.Name) {
				t.Fatalf("the client sees a recall call: %s", ev.Item.RawJSON())
			}
		case "response.completed":
			r := ev.Response
			final = &r
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if final == nil {
		t.Fatal("no response.completed")
	}
	if final.ID != created {
		t.Fatalf("created %q, completed %q", created, final.ID)
	}
	if len(final.Output) != len(added) {
		t.Fatalf("completed output has %d items, the stream added %d", len(final.Output), len(added))
	}
	return final, hr
}

func TestResponsesSession(t *testing.T) {
	for _, tc := range []struct {
		name     string
		previous bool // continue by previous_response_id instead of resending
		stream   func(i int) bool
	}{
		{"resend", false, func(int) bool { return false }},
		{"resend-stream", false, func(int) bool { return true }},
		{"previous", true, func(int) bool { return false }},
		{"previous-stream-mixed", true, func(i int) bool { return i%2 == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const calls = 24
			var mu sync.Mutex
			step := 0
			h := startServer(t, harnessOpts{budget: 5000, llmOpts: []fakellm.Option{responsesAgent(&step, &mu, 5)}})
			client := openAIClient(h)
			history := []string{`{"role":"user","content":"Fix ticket INV-4401 in src/shop/checkout.go."}`}
			pending := history // items not sent yet (previous_response_id mode)
			prevID, thread := "", ""
			compactions := 0
			for i := 0; i < calls; i++ {
				mu.Lock()
				step = i
				mu.Unlock()
				params := responses.ResponseNewParams{
					Model:        "gpt-4o-mini",
					Instructions: openai.String("You are a coding agent."),
					Tools:        responsesTools(),
					Store:        openai.Bool(false),
				}
				send := history
				if tc.previous {
					send = pending
					if prevID != "" {
						params.PreviousResponseID = openai.String(prevID)
					}
				}
				var input responses.ResponseInputParam
				for _, it := range send {
					input = append(input, asInput(it))
				}
				params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
				resp, hr := callResponses(t, client, params, tc.stream(i))
				if hr.Header.Get(proxy.HeaderWindow) == "" {
					t.Fatalf("call %d not managed: no %s", i, proxy.HeaderWindow)
				}
				if hr.Header.Get(proxy.HeaderCompacted) == "true" {
					compactions++
				}
				if id := hr.Header.Get(proxy.HeaderThread); thread == "" {
					thread = id
				} else if id != thread {
					t.Fatalf("call %d went to thread %q, not %q", i, id, thread)
				}
				if !strings.HasPrefix(resp.ID, "resp_") || resp.Usage.InputTokens == 0 {
					t.Fatalf("call %d: response %s, usage %+v", i, resp.ID, resp.Usage)
				}
				prevID = resp.ID
				pending = nil
				var calls []responses.ResponseOutputItemUnion
				for _, it := range resp.Output {
					history = append(history, it.RawJSON())
					if it.Type == "function_call" {
						calls = append(calls, it)
					}
				}
				for _, c := range calls {
					out, _ := json.Marshal(map[string]any{"type": "function_call_output", "call_id": c.CallID, "output": toolOutput(c.Name, i)})
					history = append(history, string(out))
					pending = append(pending, string(out))
				}
				if len(calls) == 0 {
					u, _ := json.Marshal(map[string]any{"role": "user", "content": fmt.Sprintf("Good. Now look at step %d's callers.", i)})
					history = append(history, string(u))
					pending = append(pending, string(u))
				}
			}
			if compactions < 1 {
				t.Errorf("no compaction in %d calls", calls)
			}
			recalls := 0
			for _, m := range h.messages(t, "default", thread) {
				if m.Meta[proxy.MetaRecall] == "true" && m.Role == message.Tool {
					recalls++
				}
			}
			if recalls == 0 {
				t.Errorf("no recall round in %d calls", calls)
			}
			// Every upstream request is managed: the window as input, no
			// previous_response_id, every call answered, no orphan.
			bodies := responsesBodies(t, h, "/v1/responses")
			if len(bodies) < calls {
				t.Fatalf("%d upstream requests, want %d", len(bodies), calls)
			}
			for n, r := range h.llm.Requests() {
				if r.Path != "/v1/responses" {
					continue
				}
				var body struct {
					Input        json.RawMessage `json:"input"`
					Previous     *string         `json:"previous_response_id"`
					Instructions string          `json:"instructions"`
				}
				if err := json.Unmarshal(r.Body, &body); err != nil {
					t.Fatal(err)
				}
				if body.Previous != nil {
					t.Fatalf("request %d forwarded previous_response_id", n)
				}
				if body.Instructions != "You are a coding agent." && !bytes.Contains(r.Body, []byte("mneme:")) {
					t.Fatalf("request %d: instructions %q", n, body.Instructions)
				}
				msgs, err := message.DecodeResponsesInput(body.Input)
				if err != nil {
					t.Fatalf("request %d: %v", n, err)
				}
				if err := orphans(msgs); err != nil {
					t.Errorf("request %d: %v", n, err)
				}
				for _, m := range msgs {
					if m.Role == message.System && m.TextOf() == "You are a coding agent." {
						t.Fatalf("request %d: the instructions are in the input too", n)
					}
				}
			}
			// The log holds the conversation once, in order: the
			// instructions, then every item but the last, unsent ones.
			var items []string
			items = append(items, history[:len(history)-len(pending)]...)
			msgs, err := message.DecodeResponsesInput([]byte("[" + strings.Join(items, ",") + "]"))
			if err != nil {
				t.Fatal(err)
			}
			want := append([]string{"system:You are a coding agent."}, summary(msgs)...)
			got := asClientSaw(summary(h.messages(t, "default", thread)))
			equalLines(t, "log vs client history", got, asClientSaw(want))
			if err := orphans(h.messages(t, "default", thread)); err != nil {
				t.Errorf("log: %v", err)
			}
			if ids := h.threads(t, "default"); len(ids) != 1 {
				t.Errorf("threads %v, want one", ids)
			}
			t.Logf("%d calls, %d compactions, %d recall results", calls, compactions, recalls)
		})
	}
}

// previous_response_id is Mneme's: an id it never issued is the API's 404,
// an older response is a branch, GET and DELETE serve what it recorded.
func TestResponsesPreviousID(t *testing.T) {
	h := startServer(t, harnessOpts{})
	client := openAIClient(h)
	ctx := context.Background()
	h.llm.Enqueue(fakellm.Reply{Text: "first"}, fakellm.Reply{Text: "second"}, fakellm.Reply{Text: "branch"})
	newParams := func(prev, text string) responses.ResponseNewParams {
		p := responses.ResponseNewParams{
			Model: "gpt-4o-mini",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)},
			Store: openai.Bool(false),
		}
		if prev != "" {
			p.PreviousResponseID = openai.String(prev)
		}
		return p
	}
	r1, err := client.Responses.New(ctx, newParams("", "one"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := client.Responses.New(ctx, newParams(r1.ID, "two"))
	if err != nil {
		t.Fatal(err)
	}
	if r2.OutputText() != "second" || r2.PreviousResponseID != r1.ID {
		t.Fatalf("r2: %q, previous %q", r2.OutputText(), r2.PreviousResponseID)
	}
	// A branch from r1: the fork holds one, first, three; the original is
	// untouched.
	var hr *http.Response
	r3, err := client.Responses.New(ctx, newParams(r1.ID, "three"), option.WithResponseInto(&hr))
	if err != nil {
		t.Fatal(err)
	}
	parent := hr.Header.Get(proxy.HeaderForkedFrom)
	branch := hr.Header.Get(proxy.HeaderThread)
	if parent == "" || branch == parent {
		t.Fatalf("branch: thread %q forked from %q", branch, parent)
	}
	equalLines(t, "original", summary(h.messages(t, "default", parent)), []string{"user:one", "assistant:first", "user:two", "assistant:second"})
	equalLines(t, "branch", summary(h.messages(t, "default", branch)), []string{"user:one", "assistant:first", "user:three", "assistant:branch"})
	// The last request upstream was the branch's window, in full.
	reqs := responsesBodies(t, h, "/v1/responses")
	last, _ := json.Marshal(reqs[len(reqs)-1]["input"])
	lm, err := message.DecodeResponsesInput(last)
	if err != nil {
		t.Fatal(err)
	}
	equalLines(t, "branch window", summary(lm), []string{"user:one", "assistant:first", "user:three"})

	// GET and DELETE.
	got, err := client.Responses.Get(ctx, r3.ID, responses.ResponseGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != r3.ID || got.OutputText() != "branch" || got.Status != "completed" || got.Usage.InputTokens == 0 {
		t.Fatalf("GET: %s", got.RawJSON())
	}
	if err := client.Responses.Delete(ctx, r3.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{r3.ID, "resp_" + strings.Repeat("a", 26) + "AQB0LXg", "resp_not_mneme"} {
		_, err := client.Responses.New(ctx, newParams(id, "after"))
		checkNotFound(t, err, "Previous response with id '"+id+"' not found.")
	}
	_, err = client.Responses.Get(ctx, r3.ID, responses.ResponseGetParams{})
	checkNotFound(t, err, "")

	// Another tenant's id is unknown (tenant-scoped, I8).
	ht := startServer(t, harnessOpts{keys: map[string]string{"key-a": "a", "key-b": "b"}})
	ht.llm.Enqueue(fakellm.Reply{Text: "for a"})
	ca := openAIClient(ht, option.WithAPIKey("key-a"))
	cb := openAIClient(ht, option.WithAPIKey("key-b"))
	ra, err := ca.Responses.New(ctx, newParams("", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cb.Responses.New(ctx, newParams(ra.ID, "steal"))
	checkNotFound(t, err, "")
	_, err = cb.Responses.Get(ctx, ra.ID, responses.ResponseGetParams{})
	checkNotFound(t, err, "")
}

// asClientSaw renders summary lines as the client saw the conversation:
// recall rounds left out, and the assistant messages of one streamed
// answer that spanned a recall round joined, as the client got them.
func asClientSaw(lines []string) []string {
	recallCall := regexp.MustCompile(`\[call mneme_(search|read) [^\]]*\]`)
	var out []string
	for _, l := range lines {
		if strings.HasSuffix(l, " (recall)") {
			continue
		}
		l = recallCall.ReplaceAllString(l, "")
		if n := len(out); n > 0 && strings.HasPrefix(l, "assistant:") && strings.HasPrefix(out[n-1], "assistant:") {
			out[n-1] += strings.TrimPrefix(l, "assistant:")
			continue
		}
		out = append(out, l)
	}
	return out
}

func checkNotFound(t *testing.T, err error, msg string) {
	t.Helper()
	var apiErr *openai.Error
	if !asError(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Type != "invalid_request_error" {
		t.Fatalf("want the API's 404, got %v", err)
	}
	if msg != "" && apiErr.Message != msg {
		t.Fatalf("message %q, want %q", apiErr.Message, msg)
	}
}

func asError(err error, target **openai.Error) bool {
	e, ok := err.(*openai.Error)
	if ok {
		*target = e
	}
	return ok
}

// The WebSocket handshake Codex tries first is refused with 426, which
// makes it use HTTP at once; nothing reaches the upstream.
func TestResponsesWebSocketRefused(t *testing.T) {
	h := startServer(t, harnessOpts{})
	req, _ := http.NewRequest(http.MethodGet, h.url+"/v1/responses", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired || !bytes.Contains(body, []byte(`"error"`)) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if n := len(h.llm.Requests()); n != 0 {
		t.Fatalf("%d upstream requests", n)
	}
}

// TestResponsesPrefixStability: over 200 calls on the Responses route,
// between compactions every upstream request starts with the bytes of the
// one before it up to the end of its input (I6), so provider prompt caches
// hit; a compaction is the only thing that changes them.
func TestResponsesPrefixStability(t *testing.T) {
	const calls = 200
	var mu sync.Mutex
	step := 0
	h := startServer(t, harnessOpts{budget: 12000, llmOpts: []fakellm.Option{responsesAgent(&step, &mu, 0)}})
	client := openAIClient(h)
	history := []string{`{"role":"user","content":"Fix ticket INV-4401 in src/shop/checkout.go."}`}
	compacted := make([]bool, calls)
	for i := 0; i < calls; i++ {
		mu.Lock()
		step = i
		mu.Unlock()
		var input responses.ResponseInputParam
		for _, it := range history {
			input = append(input, asInput(it))
		}
		params := responses.ResponseNewParams{
			Model:        "gpt-4o-mini",
			Instructions: openai.String("You are a coding agent."),
			Tools:        responsesTools(),
			Store:        openai.Bool(false),
			Input:        responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		}
		resp, hr := callResponses(t, client, params, i%2 == 1)
		compacted[i] = hr.Header.Get(proxy.HeaderCompacted) == "true"
		var calls []responses.ResponseOutputItemUnion
		for _, it := range resp.Output {
			history = append(history, it.RawJSON())
			if it.Type == "function_call" {
				calls = append(calls, it)
			}
		}
		for _, c := range calls {
			out, _ := json.Marshal(map[string]any{"type": "function_call_output", "call_id": c.CallID, "output": toolOutput(c.Name, i)})
			history = append(history, string(out))
		}
		if len(calls) == 0 {
			u, _ := json.Marshal(map[string]any{"role": "user", "content": fmt.Sprintf("Good. Now look at step %d's callers.", i)})
			history = append(history, string(u))
		}
	}
	var bodies [][]byte
	for _, r := range h.llm.Requests() {
		if r.Path == "/v1/responses" && !bytes.Contains(r.Body, []byte("mneme:observer")) && !bytes.Contains(r.Body, []byte("mneme:reflector")) {
			bodies = append(bodies, r.Body)
		}
	}
	if len(bodies) != calls {
		t.Fatalf("%d upstream model calls, want %d", len(bodies), calls)
	}
	stable, compactions := 0, 0
	for i := 1; i < calls; i++ {
		if compacted[i] {
			compactions++
			continue
		}
		prefix := inputPrefix(t, bodies[i-1])
		if !bytes.HasPrefix(bodies[i], prefix) {
			n := 0
			for n < len(prefix) && n < len(bodies[i]) && prefix[n] == bodies[i][n] {
				n++
			}
			t.Fatalf("call %d: the request differs from call %d's at byte %d of its %d-byte stable prefix:\n%q\n%q",
				i, i-1, n, len(prefix), bodies[i-1][max(0, n-80):min(len(bodies[i-1]), n+80)], bodies[i][max(0, n-80):min(len(bodies[i]), n+80)])
		}
		stable++
	}
	if compactions == 0 || stable < calls/2 {
		t.Fatalf("%d compactions, %d prefix-stable calls of %d: the test does not exercise both", compactions, stable, calls)
	}
	t.Logf("%d calls: %d compactions, %d of %d calls after the first prefix-stable (all that did not compact)", calls, compactions, stable, calls-1)
}

// inputPrefix returns a request body up to the end of its input's last
// item: what the next request must start with between compactions.
func inputPrefix(t *testing.T, body []byte) []byte {
	t.Helper()
	i := bytes.Index(body, []byte(`"input":[`))
	if i < 0 {
		t.Fatalf("no input in %s", body)
	}
	dec := json.NewDecoder(bytes.NewReader(body[i+len(`"input":`):]))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		t.Fatal(err)
	}
	end := i + len(`"input":`) + int(dec.InputOffset()) - 1 // the array's ']'
	return body[:end]
}

// responsesBodies returns the JSON bodies of the requests the fake
// upstream received on path.
func responsesBodies(t testing.TB, h *harness, path string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range h.llm.Requests() {
		if r.Path != path {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal(r.Body, &v); err != nil {
			t.Fatalf("upstream body: %v", err)
		}
		out = append(out, v)
	}
	return out
}

// A client with store on (the Vercel AI SDK's default) resends earlier
// output items as item references: Mneme resolves them from its log, so
// the thread goes on (no branch) and the upstream gets the items whole.
func TestResponsesItemReferences(t *testing.T) {
	h := startServer(t, harnessOpts{})
	client := openAIClient(h)
	h.llm.Enqueue(
		fakellm.Reply{Text: "Let me look.", ToolCalls: []fakellm.ToolCall{{ID: "call_1", Name: "read_file", Arguments: `{"arg":"a"}`}}},
		fakellm.Reply{Text: "Done."},
	)
	history := []string{`{"role":"user","content":"Read a."}`}
	send := func() *responses.Response {
		var input responses.ResponseInputParam
		for _, it := range history {
			input = append(input, asInput(it))
		}
		r, _ := callResponses(t, client, responses.ResponseNewParams{Model: "gpt-4o-mini", Tools: responsesTools(),
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input}}, false)
		return r
	}
	r1 := send()
	for _, it := range r1.Output {
		history = append(history, fmt.Sprintf(`{"type":"item_reference","id":%q}`, it.ID))
	}
	history = append(history, `{"type":"function_call_output","call_id":"call_1","output":"contents of a"}`)
	h.llm.Reset() // the upstream no longer holds r1's items: only Mneme can resolve them
	h.llm.Enqueue(fakellm.Reply{Text: "Done."})
	if r2 := send(); r2.OutputText() != "Done." {
		t.Fatalf("r2: %s", r2.RawJSON())
	}
	if reqs := h.llm.Requests(); len(reqs) != 1 || bytes.Contains(reqs[0].Body, []byte("item_reference")) {
		t.Fatalf("the upstream got item references: %d requests", len(reqs))
	}
	threads := h.threads(t, "default")
	if len(threads) != 1 {
		t.Fatalf("threads %v: the resolved history did not continue the thread", threads)
	}
	equalLines(t, "log", summary(h.messages(t, "default", threads[0])), []string{
		"user:Read a.", `assistant:Let me look.[call read_file {"arg":"a"}]`, "tool:[result contents of a]", "assistant:Done.",
	})
}
