package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/window"
)

// checkEnv is what a check sees: the window after its turn, the one
// before, and the thread's store.
type checkEnv struct {
	store  store.Store
	tenant string
	thread *mneme.Thread
	window *window.Window
	prev   *window.Window
}

// run evaluates one check: pass, and when it fails what was found instead.
// An error means the check could not be evaluated (the store failed).
func (e *checkEnv) run(ctx context.Context, c Check) (bool, string, error) {
	str := func() string { var s string; _ = json.Unmarshal(c.Arg, &s); return s }
	num := func() int { var n int; _ = json.Unmarshal(c.Arg, &n); return n }
	flag := func() bool { var b bool; _ = json.Unmarshal(c.Arg, &b); return b }
	switch c.Kind {
	case KindWindowContains:
		s := str()
		if strings.Contains(WindowText(e.window.Messages), s) {
			return true, "", nil
		}
		return false, fmt.Sprintf("%q is not in the window (%d messages, %d tokens)", s, len(e.window.Messages), e.window.Usage.Total), nil
	case KindWindowExcludes:
		s := str()
		for i, m := range e.window.Messages {
			if strings.Contains(m.PlainText(), s) {
				return false, fmt.Sprintf("%q is in window message %d (%s)", s, i+1, m.Role), nil
			}
		}
		return true, "", nil
	case KindWindowTokensAtMost:
		n := num()
		if e.window.Usage.Total <= n {
			return true, "", nil
		}
		return false, fmt.Sprintf("the window has %d tokens, over %d", e.window.Usage.Total, n), nil
	case KindWindowCharsAtMost:
		n, got := num(), len([]rune(WindowText(e.window.Messages)))
		if got <= n {
			return true, "", nil
		}
		return false, fmt.Sprintf("the window has %d characters, over %d", got, n), nil
	case KindToolPairsIntact:
		v := ToolPairViolations(e.window.Messages)
		if (len(v) == 0) == flag() {
			return true, "", nil
		}
		if len(v) == 0 {
			return false, "every tool call has its result, but the check expected a broken pair", nil
		}
		return false, strings.Join(v, "; "), nil
	case KindCompactionsAtLeast:
		n := num()
		if e.window.Usage.Compactions >= n {
			return true, "", nil
		}
		return false, fmt.Sprintf("%d compactions, expected at least %d", e.window.Usage.Compactions, n), nil
	case KindArchivedAtLeast:
		n := num()
		got, err := e.archived(ctx)
		if err != nil {
			return false, "", err
		}
		if got >= n {
			return true, "", nil
		}
		return false, fmt.Sprintf("%d messages out of the window (covered, masked or evicted), expected at least %d", got, n), nil
	case KindObservationContains:
		s := str()
		mem := MemoryText(e.window.Messages)
		if mem == "" {
			return false, "the window has no memory block", nil
		}
		if strings.Contains(mem, s) {
			return true, "", nil
		}
		return false, fmt.Sprintf("%q is not in the memory block (%d characters)", s, len(mem)), nil
	case KindPrefixStable:
		stable, at := IsPrefix(e.prev.Messages, e.window.Messages)
		if stable == flag() {
			return true, "", nil
		}
		if !stable {
			return false, fmt.Sprintf("the window differs from the previous call's at message %d", at+1), nil
		}
		return false, "the window kept the previous call's prefix, but the check expected a compaction step", nil
	case KindRecallable:
		var r Recall
		_ = json.Unmarshal(c.Arg, &r)
		return e.recallable(ctx, r)
	case KindReadable:
		return e.readable(ctx, str())
	}
	return false, "", fmt.Errorf("unknown kind %q", c.Kind)
}

// recallable searches the thread's archive and reads each of the first
// TopK hits back whole.
func (e *checkEnv) recallable(ctx context.Context, r Recall) (bool, string, error) {
	k := r.TopK
	if k == 0 {
		k = 3
	}
	hits, err := e.store.Search(ctx, e.tenant, store.SearchQuery{Text: r.Query, Thread: e.thread.ID(), Limit: k})
	if err != nil {
		return false, "", err
	}
	for _, h := range hits {
		_, ev, err := e.store.EventByRef(ctx, e.tenant, h.Ref)
		if err != nil {
			return false, "", err
		}
		if ev.Message != nil && strings.Contains(ev.Message.PlainText(), r.Expect) {
			return true, "", nil
		}
	}
	return false, fmt.Sprintf("the search %q found %d hits in its top %d, none containing %q", r.Query, len(hits), k, r.Expect), nil
}

// refPattern matches the refs the window names (store.NewRef's form).
var refPattern = regexp.MustCompile(`\bm_[0-9a-f]{24}\b`)

// readable passes when a ref the window names (in a placeholder, an
// evicted preview or a catalogue line) reads back a message containing s:
// what left the window can be had again through mneme_read.
func (e *checkEnv) readable(ctx context.Context, s string) (bool, string, error) {
	refs := refPattern.FindAllString(WindowText(e.window.Messages), -1)
	seen := map[string]bool{}
	for _, ref := range refs {
		if seen[ref] {
			continue
		}
		seen[ref] = true
		th, ev, err := e.store.EventByRef(ctx, e.tenant, ref)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, "", err
		}
		if th == e.thread.ID() && ev.Message != nil && strings.Contains(ev.Message.PlainText(), s) {
			return true, "", nil
		}
	}
	return false, fmt.Sprintf("none of the %d refs the window names reads back a message containing %q", len(seen), s), nil
}

// archived counts the thread's messages that are out of the window in whole
// or in part: covered by a memory block, masked or evicted.
func (e *checkEnv) archived(ctx context.Context) (int, error) {
	evs, err := e.thread.Events(ctx, 1, 0)
	if err != nil {
		return 0, err
	}
	type span struct {
		from, to int64
		kept     []int64 // live inside the span: the current request
	}
	var spans []span
	for _, ev := range evs {
		if ev.Kind == store.KindCompacted {
			var d window.CompactedData
			if json.Unmarshal(ev.Data, &d) == nil {
				spans = append(spans, span{d.From, d.To, d.Kept})
			}
		}
	}
	n := len(e.window.Usage.Masked) + len(e.window.Usage.Evicted)
	for _, ev := range evs {
		if ev.Kind != store.KindMessage {
			continue
		}
		for _, s := range spans {
			if ev.Seq >= s.from && ev.Seq <= s.to && !slices.Contains(s.kept, ev.Seq) {
				n++
				break
			}
		}
	}
	return n, nil
}

// WindowText is everything readable in a window: text, tool calls and
// their arguments, tool results, one message a line.
func WindowText(msgs []message.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.PlainText())
		b.WriteByte('\n')
	}
	return b.String()
}

// MemoryText returns the window's memory block (observations and
// catalogues), or "" when it has none.
func MemoryText(msgs []message.Message) string {
	for _, m := range msgs {
		if t := m.TextOf(); strings.HasPrefix(t, "<mneme:memory>") {
			return t
		}
	}
	return ""
}

// ToolPairViolations lists what breaks the tool pairing a model API
// enforces: a result whose call is not earlier in the window, a call with
// no result, or a result that is not in the run of results right after its
// call's message.
func ToolPairViolations(msgs []message.Message) []string {
	var out []string
	pending := map[string]int{} // call id → index of the calling message
	answered := map[string]bool{}
	for i, m := range msgs {
		if m.IsToolResult() {
			for _, id := range m.ResultIDs() {
				at, ok := pending[id]
				switch {
				case answered[id]:
					out = append(out, fmt.Sprintf("message %d answers call %s twice", i+1, id))
				case !ok:
					out = append(out, fmt.Sprintf("message %d is the result of call %s, which is not in the window", i+1, id))
				case !onlyResultsBetween(msgs, at, i):
					out = append(out, fmt.Sprintf("message %d answers call %s of message %d, with other messages between", i+1, id, at+1))
				}
				answered[id] = true
			}
		}
		for _, id := range m.ToolCallIDs() {
			pending[id] = i
		}
	}
	var dangling []string
	for id, at := range pending {
		if !answered[id] {
			dangling = append(dangling, fmt.Sprintf("call %s of message %d has no result", id, at+1))
		}
	}
	slices.Sort(dangling)
	return append(out, dangling...)
}

func onlyResultsBetween(msgs []message.Message, from, to int) bool {
	for k := from + 1; k < to; k++ {
		if !msgs[k].IsToolResult() {
			return false
		}
	}
	return true
}

// IsPrefix reports whether prev is a prefix of cur, message by message
// (their encoded JSON equal); when it is not, at is the first message
// that differs.
func IsPrefix(prev, cur []message.Message) (ok bool, at int) {
	if len(prev) > len(cur) {
		for i := range cur {
			if !sameMessage(prev[i], cur[i]) {
				return false, i
			}
		}
		return false, len(cur)
	}
	for i := range prev {
		if !sameMessage(prev[i], cur[i]) {
			return false, i
		}
	}
	return true, len(prev)
}

func sameMessage(a, b message.Message) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}
