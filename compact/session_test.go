package compact_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/message"
)

// session is a generated agent session: its messages as entries, and the
// facts planted in them that any observation must keep verbatim.
type session struct {
	Entries []compact.Entry
	Facts   []string // identifiers, numbers, paths, URLs, error codes, user decisions
}

// genSession generates a deterministic session of turns turns. Each turn:
// sometimes a user message (with a planted decision or identifier), an
// assistant step with a tool call, its result (toolLines lines of code or
// log, sometimes with an error line), and an assistant remark (sometimes
// with a planted path and number).
func genSession(seed uint64, turns, toolLines int) session {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var s session
	seq := int64(0)
	at := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	add := func(m message.Message) {
		seq++
		at = at.Add(time.Duration(20+r.IntN(90)) * time.Second)
		s.Entries = append(s.Entries, compact.Entry{Seq: seq, At: at, Ref: fmt.Sprintf("ref%04d", seq), Msg: &m})
	}
	fillers := []string{
		"Please keep going with the plan as discussed.",
		"Thanks, that looks reasonable so far.",
		"Be careful with the existing behaviour, people rely on it.",
	}
	tools := []string{"read_file", "grep", "run_tests", "list_dir"}
	for i := 0; i < turns; i++ {
		switch i % 7 {
		case 0:
			ticket := fmt.Sprintf("INV-%d", 4000+r.IntN(5000))
			s.Facts = append(s.Facts, ticket)
			add(message.NewText(message.User, fmt.Sprintf("%s Also look at ticket %s when you can.", fillers[r.IntN(len(fillers))], ticket)))
		case 3:
			dec := fmt.Sprintf("Decision: we keep the retry limit at %d and use region eu-west-%d for ORD-%05d.", 3+r.IntN(9), 1+r.IntN(3), r.IntN(100000))
			s.Facts = append(s.Facts, dec)
			// A long message: the decision must survive the cut.
			long := strings.Repeat(fillers[r.IntN(len(fillers))]+" ", 40)
			add(message.NewText(message.User, long+dec+" "+long))
		case 5:
			q := fmt.Sprintf("Is the flag enable_%d_fast still needed?", r.IntN(900))
			s.Facts = append(s.Facts, q)
			add(message.NewText(message.User, q))
		}
		id := fmt.Sprintf("call_%d", i)
		tool := tools[r.IntN(len(tools))]
		add(message.NewToolCalls("", message.Part{ToolCallID: id, ToolName: tool, Arguments: fmt.Sprintf(`{"path":"src/pkg%d/file_%d.go"}`, i%5, i)}))
		var body strings.Builder
		for l := 0; l < toolLines; l++ {
			fmt.Fprintf(&body, "src/pkg%d/file_%d.go:%d: \tv%d := compute(ctx, items[%d]) // value %d\n", i%5, i, l+1, l, l, r.IntN(1000))
			if l == toolLines/2 && i%4 == 1 {
				code := fmt.Sprintf("E%d", 1000+r.IntN(9000))
				s.Facts = append(s.Facts, code)
				fmt.Fprintf(&body, "Error: connection refused to db-%d.internal:5433 (code %s)\n", r.IntN(9), code)
			}
		}
		add(message.NewToolResult(id, body.String()))
		if i%3 == 2 {
			path := fmt.Sprintf("src/billing/invoice_%d.go", r.IntN(100))
			num := fmt.Sprintf("%d.%02d", r.IntN(50), r.IntN(100))
			url := fmt.Sprintf("https://ci.example.com/builds/%d", 80000+r.IntN(9999))
			s.Facts = append(s.Facts, path, num, url)
			add(message.NewText(message.Assistant, fmt.Sprintf("I looked around. The tax rate in %s is %s; see %s for the failing build. Next I will fix it.", path, num, url)))
		}
	}
	return s
}

// segments cuts entries into compaction-sized runs, as the engine would.
func segments(entries []compact.Entry, n int) []compact.Segment {
	var out []compact.Segment
	for i := 0; i < len(entries); i += n {
		part := entries[i:min(i+n, len(entries))]
		out = append(out, compact.Segment{From: part[0].Seq, To: part[len(part)-1].Seq, Entries: part})
	}
	return out
}
