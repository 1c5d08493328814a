package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/window"
)

// errRecorder is a testing.TB that keeps the errors reported to it.
type errRecorder struct {
	testing.TB
	errs []string
}

func (r *errRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *errRecorder) Helper() {}

// TestCheckLogsCatches: the checks the e2e tests rely on catch what they
// are there to catch. A clean log passes; each defect is reported.
func TestCheckLogsCatches(t *testing.T) {
	a := newAgent(1, "t1")
	a.acknowledge(chatMsg{Role: "assistant", Content: text("ok: first")})
	a.acknowledge(chatMsg{Role: "assistant", Content: text("ok: second")})
	// The log of a.history as the proxy writes it.
	clean := func() []store.Event {
		var evs []store.Event
		for _, m := range a.history {
			msg := message.NewText(message.Role(m.Role), *m.Content)
			evs = append(evs, store.Event{Kind: store.KindMessage, Message: &msg})
		}
		return evs
	}
	compacted := func(from, to int64) store.Event {
		b, _ := json.Marshal(window.CompactedData{Strategy: window.Observe, From: from, To: to, Model: "m"})
		return store.Event{Kind: store.KindCompacted, Data: b}
	}
	recall := func() store.Event {
		m := message.NewText(message.Assistant, "recall round")
		m.Meta = map[string]string{proxy.MetaRecall: "true"}
		return store.Event{Kind: store.KindMessage, Message: &m}
	}
	tests := []struct {
		name string
		edit func([]store.Event) []store.Event
		want string // in the first error; "" for none
	}{
		{"clean", func(e []store.Event) []store.Event { return e }, ""},
		{"recall rounds and compactions are not messages", func(e []store.Event) []store.Event {
			return append(append(e, recall()), compacted(2, 3), compacted(4, 4))
		}, ""},
		{"duplicate", func(e []store.Event) []store.Event { return append(e, e[2]) }, "times in the log"},
		{"missing", func(e []store.Event) []store.Event { return append(e[:2:2], e[3:]...) }, "not in the log"},
		{"unacknowledged", func(e []store.Event) []store.Event {
			m := message.NewText(message.User, "never sent")
			return append(e, store.Event{Kind: store.KindMessage, Message: &m})
		}, "never acknowledged"},
		{"out of order", func(e []store.Event) []store.Event {
			e[2], e[3] = e[3], e[2]
			return e
		}, "out of order"},
		{"gap", func(e []store.Event) []store.Event { return e }, "not gapless"},
		{"overlapping compactions", func(e []store.Event) []store.Event {
			return append(e, compacted(2, 3), compacted(3, 4))
		}, "overlap"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			evs := tc.edit(clean())
			for i := range evs {
				evs[i].Seq = int64(i + 1)
				if tc.name == "gap" && i > 1 {
					evs[i].Seq++
				}
			}
			rec := &errRecorder{TB: t}
			checkLogs(rec, []threadLog{{id: "t1", evs: evs}}, []*agent{a})
			switch {
			case tc.want == "" && len(rec.errs) > 0:
				t.Errorf("a clean log was reported: %s", strings.Join(rec.errs, "; "))
			case tc.want != "" && len(rec.errs) == 0:
				t.Errorf("the defect went unreported (want %q)", tc.want)
			case tc.want != "" && !strings.Contains(rec.errs[0], tc.want):
				t.Errorf("reported %q, want %q", rec.errs[0], tc.want)
			}
		})
	}
}
