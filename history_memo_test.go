package mneme

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/recall"
)

// randomMessage is one message of the kinds the projection tells apart:
// system, user, visible and invisible assistant steps, recall calls,
// hidden messages, tool results, text split into parts.
func randomMessage(r *rand.Rand, i int) message.Message {
	var m message.Message
	switch r.IntN(9) {
	case 0:
		m = message.NewText(message.System, fmt.Sprintf("sys %d", r.IntN(3)))
	case 1, 2:
		m = message.NewText(message.User, fmt.Sprintf("user %d", r.IntN(4)))
	case 3:
		m = message.NewText(message.Assistant, fmt.Sprintf("answer %d", r.IntN(4)))
	case 4:
		m = message.NewText(message.Assistant, "") // shows nothing
	case 5:
		m = message.NewToolCalls("", message.Part{Type: message.ToolCall, ToolCallID: fmt.Sprintf("c%d", i), ToolName: "grep", Arguments: `{"q":1}`})
	case 6:
		m = message.NewToolCalls("", message.Part{Type: message.ToolCall, ToolCallID: fmt.Sprintf("r%d", i), ToolName: recall.ToolSearch, Arguments: `{}`})
	case 7:
		m = message.NewToolResult(fmt.Sprintf("c%d", r.IntN(i+1)), fmt.Sprintf("out %d", r.IntN(3)))
	default:
		m = message.Message{Role: message.User, Parts: []message.Part{{Type: message.Text, Text: "a"}, {Type: message.Text, Text: fmt.Sprint(r.IntN(2))}}}
	}
	if r.IntN(12) == 0 {
		m.Meta = map[string]string{MetaRecall: "true"}
	}
	return m
}

// TestHistoryMemoProjects: projecting requests through historyMemo gives
// what requestProjection gives, whatever each request shares with the one
// before it on the thread: all of it and more (a resend client), a prefix
// and other messages (an edit, a regenerated answer), less (a re-run),
// nothing, or the same messages changed in place after the projection;
// with the memo at its default bound, bounded to a few requests (its
// generations turn all the time), and keeping nothing
// (Config.RequestMemoBytes < 0).
func TestHistoryMemoProjects(t *testing.T) {
	for _, limit := range []int{0, 256, -1} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) { checkHistoryMemo(t, &historyMemo{limit: limit}) })
	}
}

func checkHistoryMemo(t *testing.T, h *historyMemo) {
	r := rand.New(rand.NewPCG(19, 58))
	for thread := range 200 {
		k := threadKey{"t", fmt.Sprint(thread % 7)}
		var msgs []message.Message
		for req := range 30 {
			switch op := r.IntN(10); {
			case op < 6: // resend: a step more
				for range 1 + r.IntN(3) {
					msgs = append(msgs, randomMessage(r, len(msgs)))
				}
			case op < 8 && len(msgs) > 0: // diverge after a prefix
				msgs = append([]message.Message(nil), msgs[:r.IntN(len(msgs))]...)
				msgs = append(msgs, randomMessage(r, len(msgs)))
			case op < 9 && len(msgs) > 0: // a re-run: a strict prefix
				msgs = msgs[:r.IntN(len(msgs))]
			default: // the same messages changed in place
				if len(msgs) > 0 {
					i := r.IntN(len(msgs))
					if len(msgs[i].Parts) > 0 && msgs[i].Parts[0].Type == message.Text {
						msgs[i].Parts[0].Text += " edited"
					}
				}
			}
			got, want := h.project(k, msgs), requestProjection(msgs)
			if !reflect.DeepEqual(got.units, want.units) || !reflect.DeepEqual(got.leadSys, want.leadSys) ||
				!reflect.DeepEqual(got.system, want.system) || got.started != want.started || got.open || want.open {
				t.Fatalf("thread %d request %d (%d messages): memo projection differs\n got %+v\nwant %+v", thread, req, len(msgs), got.units, want.units)
			}
			if h.limit < 0 && h.get(k) != nil {
				t.Fatalf("thread %d request %d: a memo bounded to nothing keeps a request", thread, req)
			}
		}
	}
}
