package mneme_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
)

func openMem(t testing.TB) *mneme.Engine {
	t.Helper()
	m, err := mneme.Open(context.Background(), mneme.Config{Store: inmem.New()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// conv builds a history from role/text pairs.
func conv(s ...string) []message.Message {
	var out []message.Message
	for i := 0; i+1 < len(s); i += 2 {
		out = append(out, message.NewText(message.Role(s[i]), s[i+1]))
	}
	return out
}

// lines summarises a thread's messages as role:text.
func lines(t testing.TB, m *mneme.Engine, id string) []string {
	t.Helper()
	msgs, err := m.Thread("default", id).Messages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range msgs {
		out = append(out, string(x.Role)+":"+x.PlainText())
	}
	return out
}

func wantLines(t testing.TB, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// turn sends one resend request and records reply; it returns the turn.
func turn(t testing.TB, th *mneme.Thread, reply string, hist ...message.Message) *mneme.Turn {
	t.Helper()
	ctx := context.Background()
	x, err := th.AppendHistory(ctx, hist, mneme.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if reply != "" {
		if _, err := x.Record(ctx, message.NewText(message.Assistant, reply)); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

func threadIDs(t testing.TB, m *mneme.Engine) []string {
	t.Helper()
	var ids []string
	p := store.Page{Limit: 1000}
	for {
		infos, next, err := m.Store().Threads(context.Background(), "default", p)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			ids = append(ids, in.ID)
		}
		if next == "" {
			return ids
		}
		p.Cursor = next
	}
}

func TestAppendHistoryDedupAndBranches(t *testing.T) {
	m := openMem(t)
	th := m.Thread("default", "a")
	turn(t, th, "A1", conv("system", "S", "user", "U1")...)
	x := turn(t, th, "A2", conv("system", "S", "user", "U1", "assistant", "A1", "user", "U2")...)
	if x.Thread() != "a" || x.ForkedFrom() != "" || len(x.Appended) != 1 {
		t.Fatalf("steady state: thread %s forked %q appended %d", x.Thread(), x.ForkedFrom(), len(x.Appended))
	}
	wantLines(t, "a", lines(t, m, "a"), "system:S", "user:U1", "assistant:A1", "user:U2", "assistant:A2")

	// An edit of U2 branches off a; the branch's next request finds it.
	e := turn(t, th, "E2", conv("system", "S", "user", "U1", "assistant", "A1", "user", "edit")...)
	if e.ForkedFrom() != "a" || !strings.HasPrefix(e.Thread(), "a~") {
		t.Fatalf("edit: thread %s forked from %q", e.Thread(), e.ForkedFrom())
	}
	e2 := turn(t, th, "", conv("system", "S", "user", "U1", "assistant", "A1", "user", "edit", "assistant", "E2", "user", "more")...)
	if e2.Thread() != e.Thread() || e2.ForkedFrom() != "a" {
		t.Fatalf("branch not found again: %s (forked %q), want %s", e2.Thread(), e2.ForkedFrom(), e.Thread())
	}
	wantLines(t, "branch", lines(t, m, e.Thread()), "system:S", "user:U1", "assistant:A1", "user:edit", "assistant:E2", "user:more")
	wantLines(t, "a untouched", lines(t, m, "a"), "system:S", "user:U1", "assistant:A1", "user:U2", "assistant:A2")

	// A branch of the branch, where the branch itself diverges, names its
	// real parent.
	g := turn(t, th, "", conv("system", "S", "user", "U1", "assistant", "A1", "user", "edit", "assistant", "E2", "user", "other")...)
	if g.ForkedFrom() != e.Thread() || !strings.HasPrefix(g.Thread(), e.Thread()+"~") {
		t.Fatalf("fork of the fork: %s forked from %q", g.Thread(), g.ForkedFrom())
	}

	// A re-run of a prompt: the same reply is deduplicated into the log;
	// another one starts its own branch, and the next request finds it.
	r := turn(t, th, "A2", conv("system", "S", "user", "U1", "assistant", "A1", "user", "U2")...)
	if r.Thread() != "a" {
		t.Fatalf("a re-run answered as the log went to %s", r.Thread())
	}
	wantLines(t, "a after an identical re-run", lines(t, m, "a"), "system:S", "user:U1", "assistant:A1", "user:U2", "assistant:A2")
	r2 := turn(t, th, "B2", conv("system", "S", "user", "U1", "assistant", "A1", "user", "U2")...)
	if r2.ForkedFrom() != "a" {
		t.Fatalf("re-run with another reply: %s forked from %q", r2.Thread(), r2.ForkedFrom())
	}
	wantLines(t, "re-run branch", lines(t, m, r2.Thread()), "system:S", "user:U1", "assistant:A1", "user:U2", "assistant:B2")
	n := turn(t, th, "", conv("system", "S", "user", "U1", "assistant", "A1", "user", "U2", "assistant", "B2", "user", "U3")...)
	if n.Thread() != r2.Thread() {
		t.Fatalf("the re-run's branch not found again: %s, want %s", n.Thread(), r2.Thread())
	}
}

// TestReruns: one prompt re-run many times is always served; each distinct
// reply is one branch of the thread, never a chain.
func TestReruns(t *testing.T) {
	m := openMem(t)
	th := m.Thread("default", "cron")
	n := 10000
	if testing.Short() {
		n = 1000
	}
	for i := 0; i < n; i++ {
		x := turn(t, th, fmt.Sprintf("run %d", i%10), conv("system", fmt.Sprintf("now: %d", i), "user", "daily report")...)
		if f := x.ForkedFrom(); f != "" && f != "cron" {
			t.Fatalf("run %d went to %s, forked from %s", i, x.Thread(), f)
		}
	}
	ids := threadIDs(t, m)
	if len(ids) != 10 { // the thread and 9 branches, one per other reply
		t.Fatalf("%d threads, want 10: %q", len(ids), ids)
	}
	for _, id := range ids {
		if id != "cron" && strings.Count(id, "~") != 1 {
			t.Errorf("branch %s is not a child of the thread", id)
		}
		if got := lines(t, m, id); len(got) > 4 {
			t.Errorf("%s holds %d messages: %q", id, len(got), got)
		}
	}
}

// TestSiblings: 1,000 branches from one point, then 50 at once: every one
// a child of the thread, each log its own.
func TestSiblings(t *testing.T) {
	m := openMem(t)
	th := m.Thread("default", "chat")
	base := conv("user", "U1", "assistant", "A1")
	turn(t, th, "A1", base[:1]...)
	for i := 0; i < 1000; i++ {
		x := turn(t, th, fmt.Sprintf("reply %d", i), append(base[:2:2], message.NewText(message.User, fmt.Sprintf("edit %d", i)))...)
		if x.ForkedFrom() != "chat" && i > 0 || i == 0 && x.Thread() != "chat" {
			t.Fatalf("branch %d: %s forked from %q", i, x.Thread(), x.ForkedFrom())
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			x, err := th.AppendHistory(ctx, append(base[:2:2], message.NewText(message.User, fmt.Sprintf("at once %d", i))), mneme.HistoryOptions{})
			if err == nil {
				_, err = x.Record(ctx, message.NewText(message.Assistant, fmt.Sprintf("answer %d", i)))
				x.Close()
			}
			if err == nil && x.ForkedFrom() != "chat" {
				err = fmt.Errorf("%d: forked from %q", i, x.ForkedFrom())
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	ids := threadIDs(t, m)
	if len(ids) != 1050 {
		t.Fatalf("%d threads, want 1050", len(ids))
	}
	for _, id := range ids {
		if id == "chat" {
			continue
		}
		got := lines(t, m, id)
		if len(got) != 4 || got[0] != "user:U1" || got[1] != "assistant:A1" {
			t.Fatalf("%s: %q", id, got)
		}
	}
}

// TestSystemPromptChanges: a system prompt that changes every call is an
// event on the thread, not a fork; the window carries the new one.
func TestSystemPromptChanges(t *testing.T) {
	m := openMem(t)
	th := m.Thread("default", "agent")
	hist := conv("user", "goal")
	for i := 0; i < 200; i++ {
		sys := message.NewText(message.System, fmt.Sprintf("step %d", i))
		x := turn(t, th, fmt.Sprintf("did %d", i), append([]message.Message{sys}, hist...)...)
		if x.Thread() != "agent" || x.ForkedFrom() != "" {
			t.Fatalf("call %d went to %s", i, x.Thread())
		}
		if w := x.Window.Messages; w[0].Role != message.System || w[0].TextOf() != fmt.Sprintf("step %d", i) || w[1].Role == message.System {
			t.Fatalf("call %d: window starts %q %q", i, w[0].TextOf(), w[1].Role)
		}
		if i > 0 && !x.SystemChanged {
			t.Fatalf("call %d: the change is not reported", i)
		}
		hist = append(hist, message.NewText(message.Assistant, fmt.Sprintf("did %d", i)), message.NewText(message.User, fmt.Sprintf("next %d", i)))
	}
	if ids := threadIDs(t, m); len(ids) != 1 {
		t.Fatalf("threads %q", ids)
	}
	if got := lines(t, m, "agent"); len(got) != 1+2*200 {
		t.Fatalf("%d messages", len(got))
	}
}

// TestAppendModeChecksResults: in append mode a result must answer an
// open call of the log; a refused request writes nothing.
func TestAppendModeChecksResults(t *testing.T) {
	m := openMem(t)
	ctx := context.Background()
	th := m.Thread("default", "tools")
	app := mneme.HistoryOptions{Append: true}
	call := func(id string) message.Message {
		return message.NewToolCalls("", message.Part{ToolCallID: id, ToolName: "grep", Arguments: "{}"})
	}
	for _, msgs := range [][]message.Message{
		{message.NewText(message.User, "go"), call("c1")},
		{message.NewToolResult("c1", "ok")},
		{call("c2"), message.NewText(message.User, "moved on")},
	} {
		x, err := th.AppendHistory(ctx, msgs, app)
		if err != nil {
			t.Fatal(err)
		}
		x.Close()
	}
	before := lines(t, m, "tools")
	for name, msgs := range map[string][]message.Message{
		"second result":          {message.NewToolResult("c1", "again")},
		"late result":            {message.NewToolResult("c2", "late")},
		"orphan":                 {message.NewToolResult("nope", "x")},
		"duplicate call id":      {call("c1")},
		"duplicate in a request": {call("c9"), message.NewToolResult("c9", "a"), message.NewToolResult("c9", "b")},
	} {
		if _, err := th.AppendHistory(ctx, msgs, app); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
	wantLines(t, "log after refusals", lines(t, m, "tools"), before...)
}

// TestBudgetRefusalLogsNothing: a first message that can never fit is
// refused before it reaches the log.
func TestBudgetRefusalLogsNothing(t *testing.T) {
	m := openMem(t)
	ctx := context.Background()
	big := strings.Repeat("lorem ipsum dolor sit amet ", 60000)
	for _, id := range []string{"new", "old"} {
		th := m.Thread("default", id)
		hist := conv("user", big)
		if id == "old" {
			turn(t, th, "fine", conv("user", "hi")...)
			hist = conv("user", "hi", "assistant", "fine", "user", big)
		}
		before := lines(t, m, id)
		_, err := th.AppendHistory(ctx, hist, mneme.HistoryOptions{})
		var be *mneme.BudgetError
		if !errors.As(err, &be) || !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("%s: err %v, want a budget error", id, err)
		}
		wantLines(t, id, lines(t, m, id), before...)
	}
}

// TestDeleteDuringTurn: a reply of a turn begun before a delete is not
// written after it; the next request begins the thread from its history.
func TestDeleteDuringTurn(t *testing.T) {
	m := openMem(t)
	ctx := context.Background()
	th := m.Thread("default", "d")
	x, err := th.AppendHistory(ctx, conv("user", "U1"), mneme.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := th.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Record(ctx, message.NewText(message.Assistant, "late")); !errors.Is(err, mneme.ErrDeleted) {
		t.Fatalf("record after delete: %v", err)
	}
	x.Close()
	if got := lines(t, m, "d"); len(got) != 0 {
		t.Fatalf("deleted thread came back: %q", got)
	}
	turn(t, th, "A2", conv("user", "U1", "assistant", "A1", "user", "U2")...)
	wantLines(t, "begun again", lines(t, m, "d"), "user:U1", "assistant:A1", "user:U2", "assistant:A2")
}

// TestFork: the library forks a thread at a seq.
func TestFork(t *testing.T) {
	m := openMem(t)
	ctx := context.Background()
	th := m.Thread("default", "src")
	turn(t, th, "A1", conv("user", "U1")...)
	turn(t, th, "A2", conv("user", "U1", "assistant", "A1", "user", "U2")...)
	f, err := th.Fork(ctx, 2, "copy")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, "fork", lines(t, m, "copy"), "user:U1", "assistant:A1")
	if p, _ := f.Parent(ctx); p != "src" {
		t.Errorf("parent %q", p)
	}
	if _, err := th.Fork(ctx, 2, "copy"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("fork onto an existing thread: %v", err)
	}
	if _, err := th.Fork(ctx, 99, ""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("fork past the end: %v", err)
	}
	x := turn(t, th, "", conv("user", "U1", "assistant", "A1", "user", "other")...)
	if x.ForkedFrom() != "src" {
		t.Errorf("history after a library fork: %s", x.Thread())
	}
}
