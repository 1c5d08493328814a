package window

import (
	"fmt"
	"testing"

	"github.com/mnemehq/mneme/message"
)

// BenchmarkBuildPerCall: what applying one step and building the window
// costs on a window of 100 and of 10,000 messages (no compaction: the
// budget holds them all), for the three ways a step meets Build:
//
//	call-window:        the call, then Build before its result (the repair
//	                    shows a synthetic result; the next call closes it)
//	call-window-result: the same, and then the real result, built again
//	call-result:        call and result, then Build (nothing to repair)
//	request-recall:     a user request, a recalled block before it, Build
//
// A call should cost the same at both sizes: O(what it adds), not
// O(window). call-window-result is the exception by design: the result
// takes a slot a handed-out window shows, so the messages move to a new
// array once per step (what Build's copy of the window cost before).
//
//	go test -run '^$' -bench BuildPerCall ./window/
func BenchmarkBuildPerCall(b *testing.B) {
	for _, pattern := range []string{"call-window", "call-window-result", "call-result", "request-recall"} {
		for _, n := range []int{100, 10_000} {
			b.Run(fmt.Sprintf("%s/%d", pattern, n), func(b *testing.B) {
				base := newDriver(b, DefaultPolicy(), 10_000_000)
				base.add(message.NewText(message.System, "You are an agent."), message.NewText(message.User, "Goal: fix INV-4401."))
				for i := 0; base.st.windowMessages() < n; i++ {
					id := fmt.Sprintf("c%d", i)
					base.add(message.NewToolCalls("", message.Part{ToolCallID: id, ToolName: "grep", Arguments: "{}"}),
						message.NewToolResult(id, "src/a.go:1: match"))
				}
				var d *driver
				// The window grows by a step a call: every 100 calls it
				// starts again from n messages (untimed), so that the
				// figure is the cost at n.
				fresh := func() {
					d = newDriver(b, DefaultPolicy(), 10_000_000)
					d.add(message.NewText(message.System, "You are an agent."), message.NewText(message.User, "Goal: fix INV-4401."))
					for _, ev := range base.log[2:] {
						d.add(*ev.Message)
					}
					if _, err := d.st.Build(d.req); err != nil {
						b.Fatal(err)
					}
				}
				fresh()
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if i%100 == 99 {
						b.StopTimer()
						fresh()
						b.StartTimer()
					}
					if pattern == "request-recall" {
						d.add(message.NewText(message.User, fmt.Sprintf("where is INV-%d?", i)))
						d.append(recallNote(d.st.LastSeq(), "INV-4401 is in src/a.go"))
						if _, err := d.st.Build(d.req); err != nil {
							b.Fatal(err)
						}
						continue
					}
					id := fmt.Sprintf("x%d", i)
					d.add(message.NewToolCalls("", message.Part{ToolCallID: id, ToolName: "grep", Arguments: "{}"}))
					if pattern == "call-result" {
						d.add(message.NewToolResult(id, "src/a.go:1: match"))
					}
					if _, err := d.st.Build(d.req); err != nil {
						b.Fatal(err)
					}
					if pattern == "call-window-result" {
						d.add(message.NewToolResult(id, "src/a.go:1: match"))
						if _, err := d.st.Build(d.req); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
