package recall_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/window"
)

// complete sends the window to the scripted model as an OpenAI request with
// the recall tools, and returns the assistant's reply.
func complete(t *testing.T, srv *fakellm.Server, w *window.Window) message.Message {
	t.Helper()
	msgs, err := message.EncodeOpenAIMessages(w.Messages)
	if err != nil {
		t.Fatal(err)
	}
	var tools []json.RawMessage
	if w.NeedsRecall {
		tools = recall.Definitions(recall.OpenAI)
	}
	body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs, "tools": tools})
	resp, err := http.Post(srv.URL()+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("model: %d %s", resp.StatusCode, raw)
	}
	var out struct {
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("model reply %s: %v", raw, err)
	}
	m, err := message.DecodeOpenAI(out.Choices[0].Message)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// After a tool result is evicted and then masked, a model that calls
// mneme_search and then mneme_read, page by page, gets back its exact
// original bytes; everything runs in process against the scripted model.
func TestWindowRecallsEvictedResult(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := mneme.DefaultPolicy()
	p.BudgetTokens = 10500
	p.ReserveOutputTokens = 500
	p.EvictOverTokens = 300
	p.MaskKeepPerTool = 0
	p.MinTailTokens = 500
	p.Strategy = window.Mask
	// The cut points this test was sized for (and a small recalled block):
	// with the defaults' deeper cut the evicted result leaves whole, in a
	// catalogue, before any step masks it.
	p.Trigger, p.Target = window.Frac(0.85), window.Frac(0.5)
	p.RecallShare, p.RecallMaxTokens = 0.05, 1500
	m, err := mneme.Open(ctx, mneme.Config{Store: st, Policy: &p})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	th := m.Thread("acme", "run-1")
	opts := mneme.WindowOptions{Tools: recall.Definitions(recall.OpenAI)}

	// The body to recover: many lines, one of them the needle, unicode and
	// a one-line JSON blob among them, trailing newline kept.
	var b strings.Builder
	for i := range 400 {
		switch i {
		case 217:
			b.WriteString("FAIL TestCheckout trace_id=checkout-failure-2026-03-15 (payment gateway timeout)\n")
		case 300:
			b.WriteString(`{"order":"INV-4401","items":[{"sku":"café-☕","qty":2}],"note":"naïve"}` + "\n")
		default:
			fmt.Fprintf(&b, "=== RUN TestCase%03d --- PASS (0.0%ds) ✓\n", i, i%10)
		}
	}
	original := b.String()

	turn := func(n int, tool, body string) []message.Message {
		id := fmt.Sprintf("call_%d", n)
		return []message.Message{
			message.NewToolCalls("", message.Part{ToolCallID: id, ToolName: tool, Arguments: `{}`}),
			message.NewToolResult(id, body),
		}
	}
	msgs := []message.Message{
		message.NewText(message.System, "You are a coding agent."),
		message.NewText(message.User, "Find out why checkout fails."),
	}
	for n := 1; n <= 8; n++ {
		msgs = append(msgs, turn(100+n, "grep", fmt.Sprintf("src/pkg/early_%d.go:1: match", n))...)
	}
	msgs = append(msgs, turn(1, "run_tests", original)...)
	stored, w, err := th.AppendWindow(ctx, msgs, opts)
	if err != nil {
		t.Fatal(err)
	}
	ref := stored[len(stored)-1].Ref
	if !slices.Contains(w.Usage.Evicted, ref) {
		t.Fatalf("the big result was not evicted: usage %+v", w.Usage)
	}
	// More tool work, until a compaction masks older results.
	bodies := map[string]string{ref: original}
	for n := 2; n < 60 && !slices.Contains(w.Usage.Masked, ref); n++ {
		var body strings.Builder
		for l := range 12 {
			fmt.Fprintf(&body, "src/pkg/file_%d.go:%d: func F%d() error { return nil }\n", n, l, l)
		}
		var evs []store.Event
		if evs, w, err = th.AppendWindow(ctx, turn(n, "run_tests", body.String()), opts); err != nil {
			t.Fatal(err)
		}
		bodies[evs[1].Ref] = body.String()
	}
	t.Logf("usage: evicted %d, masked %d, compactions %d", len(w.Usage.Evicted), len(w.Usage.Masked), w.Usage.Compactions)
	if !slices.Contains(w.Usage.Masked, ref) {
		t.Fatalf("the evicted result was never masked: usage %+v", w.Usage)
	}
	if !w.NeedsRecall {
		t.Fatal("window leaves messages out but does not ask for the recall tools")
	}
	for _, wm := range w.Messages {
		if strings.Contains(wm.PlainText(), "trace_id=checkout-failure-2026-03-15") {
			t.Fatal("the needle is still in the window: nothing to recall")
		}
	}

	srv := fakellm.Start()
	defer srv.Close()
	h := &recall.Handler{Recall: &recall.Recall{Store: st}}
	scope := recall.Scope{Tenant: "acme", Thread: "run-1"}
	// act runs one model turn: the scripted reply's tool calls are answered
	// by the handler and everything lands in the thread's log.
	act := func(call fakellm.ToolCall) string {
		srv.Enqueue(fakellm.Reply{ToolCalls: []fakellm.ToolCall{call}})
		reply := complete(t, srv, w)
		calls := reply.ToolCalls()
		if len(calls) != 1 || calls[0].ToolName != call.Name {
			t.Fatalf("model reply %+v", reply)
		}
		res, err := h.Answer(ctx, scope, calls[0])
		if err != nil {
			t.Fatalf("%s: %v", call.Name, err)
		}
		if _, w, err = th.AppendWindow(ctx, []message.Message{reply, res}, opts); err != nil {
			t.Fatal(err)
		}
		return res.PlainText()
	}

	found := act(fakellm.ToolCall{Name: recall.ToolSearch, Arguments: `{"query":"trace_id=checkout-failure-2026-03-15","limit":5}`})
	refs := regexp.MustCompile(`ref (m_[0-9a-f]+)`).FindAllStringSubmatch(found, -1)
	if len(refs) == 0 || refs[0][1] != ref {
		t.Fatalf("search did not find the evicted result first:\n%s", found)
	}

	var pages []string
	next := 0
	for i := 0; i < 100; i++ {
		args := fmt.Sprintf(`{"ref":%q,"limit":150}`, ref)
		if next > 0 {
			args = fmt.Sprintf(`{"ref":%q,"offset":%d,"limit":150}`, ref, next)
		}
		out := act(fakellm.ToolCall{Name: recall.ToolRead, Arguments: args})
		header, body, _ := strings.Cut(out, "\n")
		pages = append(pages, body)
		mm := regexp.MustCompile(`offset=(\d+)\)\]$`).FindStringSubmatch(header)
		if mm == nil {
			if !strings.HasSuffix(header, "; end]") {
				t.Fatalf("page header %q", header)
			}
			break
		}
		next, _ = strconv.Atoi(mm[1])
	}
	if got := strings.Join(pages, "\n"); got != original {
		t.Fatalf("reassembled %d bytes in %d pages, differs from the original %d bytes", len(got), len(pages), len(original))
	}
	if len(pages) < 3 {
		t.Fatalf("%d pages: paging not exercised", len(pages))
	}
	// Any other masked result reads back whole in one call.
	for _, other := range w.Usage.Masked {
		want, ok := bodies[other]
		if other == ref || !ok {
			continue
		}
		out, err := h.Call(ctx, scope, recall.ToolRead, fmt.Sprintf(`{"ref":%q,"limit":1000}`, other))
		if _, body, _ := strings.Cut(out, "\n"); err != nil || body != want {
			t.Fatalf("masked %s read back as %q (%v), want %q", other, out, err, want)
		}
		break
	}
	// The log recorded the whole exchange (I1): search, reads, results.
	evs, _ := th.Events(ctx, 1, 0)
	n := 0
	for _, ev := range evs {
		if ev.Message != nil && slices.ContainsFunc(ev.Message.ToolCalls(), func(p message.Part) bool { return recall.IsTool(p.ToolName) }) {
			n++
		}
	}
	if n != len(pages)+1 {
		t.Fatalf("%d recall calls logged, want %d", n, len(pages)+1)
	}
}
