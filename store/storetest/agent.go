package storetest

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// AgentThread returns the first n messages of a synthetic agent transcript,
// the same for the same n: a system prompt and a goal, then tool calls
// reading files with their 1-4 KB results (every line naming a file and a
// function), and a user turn every 20 steps. The events are message events
// with no time or token count: callers set what their store and benchmark
// need. It is the thread of the root package's cold-start, auto-recall and
// window benchmarks, of the backends' durable-append benchmark (issue 19's
// workload) and of store/inmem's search differential tests.
func AgentThread(n int) []store.Event {
	rng := rand.New(rand.NewPCG(19, uint64(n)))
	var evs []store.Event
	add := func(m message.Message) {
		evs = append(evs, store.Event{Kind: store.KindMessage, Message: &m})
	}
	add(message.NewText(message.System, "You are an agent."))
	add(message.NewText(message.User, "Goal: fix INV-4401."))
	for i := 0; len(evs) < n; i++ {
		if i%20 == 19 {
			add(message.NewText(message.User, fmt.Sprintf("Now look at INV-%d too.", 4000+i)))
		}
		id := fmt.Sprintf("c%d", i)
		add(message.NewToolCalls(fmt.Sprintf("step %d", i), message.Part{ToolCallID: id, ToolName: "read_file", Arguments: fmt.Sprintf(`{"path":"src/f%d.go"}`, i)}))
		var body strings.Builder
		for size := 1024 + rng.IntN(3072); body.Len() < size; {
			fmt.Fprintf(&body, "src/f%d.go:%d: func F%d(ctx context.Context) error { return nil }\n", i, body.Len(), rng.IntN(1000))
		}
		add(message.NewToolResult(id, body.String()))
	}
	return evs[:n]
}
