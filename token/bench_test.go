package token

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
)

// thread generates a deterministic agent thread of n messages: user turns,
// assistant text and tool calls, tool results of code and logs.
func thread(n int) []message.Message {
	r := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the window never exceeds the budget counting system prompt tool schemas and images " +
		"func main return err nil if for range go test ./... compaction observation thread tenant seq ref " +
		"Mneme keeps every message durably 42 1024 3.14 {\"path\":\"a.go\"} 日本語 émigré ✓")
	text := func(k int) string {
		var b strings.Builder
		for i := range k {
			if i > 0 {
				b.WriteByte(' ')
				if r.IntN(12) == 0 {
					b.WriteByte('\n')
				}
			}
			b.WriteString(words[r.IntN(len(words))])
		}
		return b.String()
	}
	msgs := make([]message.Message, 0, n)
	for i := 0; len(msgs) < n; i++ {
		switch i % 4 {
		case 0:
			msgs = append(msgs, message.NewText(message.User, text(10+r.IntN(60))))
		case 1:
			id := fmt.Sprintf("call_%d", i)
			msgs = append(msgs, message.NewToolCalls(text(r.IntN(30)),
				message.Part{ToolCallID: id, ToolName: "read_file", Arguments: fmt.Sprintf(`{"path":"pkg/file%d.go","limit":%d}`, i, 200)}))
		case 2:
			msgs = append(msgs, message.NewToolResult(fmt.Sprintf("call_%d", i-1), text(50+r.IntN(400))))
		case 3:
			msgs = append(msgs, message.NewText(message.Assistant, text(20+r.IntN(120))))
		}
	}
	return msgs
}

// BenchmarkCount measures counting throughput on the corpus, per counter.
func BenchmarkCount(b *testing.B) {
	texts := corpus(b)
	var all strings.Builder
	for _, s := range texts {
		all.WriteString(s)
		all.WriteByte('\n')
	}
	text := all.String()
	for _, name := range []string{O200kBase, Cl100kBase, "claude", Conservative} {
		b.Run(name, func(b *testing.B) {
			c, _ := Get(name)
			tokens := c.Count(text)
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			for b.Loop() {
				c.Count(text)
			}
			b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkThreadRecount counts a 10,000-message thread through a fresh
// Cache, then again, and reports the second pass's cost as a fraction of
// the first (docs/design.md: the per-call cost grows with the new messages, not
// with the thread). "ref" keys by log ref; "content" derives keys from a
// hash of each message.
func BenchmarkThreadRecount(b *testing.B) {
	msgs := thread(10_000)
	c, _ := Get(O200kBase)
	for _, mode := range []string{"ref", "content"} {
		b.Run(mode, func(b *testing.B) {
			keys := make([]string, len(msgs))
			if mode == "ref" {
				for i := range keys {
					keys[i] = fmt.Sprintf("thread-1/%d", i+1)
				}
			}
			var first, second time.Duration
			var tokens int
			for b.Loop() {
				cache := NewCache()
				start := time.Now()
				tokens = 0
				for i, m := range msgs {
					tokens += cache.MessageTokens(c, keys[i], m)
				}
				mid := time.Now()
				for i, m := range msgs {
					cache.MessageTokens(c, keys[i], m)
				}
				first += mid.Sub(start)
				second += time.Since(mid)
			}
			n := float64(b.N)
			b.ReportMetric(first.Seconds()*1e3/n, "first-ms")
			b.ReportMetric(second.Seconds()*1e3/n, "second-ms")
			b.ReportMetric(second.Seconds()/first.Seconds(), "second/first")
			b.ReportMetric(float64(tokens), "thread-tokens")
		})
	}
}
