package mneme_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/token"
)

// fill writes n messages of a tool-heavy session straight to the store,
// with their token counts as the engine's Append records them.
func fill(b *testing.B, st store.Store, thread string, n int) {
	ctx := context.Background()
	c, err := token.Get(token.O200kBase)
	if err != nil {
		b.Fatal(err)
	}
	var evs []store.Event
	add := func(m message.Message) {
		evs = append(evs, store.Event{Kind: store.KindMessage, Message: &m, At: time.Now(), Tokens: token.MessageTokens(c, m)})
	}
	add(message.NewText(message.System, "You are an agent."))
	add(message.NewText(message.User, "Goal: fix INV-4401."))
	for i := 0; len(evs) < n; i++ {
		id := fmt.Sprintf("c%d", i)
		add(message.NewToolCalls("step", message.Part{ToolCallID: id, ToolName: "grep", Arguments: `{"q":"x"}`}))
		add(message.NewToolResult(id, strings.Repeat(fmt.Sprintf("src/f%d.go:1: match\n", i), 10)))
	}
	for i := 0; i < len(evs); i += 500 {
		if _, err := st.Append(ctx, "default", thread, int64(i), evs[i:min(i+500, len(evs))]); err != nil {
			b.Fatal(err)
		}
	}
}

func benchWindow(b *testing.B, m *mneme.Engine, thread string) time.Duration {
	ctx := context.Background()
	th := m.Thread("default", thread)
	if _, err := th.Window(ctx, mneme.WindowOptions{}); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("x%d", i)
		if _, err := th.Append(ctx, message.NewToolCalls("", message.Part{ToolCallID: id, ToolName: "grep", Arguments: "{}"})); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := th.Window(ctx, mneme.WindowOptions{}); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	return total
}

// BenchmarkWindowAfterAppend: the cost of Window after one new message, on
// a 100-message and on a 10,000-message thread, side by side (SQLite). The
// ratio must stay under 2: a call costs O(new messages), not O(thread).
func BenchmarkWindowAfterAppend(b *testing.B) {
	dir := b.TempDir()
	m := openSQLite(b, filepath.Join(dir, "b.db"), nil)
	fill(b, m.Store(), "small", 100)
	fill(b, m.Store(), "large", 10000)
	b.ResetTimer()
	small := benchWindow(b, m, "small")
	large := benchWindow(b, m, "large")
	b.StopTimer()
	b.ReportMetric(float64(small.Microseconds())/float64(b.N), "µs/window@100")
	b.ReportMetric(float64(large.Microseconds())/float64(b.N), "µs/window@10k")
	b.ReportMetric(float64(large)/float64(small), "ratio")
}

// BenchmarkFirstBuild10k: the first window of a 10,000-message thread in a
// fresh process state (after a restart): the whole log is read and folded.
func BenchmarkFirstBuild10k(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "b.db")
	m := openSQLite(b, path, nil)
	fill(b, m.Store(), "large", 10000)
	// count once, as appends through the engine would have
	if _, err := m.Thread("default", "large").Window(context.Background(), mneme.WindowOptions{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fresh := openSQLite(b, path, nil)
		if _, err := fresh.Thread("default", "large").Window(context.Background(), mneme.WindowOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/first-build")
}
