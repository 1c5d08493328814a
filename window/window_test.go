package window

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// charSizer counts a token per 4 bytes plus a per-message overhead: not a
// real tokenizer, but consistent, which is all the pipeline relies on.
type charSizer struct{}

func (charSizer) Message(_ string, m message.Message) int {
	n := 4
	for _, p := range m.Parts {
		n += 2
		if p.Type == message.ToolCall {
			n += 3
		}
	}
	return n + len(m.PlainText())/4
}
func (charSizer) Text(s string) int { return len(s)/4 + 1 }

// driver does what the mneme package does: log events, apply them, compact
// when over the trigger, build.
type driver struct {
	t     testing.TB
	st    *State
	log   []store.Event
	req   Request
	ref   int
	comps int
}

func newDriver(t testing.TB, p Policy, budget int) *driver {
	st, err := NewState(p, budget, charSizer{})
	if err != nil {
		t.Fatal(err)
	}
	return &driver{t: t, st: st, req: Request{SystemTokens: 0, ToolsTokens: 30, RecallTokens: 60}}
}

func (d *driver) append(evs ...store.Event) {
	for _, ev := range evs {
		ev.Seq = int64(len(d.log) + 1)
		ev.At = time.Unix(1_700_000_000+ev.Seq, 0)
		if ev.Kind == store.KindMessage {
			d.ref++
			ev.Ref = fmt.Sprintf("m_%06d", d.ref)
		}
		d.log = append(d.log, ev)
		if err := d.st.Apply(ev); err != nil {
			d.t.Fatal(err)
		}
	}
}

func (d *driver) add(ms ...message.Message) {
	for i := range ms {
		m := ms[i]
		d.append(store.Event{Kind: store.KindMessage, Message: &m})
	}
}

func (d *driver) window() (*Window, error) {
	if d.st.OverTrigger(d.req) {
		p, err := d.st.Plan(d.req)
		if err != nil {
			return nil, err
		}
		evs, err := p.Events(CompactedData{})
		if err != nil {
			d.t.Fatal(err)
		}
		if len(evs) > 0 {
			d.comps++
		}
		d.append(evs...)
	}
	return d.st.Build(d.req)
}

// genThread drives a random agent session through d, calling check on every
// window. It plants the defects real logs have: dangling calls, orphan
// results, huge tool outputs, parallel calls.
func genThread(d *driver, rng *rand.Rand, steps int, check func(*Window)) {
	tools := []string{"read_file", "grep", "run_tests", "fetch"}
	d.add(message.NewText(message.System, "You are a coding agent."),
		message.NewText(message.User, "Goal: fix INV-4401 in src/app/main.go"))
	call := 0
	win := func() {
		w, err := d.window()
		if err != nil {
			d.t.Fatalf("window: %v", err)
		}
		check(w)
	}
	win()
	for s := 0; s < steps; s++ {
		switch r := rng.IntN(10); {
		case r < 2:
			d.add(message.NewText(message.User, fmt.Sprintf("user says %d: %s", s, strings.Repeat("please ", rng.IntN(30)))))
			win()
		case r < 9:
			n := 1 + rng.IntN(3)
			var calls []message.Part
			for i := 0; i < n; i++ {
				call++
				calls = append(calls, message.Part{ToolCallID: fmt.Sprintf("call_%d", call), ToolName: tools[rng.IntN(len(tools))], Arguments: `{"path":"a.go"}`})
			}
			d.add(message.NewToolCalls("thinking "+strings.Repeat("x", rng.IntN(80)), calls...))
			for i, c := range calls {
				if rng.IntN(25) == 0 && i == len(calls)-1 {
					continue // dangling call
				}
				size := 20 + rng.IntN(400)
				if rng.IntN(15) == 0 {
					size = 6000 + rng.IntN(6000) // evicted
				}
				var b strings.Builder
				for b.Len() < size {
					fmt.Fprintf(&b, "line %d of %s output\n", b.Len(), c.ToolName)
				}
				d.add(message.NewToolResult(c.ToolCallID, b.String()))
			}
			if rng.IntN(30) == 0 {
				d.add(message.NewToolResult("call_nobody", "an orphan result"))
			}
			win()
		default:
			d.add(message.NewText(message.Assistant, "done with step "+fmt.Sprint(s)))
		}
	}
}

// checkInvariants verifies I2, I3 and I4 on a window independently of the
// state's own accounting.
func checkInvariants(t *testing.T, d *driver, w *Window) {
	t.Helper()
	if got, want := d.st.CurrentRequest(), scanCurrentRequest(d.st); got != want {
		t.Fatalf("CurrentRequest %+v, the last turn-opening message kept is %+v", got, want)
	}
	// I3: recount the window from its messages.
	total := d.req.SystemTokens + d.req.ToolsTokens + ReplyPrimer
	if w.NeedsRecall {
		total += d.req.RecallTokens
	}
	for _, m := range w.Messages {
		total += charSizer{}.Message("", m)
	}
	if total > d.st.Budget() {
		t.Fatalf("I3: window is %d tokens, budget %d", total, d.st.Budget())
	}
	if total != w.Usage.Total {
		t.Fatalf("usage says %d tokens, recount says %d", w.Usage.Total, total)
	}
	// I4: every result follows its call, every call is answered before the
	// next non-result message.
	open := map[string]bool{}
	known := map[string]bool{}
	for i, m := range w.Messages {
		if !m.IsToolResult() && len(open) > 0 {
			t.Fatalf("I4: message %d (%s) comes while calls %v are unanswered", i, m.Role, open)
		}
		for _, p := range m.Parts {
			switch p.Type {
			case message.ToolResult:
				if !open[p.ToolCallID] {
					t.Fatalf("I4: result for %s at %d has no open call (known=%v)", p.ToolCallID, i, known[p.ToolCallID])
				}
				delete(open, p.ToolCallID)
			case message.ToolCall:
				open[p.ToolCallID] = true
				known[p.ToolCallID] = true
			}
		}
	}
	if len(open) > 0 {
		t.Fatalf("I4: calls %v end the window unanswered", open)
	}
	checkCurrentTurnLive(t, d, w)
	// I2: every logged message is in the window exactly once, in one form.
	forms := d.st.FormsOf()
	var sb strings.Builder
	for _, m := range w.Messages {
		if m.IsToolResult() {
			sb.WriteString(m.PlainText())
		}
	}
	joined := sb.String()
	shown := 0
	for _, ev := range d.log {
		if ev.Kind != store.KindMessage || ev.Seq > d.st.LastSeq() {
			continue
		}
		f, ok := forms[ev.Seq]
		if !ok {
			t.Fatalf("I2: seq %d is in no form", ev.Seq)
		}
		switch f {
		case Masked, Evicted:
			if !strings.Contains(joined, ev.Ref) {
				t.Fatalf("I2: %s seq %d: its ref %s is not in the window", f, ev.Seq, ev.Ref)
			}
			shown++
		case Raw:
			shown++
		case Dropped:
			if !strings.Contains(ev.Message.PlainText(), "orphan") {
				t.Fatalf("I2: seq %d dropped but it is not an orphan", ev.Seq)
			}
		}
	}
	mem := 0
	if len(d.st.Blocks()) > 0 {
		mem = 1
	}
	if want := shown + mem + len(d.st.recalls) + w.Usage.Repaired + syntheticPosts(d.st); len(w.Messages) != want {
		t.Fatalf("I2: window has %d messages, want %d shown + %d memory + %d recalled + %d repairs", len(w.Messages), shown, mem, len(d.st.recalls), w.Usage.Repaired)
	}
}

func syntheticPosts(s *State) int {
	n := 0
	for _, it := range s.tail {
		n += len(it.Post)
	}
	return n
}

func TestPropertyInvariants(t *testing.T) {
	cases := 1500
	if testing.Short() || raceEnabled {
		cases = 250
	}
	windows := 0
	for seed := 0; seed < cases; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		p := DefaultPolicy()
		p.Strategy = []Strategy{Mask, Archive}[seed%2]
		p.MinTailTokens = rng.IntN(3000)
		p.MinTailTurns = 1 + rng.IntN(3)
		p.MaskKeepPerTool = rng.IntN(4)
		p.EvictOverTokens = 500 + rng.IntN(3000)
		budget := 6000 + rng.IntN(20000)
		d := newDriver(t, p, budget)
		genThread(d, rng, 20+rng.IntN(100), func(w *Window) {
			windows++
			checkInvariants(t, d, w)
		})
	}
	t.Logf("%d threads, %d windows checked", cases, windows)
}

func encode(ms []message.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		b, _ := json.Marshal(m)
		out[i] = string(b)
	}
	return out
}

func TestPrefixStableBetweenCompactions(t *testing.T) {
	p := DefaultPolicy()
	d := newDriver(t, p, 40000)
	rng := rand.New(rand.NewPCG(1, 2))
	var prev []string
	calls, breaks, comps := 0, 0, 0
	genThread(d, rng, 300, func(w *Window) {
		calls++
		cur := encode(w.Messages)
		compacted := d.comps != comps
		comps = d.comps
		if prev != nil && !compacted {
			if len(cur) < len(prev) || !reflect.DeepEqual(cur[:len(prev)], prev) {
				breaks++
				t.Errorf("call %d: prefix changed without a compaction", calls)
			}
		}
		prev = cur
	})
	if comps == 0 || comps > calls/10 {
		t.Fatalf("%d compactions over %d calls: want some, and few", comps, calls)
	}
	t.Logf("%d calls, %d compactions, %d prefix breaks outside compactions", calls, comps, breaks)
}

func TestReplayGivesTheSameWindow(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		d := newDriver(t, DefaultPolicy(), 12000)
		var last *Window
		genThread(d, rand.New(rand.NewPCG(seed, 3)), 150, func(w *Window) { last = w })
		fresh, err := NewState(DefaultPolicy(), 12000, charSizer{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range d.log {
			if err := fresh.Apply(ev); err != nil {
				t.Fatal(err)
			}
		}
		w, err := fresh.Build(d.req)
		if err != nil {
			t.Fatal(err)
		}
		// the live window may have been built before the last messages
		live, _ := d.st.Build(d.req)
		if !reflect.DeepEqual(encode(w.Messages), encode(live.Messages)) || w.Usage.Total != live.Usage.Total {
			t.Fatalf("seed %d: replayed window differs from the live one", seed)
		}
		_ = last
	}
}

func TestBudgetErrors(t *testing.T) {
	p := DefaultPolicy()
	p.EvictOverTokens = 100
	t.Run("head", func(t *testing.T) {
		d := newDriver(t, p, 2000)
		d.add(message.NewText(message.System, strings.Repeat("rules ", 2000)), message.NewText(message.User, "hi"))
		_, err := d.window()
		var be *BudgetError
		if !errors.As(err, &be) || !strings.Contains(be.What, "head") || be.Need <= be.Budget {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("tools", func(t *testing.T) {
		d := newDriver(t, p, 2000)
		d.req.ToolsTokens = 5000
		d.add(message.NewText(message.User, "hi"))
		_, err := d.window()
		var be *BudgetError
		if !errors.As(err, &be) || !strings.Contains(be.What, "tool schemas") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("user message", func(t *testing.T) {
		d := newDriver(t, p, 2000)
		d.add(message.NewText(message.User, "goal"), message.NewText(message.Assistant, "ok"))
		logLen := len(d.log)
		d.add(message.NewText(message.User, strings.Repeat("huge ", 3000)))
		_, err := d.window()
		var be *BudgetError
		if !errors.As(err, &be) || !strings.Contains(be.What, "user") {
			t.Fatalf("got %v", err)
		}
		if len(d.log) != logLen+1 {
			t.Fatalf("a failed window wrote %d events", len(d.log)-logLen-1)
		}
	})
}

func TestEvictionKeepsRefAndPreview(t *testing.T) {
	p := DefaultPolicy()
	p.EvictOverTokens = 200
	p.PreviewLines = 4
	d := newDriver(t, p, 100000)
	d.add(message.NewText(message.User, "goal"),
		message.NewToolCalls("", message.Part{ToolCallID: "c1", ToolName: "read_file"}))
	var b strings.Builder
	for i := 0; i < 500; i++ {
		fmt.Fprintf(&b, "row %d\n", i)
	}
	b.WriteString("LAST-LINE")
	d.add(message.NewToolResult("c1", b.String()))
	w, err := d.window()
	if err != nil {
		t.Fatal(err)
	}
	got := w.Messages[len(w.Messages)-1].PlainText()
	ref := d.log[len(d.log)-1].Ref
	for _, want := range []string{"row 0\nrow 1", "LAST-LINE", ref, "mneme_read", "omitted"} {
		if !strings.Contains(got, want) {
			t.Fatalf("evicted preview lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "row 250") {
		t.Fatal("evicted preview kept the middle")
	}
	if !w.NeedsRecall || len(w.Usage.Evicted) != 0 && w.Usage.Evicted[0] != ref {
		t.Fatal("eviction not reported")
	}
	// the log keeps the body whole
	if d.log[len(d.log)-1].Message.PlainText() != b.String() {
		t.Fatal("log changed")
	}
}

func TestMaskPlaceholderFormat(t *testing.T) {
	p := DefaultPolicy()
	p.MaskKeepPerTool = 1
	d := newDriver(t, p, 100000)
	d.add(message.NewText(message.User, "goal"))
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("c%d", i)
		d.add(message.NewToolCalls("", message.Part{ToolCallID: id, ToolName: "grep"}), message.NewToolResult(id, fmt.Sprintf("match %d\nmore", i)))
	}
	pl, err := d.st.Plan(d.req)
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Mask) != 2 {
		t.Fatalf("masked %v, want the 2 older grep results", pl.Mask)
	}
	evs, _ := pl.Events(CompactedData{})
	d.append(evs...)
	w, _ := d.st.Build(d.req)
	got := w.Messages[2].Parts[0].Content[0].Text
	want := fmt.Sprintf("[grep result %s: match 0]", d.log[2].Ref)
	if !strings.HasPrefix(got, want) {
		t.Fatalf("placeholder %q, want prefix %q", got, want)
	}
}

func TestThresholdJSON(t *testing.T) {
	for in, want := range map[string]Threshold{
		`0.75`: Frac(0.75), `1`: Frac(1), `60000`: Tokens(60000), `"75%"`: Frac(0.75),
		`"200 messages"`: {Messages: 200}, `"5000 tokens"`: Tokens(5000),
	} {
		var th Threshold
		if err := json.Unmarshal([]byte(in), &th); err != nil || th != want {
			t.Errorf("%s: got %+v, %v", in, th, err)
		}
	}
	for _, bad := range []string{`0`, `-1`, `1.5`, `"lots"`, `"0 messages"`, `true`} {
		var th Threshold
		if err := json.Unmarshal([]byte(bad), &th); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestPolicyValidateNamesField(t *testing.T) {
	for field, mut := range map[string]func(*Policy){
		"target":             func(p *Policy) { p.Target = Frac(0.9) },
		"strategy":           func(p *Policy) { p.Strategy = "shred" },
		"min_tail_turns":     func(p *Policy) { p.MinTailTurns = 0 },
		"evict_over_tokens":  func(p *Policy) { p.EvictOverTokens = 1 },
		"mask_keep_per_tool": func(p *Policy) { p.MaskKeepPerTool = -1 },
	} {
		p := DefaultPolicy()
		mut(&p)
		var fe *FieldError
		if err := p.Validate(); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
	if _, err := DefaultPolicy().MergeJSON([]byte(`{"strategy":"archive","trigger":"80%"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := DefaultPolicy().MergeJSON([]byte(`{"stratgy":"archive"}`)); err == nil {
		t.Fatal("unknown field accepted")
	}
}

// checkCurrentTurnLive verifies the current turn's rule: the last logged
// message that opens a turn is in the window verbatim, as a message of its
// own (not only quoted in the memory block).
func checkCurrentTurnLive(t *testing.T, d *driver, w *Window) {
	t.Helper()
	var cur *message.Message
	for i := len(d.log) - 1; i >= 0; i-- {
		if m := d.log[i].Message; d.log[i].Kind == store.KindMessage && d.log[i].Seq <= d.st.LastSeq() && m.StartsTurn() {
			cur = m
			break
		}
	}
	if cur == nil {
		return
	}
	want, _ := json.Marshal(cur)
	for _, m := range w.Messages {
		if b, _ := json.Marshal(m); string(b) == string(want) {
			return
		}
	}
	t.Fatalf("the current turn's user message %q is not live in the window", cur.PlainText())
}

// A turn far larger than the budget (one user message, then hundreds of
// tool steps) keeps its user message live through every compaction: older
// steps of the turn leave (masked, catalogued or observed), the message
// stays in place, the window fits and pairs hold; with or without a pinned
// head and earlier turns before it.
func TestCurrentTurnStaysLive(t *testing.T) {
	for _, strategy := range []Strategy{Mask, Archive, Observe} {
		for _, pin := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pin=%v", strategy, pin), func(t *testing.T) {
				p := DefaultPolicy()
				p.Strategy = strategy
				p.PinHead = pin
				p.MinTailTokens = 800
				d := newDriver(t, p, 8000)
				d.add(message.NewText(message.System, "You are a coding agent."),
					message.NewText(message.User, "Goal: fix INV-4401"),
					message.NewText(message.Assistant, "On it."),
					message.NewText(message.User, "Current request: rename OrderTotal everywhere."))
				kept := 0
				for n := 0; n < 200; n++ {
					id := fmt.Sprintf("call_%d", n)
					d.add(message.NewToolCalls(fmt.Sprintf("step %d", n), message.Part{ToolCallID: id, ToolName: "grep", Arguments: "{}"}),
						message.NewToolResult(id, strings.Repeat(fmt.Sprintf("hit %d of grep output\n", n), 40)))
					before := len(d.log)
					w, err := d.window()
					if err != nil {
						t.Fatalf("step %d: %v", n, err)
					}
					checkInvariants(t, d, w)
					for _, ev := range d.log[before:] {
						var c CompactedData
						if ev.Kind == store.KindCompacted && json.Unmarshal(ev.Data, &c) == nil && len(c.Kept) > 0 {
							kept++
						}
					}
				}
				if d.comps < 5 || kept == 0 {
					t.Fatalf("%d compactions, %d past the current request: the turn never outgrew the budget", d.comps, kept)
				}
				t.Logf("%d compactions, %d of them past the current request (kept live)", d.comps, kept)
			})
		}
	}
}

// scanCurrentRequest is CurrentRequest by its definition: the last
// turn-opening message kept in the tail, else in the pinned head.
func scanCurrentRequest(s *State) *Item {
	for i := len(s.tail) - 1; i >= 0; i-- {
		if it := s.tail[i]; it.Form != Dropped && it.Msg.StartsTurn() {
			return it
		}
	}
	for i := len(s.head) - 1; i >= 0; i-- {
		if s.head[i].Msg.StartsTurn() {
			return s.head[i]
		}
	}
	return nil
}

// Windows share the state's rendered messages, the repair of calls still
// waiting for results included: a window handed out never changes, whatever
// the log brings next (a result for a repaired call, another call, a
// recalled block before the request, a mask, a cut), and each one is what
// a replay of the log gives. Windows are built at random points of random
// steps, between a step's results too.
func TestWindowsKeepTheirMessages(t *testing.T) {
	seeds := uint64(20)
	if testing.Short() || raceEnabled {
		seeds = 4
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 11))
		p := DefaultPolicy()
		p.Strategy = []Strategy{Mask, Archive}[seed%2]
		p.EvictOverTokens = 300
		d := newDriver(t, p, 4000+rng.IntN(8000))
		type kept struct {
			w    *Window
			msgs []message.Message // a copy of w.Messages as handed out
		}
		var all []kept
		win := func() {
			w, err := d.window()
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			checkInvariants(t, d, w)
			for _, f := range []Form{Evicted, Masked} {
				var want []string
				for _, it := range d.st.Tail() {
					if it.Form == f {
						want = append(want, it.Ref)
					}
				}
				if got := d.st.RefsByForm(f); !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d: RefsByForm(%s) = %v, the tail has %v", seed, f, got, want)
				}
			}
			if len(all)%25 == 0 {
				fresh, err := NewState(p, d.st.Budget(), charSizer{})
				if err != nil {
					t.Fatal(err)
				}
				for _, ev := range d.log {
					if err := fresh.Apply(ev); err != nil {
						t.Fatal(err)
					}
				}
				rw, err := fresh.Build(d.req)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(encode(rw.Messages), encode(w.Messages)) {
					t.Fatalf("seed %d, window %d: a replay of the log gives another window", seed, len(all))
				}
			}
			all = append(all, kept{w, slices.Clone(w.Messages)})
		}
		maybe := func() {
			for rng.IntN(3) == 0 {
				win() // sometimes twice in a row
			}
		}
		d.add(message.NewText(message.System, "You are a coding agent."),
			message.NewText(message.User, "Goal: fix INV-4401"))
		call := 0
		for s := 0; s < 150; s++ {
			switch r := rng.IntN(10); {
			case r < 2:
				d.add(message.NewText(message.User, fmt.Sprintf("user says %d %s", s, strings.Repeat("please ", rng.IntN(20)))))
				if rng.IntN(2) == 0 {
					// A recalled block goes in before the request: shown
					// already when a window was built in between.
					seq := d.st.LastSeq()
					maybe()
					d.append(recallNote(seq, fmt.Sprintf("an old fact %d", s)))
				}
			case r < 3:
				d.add(message.NewText(message.Assistant, fmt.Sprintf("done with step %d", s)))
			default:
				var calls []message.Part
				for range 1 + rng.IntN(3) {
					call++
					calls = append(calls, message.Part{ToolCallID: fmt.Sprintf("call_%d", call), ToolName: "grep", Arguments: "{}"})
				}
				d.add(message.NewToolCalls("", calls...))
				maybe()
				// Results in any order; some never come.
				for _, i := range rng.Perm(len(calls)) {
					if rng.IntN(4) == 0 {
						continue
					}
					size := 20 + rng.IntN(200)
					if rng.IntN(10) == 0 {
						size = 2000 // evicted
					}
					d.add(message.NewToolResult(calls[i].ToolCallID, strings.Repeat("match\n", size/6)))
					maybe()
				}
			}
			maybe()
		}
		win()
		for i, k := range all {
			if !reflect.DeepEqual(k.w.Messages, k.msgs) {
				t.Fatalf("seed %d: window %d of %d changed after it was handed out", seed, i, len(all))
			}
		}
	}
}
