package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/api"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/window"
)

// tenant is the tenant of every request: the servers run without auth.
const tenant = "default"

// tally is what the checks counted.
type tally struct {
	threads     int // threads in the store (forks included)
	forkThreads int
	events      int
	messages    int // acknowledged messages checked against the logs
	duplicates  int // acknowledged messages found more than once
	missing     int // acknowledged messages not found
	extra       int // logged messages of an agent's thread it never had acknowledged
	gaps        int // threads whose seqs are not 1..N
	compactions int // compacted events
	observed    map[string]int
	overlaps    int // compacted events overlapping an earlier one of their thread
	reflections int
}

// threadLog is one thread's events, loaded whole.
type threadLog struct {
	id  string
	evs []store.Event
}

// loadLogs reads every thread of the tenant from the store.
func loadLogs(t testing.TB, st store.Store) []threadLog {
	t.Helper()
	ctx := context.Background()
	var out []threadLog
	for page := (store.Page{Limit: 500}); ; {
		infos, next, err := st.Threads(ctx, tenant, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			evs, err := st.Load(ctx, tenant, in.ID, 1, 0)
			if err != nil {
				t.Fatalf("load %s: %v", in.ID, err)
			}
			if int64(len(evs)) != in.Events {
				t.Errorf("thread %s: the listing says %d events, the log holds %d", in.ID, in.Events, len(evs))
			}
			out = append(out, threadLog{id: in.ID, evs: evs})
		}
		if next == "" {
			return out
		}
		page.Cursor = next
	}
}

// checkLogs checks the invariants on every thread, and each agent's
// acknowledged history against its thread's log: every acknowledged
// message in it exactly once, in order, and nothing else. It reports what
// it counted.
func checkLogs(t testing.TB, logs []threadLog, agents []*agent) tally {
	t.Helper()
	n := tally{threads: len(logs), observed: map[string]int{}}
	byID := map[string]threadLog{}
	for _, l := range logs {
		byID[l.id] = l
		if strings.Contains(l.id, "~") {
			n.forkThreads++
		}
		n.events += len(l.evs)
		for i, ev := range l.evs {
			if ev.Seq != int64(i+1) {
				n.gaps++
				t.Errorf("thread %s: event %d has seq %d: the log is not gapless", l.id, i+1, ev.Seq)
				break
			}
		}
		checkCompactions(t, l, &n)
	}
	for _, a := range agents {
		l, ok := byID[a.thread]
		if !ok {
			t.Errorf("agent %d: thread %s is not in the store", a.id, a.thread)
			n.missing += len(a.history)
			continue
		}
		var logged []string
		for _, ev := range l.evs {
			if ev.Kind == store.KindMessage && ev.Message != nil && ev.Message.Meta[proxy.MetaRecall] != "true" {
				logged = append(logged, renderLogged(*ev.Message))
			}
		}
		seen := map[string]int{}
		for _, s := range logged {
			seen[s]++
		}
		want := map[string]bool{}
		for _, m := range a.history {
			s := m.render()
			want[s] = true
			n.messages++
			switch c := seen[s]; {
			case c == 0:
				n.missing++
				t.Errorf("agent %d: acknowledged message not in the log: %.120s", a.id, s)
			case c > 1:
				n.duplicates++
				t.Errorf("agent %d: acknowledged message %d times in the log: %.120s", a.id, c, s)
			}
		}
		for _, s := range logged {
			if !want[s] {
				n.extra++
				t.Errorf("agent %d: the log holds a message never acknowledged: %.120s", a.id, s)
			}
		}
		if n.missing+n.duplicates+n.extra == 0 && len(logged) == len(a.history) {
			for i, m := range a.history {
				if logged[i] != m.render() {
					t.Errorf("agent %d: message %d out of order: log %.80q, history %.80q", a.id, i, logged[i], m.render())
					break
				}
			}
		}
	}
	return n
}

// checkCompactions counts a thread's compactions and reflections and
// checks that no two compacted events cover overlapping ranges: one
// compaction per compaction point.
func checkCompactions(t testing.TB, l threadLog, n *tally) {
	type span struct{ from, to, seq int64 }
	var spans []span
	for _, ev := range l.evs {
		switch ev.Kind {
		case store.KindReflected:
			n.reflections++
		case store.KindCompacted:
			var d window.CompactedData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Errorf("thread %s seq %d: unreadable compacted event: %v", l.id, ev.Seq, err)
				continue
			}
			n.compactions++
			if d.Model != "" {
				n.observed[d.Model]++
			}
			spans = append(spans, span{d.From, d.To, ev.Seq})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	for i := 1; i < len(spans); i++ {
		if p, c := spans[i-1], spans[i]; c.from <= p.to {
			n.overlaps++
			t.Errorf("thread %s: compacted events at seq %d [%d,%d] and seq %d [%d,%d] overlap", l.id, p.seq, p.from, p.to, c.seq, c.from, c.to)
		}
	}
}

// renderLogged renders a logged message like chatMsg.render.
func renderLogged(m message.Message) string {
	var b strings.Builder
	b.WriteString(string(m.Role))
	var txt strings.Builder
	var calls strings.Builder
	for _, p := range m.Parts {
		switch p.Type {
		case message.Text:
			txt.WriteString(p.Text)
		case message.ToolCall:
			fmt.Fprintf(&calls, " [call %s %s %s]", p.ToolCallID, p.ToolName, p.Arguments)
		case message.ToolResult:
			b.WriteString(" result " + p.ToolCallID)
			txt.WriteString(message.Message{Parts: p.Content}.TextOf())
		}
	}
	return b.String() + ": " + txt.String() + calls.String()
}

// checkWindows asks a server for every thread's window (rebuilt from the
// log by a process that never saw the thread) and checks that it comes
// back, covers the whole log and fits its budget.
func checkWindows(t testing.TB, base string, logs []threadLog) {
	t.Helper()
	hc := &http.Client{Timeout: 60 * time.Second}
	for _, l := range logs {
		resp, err := hc.Get(base + "/api/threads/" + url.PathEscape(l.id) + "/window")
		if err != nil {
			t.Errorf("window of %s: %v", l.id, err)
			continue
		}
		var v api.WindowView
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			t.Errorf("window of %s: status %d, %v", l.id, resp.StatusCode, err)
			continue
		}
		var msgs int64
		for _, ev := range l.evs {
			if ev.Kind == store.KindMessage {
				msgs++
			}
		}
		last := int64(len(l.evs))
		switch {
		case len(v.Messages) == 0:
			t.Errorf("window of %s: no messages", l.id)
		case v.Usage.LastSeq < last || v.Usage.ThreadMessages != msgs:
			t.Errorf("window of %s: built on seq %d with %d messages, the log has %d events and %d messages", l.id, v.Usage.LastSeq, v.Usage.ThreadMessages, last, msgs)
		case v.Usage.Total > v.Usage.Budget:
			t.Errorf("window of %s: %d tokens over its budget of %d", l.id, v.Usage.Total, v.Usage.Budget)
		}
	}
}

// invoiceID matches the invoice id each user turn of an agent carries
// (agent.userMessage): unique to the agent and the turn.
var invoiceID = regexp.MustCompile(`INV-\d{5}`)

// checkSearch: every logged user turn is found by a search of the tenant
// for its invoice id, under its thread and seq: the archive index, moved
// in the background and killed at any moment, holds every acknowledged
// message (a tenant's search always uses the index). It returns how many
// turns it searched for.
func checkSearch(t *testing.T, st store.Store, logs []threadLog) int {
	t.Helper()
	ctx := context.Background()
	type at struct {
		thread string
		seq    int64
	}
	want := map[string][]at{}
	for _, l := range logs {
		for _, ev := range l.evs {
			if ev.Message == nil || ev.Message.Role != message.User {
				continue
			}
			if id := invoiceID.FindString(ev.Message.PlainText()); id != "" {
				want[id] = append(want[id], at{l.id, ev.Seq})
			}
		}
	}
	for id, places := range want {
		hits, err := st.Search(ctx, tenant, store.SearchQuery{Text: id, Limit: 100})
		if err != nil {
			t.Fatalf("search %s: %v", id, err)
		}
		found := map[at]bool{}
		for _, h := range hits {
			found[at{h.Thread, h.Seq}] = true
		}
		for _, p := range places {
			if !found[p] {
				t.Errorf("search %s: %s#%d is not among its %d hits", id, p.thread, p.seq, len(hits))
			}
		}
	}
	return len(want)
}
