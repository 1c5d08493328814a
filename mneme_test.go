package mneme_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/token"
	"github.com/mnemehq/mneme/window"
)

func Example() {
	ctx := context.Background()
	m, err := mneme.Open(ctx, mneme.Config{DSN: "memory:"})
	if err != nil {
		panic(err)
	}
	defer m.Close()

	t := m.Thread("default", "run-42")
	_, w, err := t.AppendWindow(ctx, []message.Message{
		message.NewText(message.System, "You are a careful coding agent."),
		message.NewText(message.User, "Fix INV-4401 in src/shop/checkout.go"),
	}, mneme.WindowOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(w.Messages), "messages in the window,", w.Usage.Budget, "tokens of budget")
	// Output: 2 messages in the window, 119808 tokens of budget
}

// session appends a tool-heavy agent step n to t and returns the window.
func step(ctx context.Context, t *mneme.Thread, n int, opts mneme.WindowOptions) (*window.Window, error) {
	id := fmt.Sprintf("call_%d", n)
	var body strings.Builder
	for l := 0; l < 20+n%40; l++ {
		fmt.Fprintf(&body, "src/pkg/file_%d.go:%d: func F%d() error { return nil }\n", n, l, l)
	}
	msgs := []message.Message{
		message.NewToolCalls(fmt.Sprintf("step %d", n), message.Part{ToolCallID: id, ToolName: []string{"read_file", "grep", "run_tests"}[n%3], Arguments: `{"q":1}`}),
		message.NewToolResult(id, body.String()),
	}
	if n%25 == 0 {
		msgs = append(msgs, message.NewText(message.User, fmt.Sprintf("Also check ticket INV-%d please.", 4000+n)))
	}
	_, w, err := t.AppendWindow(ctx, msgs, opts)
	return w, err
}

func smallPolicy() *mneme.Policy {
	p := mneme.DefaultPolicy()
	p.BudgetTokens = 24000
	p.ReserveOutputTokens = 2000
	return &p
}

func openSQLite(t testing.TB, path string, p *mneme.Policy) *mneme.Engine {
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mneme.Open(context.Background(), mneme.Config{Store: st, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); st.Close() })
	return m
}

func begin(ctx context.Context, t testing.TB, th *mneme.Thread) {
	if _, err := th.Append(ctx, message.NewText(message.System, "You are an agent."), message.NewText(message.User, "Goal: fix INV-4401.")); err != nil {
		t.Fatal(err)
	}
}

// The encoded OpenAI window of call N+1 starts with the bytes of call N's,
// except at compactions; compactions are few.
func TestPrefixStable300Calls(t *testing.T) {
	ctx := context.Background()
	m := openSQLite(t, filepath.Join(t.TempDir(), "m.db"), smallPolicy())
	th := m.Thread("default", "prefix")
	begin(ctx, t, th)
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"read_file","parameters":{"type":"object"}}}`)}
	var prev []byte
	comps, breaks := 0, 0
	for n := 1; n <= 300; n++ {
		w, err := step(ctx, th, n, mneme.WindowOptions{Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		enc, err := message.EncodeOpenAIMessages(w.Messages)
		if err != nil {
			t.Fatal(err)
		}
		if w.Usage.Total > w.Usage.Budget {
			t.Fatalf("call %d: %d tokens over budget %d", n, w.Usage.Total, w.Usage.Budget)
		}
		if w.Usage.Step {
			comps++
		} else if prev != nil && !bytes.HasPrefix(trimArray(enc), trimArray(prev)) {
			breaks++
			t.Errorf("call %d: prefix changed without a compaction", n)
		}
		prev = enc
	}
	if comps == 0 || comps > 300/5 {
		t.Fatalf("%d compactions over 300 calls: want some, and few", comps)
	}
	t.Logf("300 calls: %d compactions, %d prefix breaks between compactions", comps, breaks)
}

// trimArray drops the closing bracket of a JSON array so that a longer
// array's bytes can start with a shorter one's.
func trimArray(b []byte) []byte { return bytes.TrimSuffix(bytes.TrimSpace(b), []byte("]")) }

// A fresh manager on the same store rebuilds the identical window from the
// log (I7), without compacting again.
func TestReplayFromLog(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	m := openSQLite(t, path, smallPolicy())
	th := m.Thread("default", "replay")
	begin(ctx, t, th)
	var last *window.Window
	for n := 1; n <= 150; n++ {
		w, err := step(ctx, th, n, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		last = w
	}
	if last.Usage.Compactions == 0 {
		t.Fatal("no compaction happened: the test proves nothing")
	}
	m2 := openSQLite(t, path, smallPolicy())
	events, _ := m2.Store().LastSeq(ctx, "default", "replay")
	w2, err := m2.Thread("default", "replay").Window(ctx, mneme.WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := m2.Store().LastSeq(ctx, "default", "replay")
	if after != events {
		t.Fatalf("replay wrote %d events", after-events)
	}
	sameReplay(t, last.Messages, w2.Messages)
}

// sameReplay fails the test when a replayed window's messages are not the
// live window's, byte for byte as the OpenAI API receives them (I7).
func sameReplay(t *testing.T, live, replayed []message.Message) {
	t.Helper()
	a, _ := message.EncodeOpenAIMessages(live)
	b, _ := message.EncodeOpenAIMessages(replayed)
	if !bytes.Equal(a, b) {
		t.Fatalf("the replayed window differs:\n%s\n---\n%s", a, b)
	}
}

// Every message reaches the log before Append returns, and the log is never
// shortened by compaction (I1).
func TestLogKeepsEverything(t *testing.T) {
	ctx := context.Background()
	m, err := mneme.Open(ctx, mneme.Config{Store: inmem.New(), Policy: smallPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	th := m.Thread("acme", "keep")
	begin(ctx, t, th)
	for n := 1; n <= 120; n++ {
		if _, err := step(ctx, th, n, mneme.WindowOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := th.Messages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := 2 + 120*2 + 120/25
	if len(msgs) != want {
		t.Fatalf("log has %d messages, want %d", len(msgs), want)
	}
	u, err := th.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u.ByKind[store.KindCompacted] == 0 || u.ByRole[message.Tool] == 0 || u.Messages != int64(want) {
		t.Fatalf("usage: %+v", u)
	}
	if u.Window.Total >= int(u.Tokens) {
		t.Fatalf("window %d tokens is not smaller than the thread's %d", u.Window.Total, u.Tokens)
	}
}

func TestCallbacksAndBudgetError(t *testing.T) {
	ctx := context.Background()
	var usages, compacts int
	p := smallPolicy()
	m, err := mneme.Open(ctx, mneme.Config{Store: inmem.New(), Policy: p,
		OnUsage:   func(_, _ string, u mneme.Usage) { usages++ },
		OnCompact: func(_, _ string, c mneme.CompactEvent) { compacts++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	th := m.Thread("default", "cb")
	begin(ctx, t, th)
	for n := 1; n <= 100; n++ {
		if _, err := step(ctx, th, n, mneme.WindowOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if usages != 100 || compacts == 0 {
		t.Fatalf("OnUsage fired %d times, OnCompact %d", usages, compacts)
	}
	before, _ := m.Store().LastSeq(ctx, "default", "cb")
	_, _, err = th.AppendWindow(ctx, []message.Message{message.NewText(message.User, strings.Repeat("huge message ", 20000))}, mneme.WindowOptions{})
	var be *mneme.BudgetError
	if !errors.As(err, &be) || be.Need <= be.Budget {
		t.Fatalf("got %v, want a BudgetError", err)
	}
	after, _ := m.Store().LastSeq(ctx, "default", "cb")
	if after != before+1 {
		t.Fatalf("the log grew by %d events; want just the message (kept, I1)", after-before)
	}
}

func TestPolicyPerThread(t *testing.T) {
	ctx := context.Background()
	m, err := mneme.Open(ctx, mneme.Config{Store: inmem.New()})
	if err != nil {
		t.Fatal(err)
	}
	th := m.Thread("default", "pol")
	p := mneme.DefaultPolicy()
	p.Strategy = window.Archive
	p.Model = "claude-sonnet-4"
	if err := th.SetPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	got, err := m.Thread("default", "pol").Policy(ctx)
	if err != nil || got.Strategy != window.Archive || got.Model != "claude-sonnet-4" {
		t.Fatalf("policy %+v, %v", got, err)
	}
	bad := p
	bad.Target = window.Frac(0.99)
	var fe *window.FieldError
	if err := th.SetPolicy(ctx, bad); !errors.As(err, &fe) || fe.Field != "target" {
		t.Fatalf("got %v", err)
	}
}

// Two managers (two processes' worth of state) write one thread of one
// SQLite file: every message lands once, the log stays gapless.
func TestTwoEnginesOneThread(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	a := openSQLite(t, path, smallPolicy())
	b := openSQLite(t, path, smallPolicy())
	begin(ctx, t, a.Thread("default", "shared"))
	errc := make(chan error, 2)
	for i, m := range []*mneme.Engine{a, b} {
		go func() {
			for n := 1; n <= 40; n++ {
				if _, err := step(ctx, m.Thread("default", "shared"), i*1000+n, mneme.WindowOptions{}); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	evs, err := a.Store().Load(ctx, "default", "shared", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("gap at %d", i)
		}
		if ev.Kind == store.KindMessage {
			seen[ev.Message.PlainText()]++
		}
	}
	msgs := 0
	for text, n := range seen {
		if n != 1 && !strings.HasPrefix(text, "Also check") {
			t.Fatalf("%q logged %d times", text, n)
		}
		msgs += n
	}
	if want := 2 + 2*(40*2+1); msgs != want {
		t.Fatalf("%d messages logged, want %d", msgs, want)
	}
}

// A policy that moves the thread to a model with another tokenizer counts
// from then on with it, and replay agrees.
func TestPolicyChangesTokenizer(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	m := openSQLite(t, path, smallPolicy())
	th := m.Thread("default", "tok")
	begin(ctx, t, th)
	for n := 1; n <= 20; n++ {
		if _, err := step(ctx, th, n, mneme.WindowOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p := *smallPolicy()
	p.Model = "claude-sonnet-4"
	if err := th.SetPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	var last *window.Window
	for n := 21; n <= 60; n++ {
		w, err := step(ctx, th, n, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if w.Usage.Total > w.Usage.Budget {
			t.Fatalf("over budget after the model change")
		}
		last = w
	}
	// Messages after the change are counted with Claude's (estimated)
	// tokenizer, before it with o200k.
	claude, _ := token.Get("claude")
	o200k, _ := token.Get(token.O200kBase)
	evs, _ := m.Store().Load(ctx, "default", "tok", 1, 0)
	for _, e := range evs {
		if e.Kind != store.KindMessage {
			continue
		}
		want := token.MessageTokens(o200k, *e.Message)
		if e.Seq > evs[len(evs)-1].Seq-10 {
			want = token.MessageTokens(claude, *e.Message)
		}
		if e.Seq < 10 || e.Seq > evs[len(evs)-1].Seq-10 {
			if e.Tokens != want {
				t.Fatalf("seq %d counted %d tokens, want %d", e.Seq, e.Tokens, want)
			}
		}
	}
	w2, err := openSQLite(t, path, smallPolicy()).Thread("default", "tok").Window(ctx, mneme.WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w2.Usage.Total != last.Usage.Total {
		t.Fatalf("replay counts %d tokens, live %d", w2.Usage.Total, last.Usage.Total)
	}
}
