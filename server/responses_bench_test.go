package server_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// The Responses route's overhead, side by side with direct calls to the
// same fake upstream, on the workload of BenchmarkProxyLatency: a 48-item
// tool-heavy history resent whole, cycleTurns turns per thread.
//
//	go test ./server/ -run '^$' -bench ResponsesLatency -benchtime 2000x

// responsesConversation is one client's resend history as Responses items.
type responsesConversation struct {
	items  []map[string]any
	thread string
	turn   int
}

func baseResponsesHistory() []map[string]any {
	var items []map[string]any
	for _, m := range baseHistory()[1:] { // the system message is the instructions
		switch m["role"] {
		case "user":
			items = append(items, map[string]any{"role": "user", "content": m["content"]})
		case "assistant":
			for _, c := range m["tool_calls"].([]any) {
				fn := c.(map[string]any)["function"].(map[string]any)
				items = append(items, map[string]any{"type": "function_call", "call_id": c.(map[string]any)["id"], "name": fn["name"], "arguments": fn["arguments"]})
			}
		case "tool":
			items = append(items, map[string]any{"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
		}
	}
	return items
}

func (c *responsesConversation) next() []byte {
	if c.turn%cycleTurns == 0 {
		c.items = append(baseResponsesHistory(), map[string]any{"role": "user", "content": "Go on."})
		c.thread = fmt.Sprintf("bench-responses-%d", cycleSeq.Add(1))
	}
	c.turn++
	b, _ := json.Marshal(map[string]any{
		"model": "gpt-4o-mini", "store": false,
		"instructions": "You are a coding agent working in a Go repository.", "input": c.items,
	})
	return b
}

func (c *responsesConversation) reply(body []byte) error {
	var r struct {
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(body, &r); err != nil || len(r.Output) == 0 {
		return fmt.Errorf("bad reply %q: %v", body, err)
	}
	for _, it := range r.Output {
		var item map[string]any
		if err := json.Unmarshal(it, &item); err != nil {
			return err
		}
		c.items = append(c.items, item)
	}
	c.items = append(c.items, map[string]any{"role": "user", "content": fmt.Sprintf("Next, turn %d.", c.turn)})
	return nil
}

// BenchmarkResponsesLatency alternates one direct and one proxied
// Responses request of the same body and reports both latencies' p50 and
// p99, the overhead at p50 and the ratios.
func BenchmarkResponsesLatency(b *testing.B) {
	for _, st := range benchStores(b) {
		b.Run(st.name, func(b *testing.B) {
			h := startServer(b, harnessOpts{budget: 64000, dsn: st.dsn})
			direct, proxied := h.llm.URL()+"/v1/responses", h.url+"/v1/responses"
			var dd, dp []time.Duration
			var conv responsesConversation
			items := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				body := conv.next()
				items += len(conv.items)
				if _, d, err := do(direct, "", body); err != nil {
					b.Fatal(err)
				} else {
					dd = append(dd, d)
				}
				rb, d, err := do(proxied, conv.thread, body)
				if err != nil {
					b.Fatal(err)
				}
				dp = append(dp, d)
				if err := conv.reply(rb); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			d50, p50 := percentile(dd, 0.5), percentile(dp, 0.5)
			d99, p99 := percentile(dd, 0.99), percentile(dp, 0.99)
			b.ReportMetric(d50, "direct-p50-µs")
			b.ReportMetric(p50, "mneme-p50-µs")
			b.ReportMetric(d99, "direct-p99-µs")
			b.ReportMetric(p99, "mneme-p99-µs")
			b.ReportMetric(p50-d50, "overhead-p50-µs")
			b.ReportMetric(p50/d50, "p50-ratio")
			b.ReportMetric(p99/d99, "p99-ratio")
			b.ReportMetric(float64(items)/float64(b.N), "items/req")
		})
	}
}
