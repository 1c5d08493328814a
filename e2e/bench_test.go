package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
)

// BenchmarkEngineBackends (issue 7) measures the engine's throughput on
// SQLite beside PostgreSQL, in process through mneme.Open:
//
//   - append: Thread.Append of one message at a time to one growing thread
//     (messages/s);
//
//   - append-parallel: the same from GOMAXPROCS×4 goroutines, each on its
//     own thread (messages/s), the load of several agents or replicas;
//
//   - window: Thread.AppendWindow of one message and the window after it,
//     what the proxy does per request, on a growing thread with a 16k
//     budget, so compactions (extractive, no model) happen along the way
//     (windows/s).
//
//     MNEME_TEST_POSTGRES=postgres://... go test ./e2e -run '^$' -bench EngineBackends
func BenchmarkEngineBackends(b *testing.B) {
	backends := []struct {
		name string
		dsn  func(b *testing.B) string
	}{
		{"sqlite", func(b *testing.B) string { return "sqlite:" + filepath.Join(b.TempDir(), "bench.db") }},
		{"postgres", func(b *testing.B) string { return postgresDSN(b) }},
	}
	ctx := context.Background()
	for _, be := range backends {
		b.Run(be.name+"/append", func(b *testing.B) {
			th := openBench(b, be.dsn(b)).Thread(tenant, "bench")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := th.Append(ctx, benchMessage(i)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "messages/s")
		})
		b.Run(be.name+"/append-parallel", func(b *testing.B) {
			m := openBench(b, be.dsn(b))
			var next atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				th := m.Thread(tenant, fmt.Sprintf("bench-%d", next.Add(1)))
				i := 0
				for pb.Next() {
					if _, err := th.Append(ctx, benchMessage(i)); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "messages/s")
		})
		b.Run(be.name+"/window", func(b *testing.B) {
			th := openBench(b, be.dsn(b)).Thread(tenant, "bench")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := th.AppendWindow(ctx, []message.Message{benchMessage(i)}, mneme.WindowOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "windows/s")
		})
	}
}

// openBench opens an Engine on store d with a 16k-token budget.
func openBench(b *testing.B, d string) *mneme.Engine {
	b.Helper()
	p := mneme.DefaultPolicy()
	p.BudgetTokens = 16000
	p.ReserveOutputTokens = 1000
	p.MinTailTokens = 2000
	m, err := mneme.Open(context.Background(), mneme.Config{DSN: d, Policy: &p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

// benchMessage returns message i of an agent's session, in cycles of
// four: a user turn, an assistant tool call, its result (a few hundred
// tokens), the assistant's answer. Ids are unique along the thread.
func benchMessage(i int) message.Message {
	c := i / 4
	id := fmt.Sprintf("call_%d", c)
	switch i % 4 {
	case 0:
		return message.NewText(message.User, fmt.Sprintf("[c01 u%04d] Customer asks about order ORD-1-%04d shipped to warehouse_%d; the invoice INV-%05d shows %d.%02d EUR. They want a refund if it is late again.", c, c, c%7, 10000+c, 10+c%90, c%100))
	case 1:
		return message.Message{Role: message.Assistant, Parts: []message.Part{
			{Type: message.Text, Text: "Looking it up."},
			{Type: message.ToolCall, ToolCallID: id, ToolName: "lookup", Arguments: fmt.Sprintf(`{"q":"ORD-1-%04d"}`, c)},
		}}
	case 2:
		var b strings.Builder
		for j := range 12 {
			fmt.Fprintf(&b, "event_%d: ORD-1-%04d scanned at hub_%d on day %d (status code %d)\n", j, c, j*3+c%5, c+j, 200+j)
		}
		return message.Message{Role: message.Tool, Parts: []message.Part{
			{Type: message.ToolResult, ToolCallID: id, Content: []message.Part{{Type: message.Text, Text: b.String()}}},
		}}
	}
	return message.NewText(message.Assistant, fmt.Sprintf("Order ORD-1-%04d is on its way; refund INV-%05d if late.", c, 10000+c))
}
