package mneme

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/token"
	"github.com/mnemehq/mneme/window"
)

// TestBlockTokens checks blockTokens' premise on random blocks under every
// tokenizer: the pieces' sum is the block's count for the BPE encodings and
// never less than it for the estimators, and fits answers as counting the
// block whole does. The texts mix what moves a pre-tokenizer's cuts
// (trailing blanks and punctuation, newlines, "#", digits, non-Latin
// scripts, emoji) so that the cuts meet every kind of text end.
func TestBlockTokens(t *testing.T) {
	frags := []string{"foo", "Bar", " ", "  ", "\t", "\n", "\n\n", "\r\n", " \n ", ".", "!?", "#", "##", "## x", "123456", "7",
		"é", "日本語", "🙂", "'s", "/", "x.y", "</", ">", "\u00a0", "```go", "}\n", "—", "mneme:", "  \n"}
	r := rand.New(rand.NewPCG(1, 19))
	text := func() string {
		var b strings.Builder
		for n := r.IntN(24); n > 0; n-- {
			b.WriteString(frags[r.IntN(len(frags))])
		}
		return b.String()
	}
	roles := []message.Role{message.User, message.Assistant, message.Tool}
	exact := 0
	for _, name := range token.Names() {
		c, err := token.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		sz := sizer{cache: token.NewCache(), c: c}
		bt := newBlockTokens(sz)
		if bt.exact {
			exact++
		}
		whole := blockTokens{sz: sz, whole: true}
		for i := 0; i < 400; i++ {
			hits := make([]window.RecallHit, r.IntN(7))
			es := make([]entryTokens, len(hits))
			for j := range hits {
				hits[j] = window.RecallHit{Ref: fmt.Sprintf("m_%d", r.IntN(1e6)), Seq: int64(r.IntN(1e4)), Role: roles[r.IntN(len(roles))],
					Text: text(), Clipped: r.IntN(4) == 0, Context: r.IntN(3) == 0}
				es[j] = bt.entry(hits[j])
				if got, want := sz.CachedText(hits[j].Text), sz.Text(hits[j].Text); got != want {
					t.Fatalf("%s: CachedText(%q) = %d, Text %d", name, hits[j].Text, got, want)
				}
			}
			n, sum := sz.Message("", window.RecalledMessage(hits)), bt.sum(es)
			if bt.exact && sum != n || sum < n {
				t.Fatalf("%s: %q: the pieces count %d, the block %d", name, window.RecalledMessage(hits).TextOf(), sum, n)
			}
			for _, room := range []int{n - 1, n, n + 1, sum - 1, sum} {
				if got, want := bt.fits(hits, es, room), whole.fits(hits, nil, room); got != want {
					t.Fatalf("%s: fits(room %d) = %v, the block counts %d", name, room, got, n)
				}
			}
		}
	}
	if exact != 2 {
		t.Fatalf("%d counters are taken as exact, want the two BPE encodings", exact)
	}
}

// TestNeighbourhoods checks that a hit's events read through
// neighbourhoods are those of its own Load, for hits near and far apart,
// at the thread's start and end, and for a seq it was not made for.
func TestNeighbourhoods(t *testing.T) {
	ctx := context.Background()
	st := inmem.New()
	m, err := Open(ctx, Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var evs []store.Event
	for i := 0; i < 700; i++ {
		if i%7 == 3 {
			evs = append(evs, store.Event{Kind: store.KindNote, Data: []byte(`{"text":"n"}`)})
			continue
		}
		evs = append(evs, store.Event{Kind: store.KindMessage, Message: ptr(message.NewText(message.User, fmt.Sprint("m", i)))})
	}
	if _, err := st.Append(ctx, "default", "nb", 0, evs); err != nil {
		t.Fatal(err)
	}
	th := m.Thread("default", "nb")
	r := rand.New(rand.NewPCG(2, 19))
	for round := 0; round < 50; round++ {
		var seqs []int64
		for n := r.IntN(120); n > 0; n-- {
			seqs = append(seqs, 1+r.Int64N(700))
		}
		seqs = append(seqs, 1, 2, 700)
		nb := th.newNeighbourhoods(seqs)
		for _, s := range append(seqs, 1+r.Int64N(700)) {
			got, err := nb.around(ctx, s, "")
			if err != nil {
				t.Fatal(err)
			}
			want, err := st.Load(ctx, "default", "nb", max(1, s-recallNeighbourhood), 2*recallNeighbourhood+1)
			if err != nil {
				t.Fatal(err)
			}
			sameEvents(t, s, got, want)
		}
	}
}

// openCounting opens an engine on a memory store that counts its Loads;
// the engine is closed with the test.
func openCounting(t *testing.T) (*Engine, *loadCounter) {
	t.Helper()
	st := &loadCounter{Store: inmem.New()}
	m, err := Open(context.Background(), Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, st
}

// TestNeighbourhoodsKept: neighbourhoods that keep what they read in the
// thread's state serve later reads from it exactly as Load would, across
// recalls, and a hit whose ref is not the kept event's (the log was deleted
// and written again behind the state) reads the log again.
func TestNeighbourhoodsKept(t *testing.T) {
	ctx := context.Background()
	m, st := openCounting(t)
	write := func(prefix string) {
		t.Helper()
		var evs []store.Event
		for i := 0; i < 300; i++ {
			if i%7 == 3 {
				evs = append(evs, store.Event{Kind: store.KindNote, Data: []byte(`{"text":"n"}`)})
				continue
			}
			evs = append(evs, store.Event{Kind: store.KindMessage, Message: ptr(message.NewText(message.User, fmt.Sprint(prefix, i)))})
		}
		if _, err := st.Append(ctx, "default", "nb", 0, evs); err != nil {
			t.Fatal(err)
		}
	}
	write("m")
	th := m.Thread("default", "nb")
	ts, err := th.load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(nb *neighbourhoods, s int64) {
		t.Helper()
		want, err := st.Store.Load(ctx, "default", "nb", max(1, s-recallNeighbourhood), 2*recallNeighbourhood+1)
		if err != nil {
			t.Fatal(err)
		}
		ref := ""
		for _, e := range want {
			if e.Seq == s {
				ref = e.Ref
			}
		}
		got, err := nb.around(ctx, s, ref)
		if err != nil {
			t.Fatal(err)
		}
		sameEvents(t, s, got, want)
	}
	r := rand.New(rand.NewPCG(3, 19))
	rounds := func(n int) {
		for round := 0; round < n; round++ {
			var seqs []int64
			for n := r.IntN(40); n > 0; n-- {
				seqs = append(seqs, 1+r.Int64N(300))
			}
			seqs = append(seqs, 1, 300)
			nb := th.newNeighbourhoods(seqs)
			nb.ts = ts
			for _, s := range append(seqs, 1+r.Int64N(300)) {
				check(nb, s)
			}
		}
	}
	rounds(20)
	loads := st.loads
	nb := th.newNeighbourhoods([]int64{1, 150, 300})
	nb.ts = ts
	for _, s := range []int64{1, 150, 300} {
		check(nb, s)
	}
	if st.loads != loads {
		t.Errorf("%d Loads for neighbourhoods read before, want none", st.loads-loads)
	}
	// Behind the state's back: the same seqs, other events.
	if err := st.DeleteThread(ctx, "default", "nb"); err != nil {
		t.Fatal(err)
	}
	write("x")
	rounds(5)
	if m.recallKept.Load() == 0 || m.recallKept.Load() != ts.recall.tokens {
		t.Errorf("the Engine counts %d tokens kept, the state %d", m.recallKept.Load(), ts.recall.tokens)
	}
	m.unlock(ts)
	if err := th.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if n := m.recallKept.Load(); n != 0 {
		t.Errorf("%d tokens still counted as kept after the thread was deleted", n)
	}
}

// loadCounter counts Loads.
type loadCounter struct {
	store.Store
	loads int
}

func (c *loadCounter) Load(ctx context.Context, tenant, thread string, from int64, limit int) ([]store.Event, error) {
	c.loads++
	return c.Store.Load(ctx, tenant, thread, from, limit)
}

func ptr[T any](v T) *T { return &v }

// sameEvents fails unless got, read around seq, is want (Load's) event by
// event: seq, kind and ref.
func sameEvents(t *testing.T, seq int64, got, want []store.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("seq %d: %d events, Load gives %d", seq, len(got), len(want))
	}
	for i := range got {
		if got[i].Seq != want[i].Seq || got[i].Kind != want[i].Kind || got[i].Ref != want[i].Ref {
			t.Fatalf("seq %d: event %d is %d %s %s, Load's %d %s %s", seq, i, got[i].Seq, got[i].Kind, got[i].Ref, want[i].Seq, want[i].Kind, want[i].Ref)
		}
	}
}

// TestNeighbourhoodsKeptFromAppends: what the thread's own appends wrote
// is kept (keepForRecall), so that the neighbourhoods of hits among them
// are read without a Load, and are what Load gives (text included).
func TestNeighbourhoodsKeptFromAppends(t *testing.T) {
	ctx := context.Background()
	m, st := openCounting(t)
	th := m.Thread("default", "ap")
	var msgs []message.Message
	for i := 0; i < 120; i++ {
		msgs = append(msgs, message.NewText([]message.Role{message.User, message.Assistant}[i%2], fmt.Sprint("message ", i)))
	}
	if _, err := th.Append(ctx, msgs[:100]...); err != nil {
		t.Fatal(err)
	}
	if _, _, err := th.AppendWindow(ctx, msgs[100:], WindowOptions{}); err != nil {
		t.Fatal(err)
	}
	ts, err := th.load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.unlock(ts)
	seqs := []int64{1, 40, 99, 100, 101, 120}
	nb := th.newNeighbourhoods(seqs)
	nb.ts = ts
	loads := st.loads
	for _, s := range seqs {
		want, err := st.Store.Load(ctx, "default", "ap", max(1, s-recallNeighbourhood), 2*recallNeighbourhood+1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := nb.around(ctx, s, want[min(int(s), recallNeighbourhood+1)-1].Ref)
		if err != nil {
			t.Fatal(err)
		}
		sameEvents(t, s, got, want)
		for i := range got {
			if got[i].Message.PlainText() != want[i].Message.PlainText() {
				t.Fatalf("seq %d: the kept text %q, Load's %q", got[i].Seq, got[i].Message.PlainText(), want[i].Message.PlainText())
			}
		}
	}
	if st.loads != loads {
		t.Errorf("%d Loads for neighbourhoods of events the thread appended, want none", st.loads-loads)
	}
}

// TestRecallKeptReclaimed: once the states keep more than recallReclaimAt
// for auto-recall in all, pinning a state takes back what the least
// recently used idle states keep (down to recallReclaimTo), so that the
// thread in use can keep its own; a pinned state keeps its events, and
// every state stays in the cache.
func TestRecallKeptReclaimed(t *testing.T) {
	m, err := Open(context.Background(), Config{Store: inmem.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	per := int64(maxRecallKeptTokens / 10) // each state's share of the bound
	var states []*threadState
	for i := range 8 { // 80%, over recallReclaimAt
		ts := m.pin(threadKey{"t", fmt.Sprint(i)})
		ts.recall.keep([]store.Event{{Seq: 1, Kind: store.KindMessage, Tokens: int(per - 1)}})
		m.unpin(ts)
		states = append(states, ts)
	}
	if got := m.recallKept.Load(); got != 8*per {
		t.Fatalf("kept %d tokens, want %d", got, 8*per)
	}
	held := m.pin(states[0].key) // the least recently used, but in use
	defer m.unpin(held)
	m.unpin(m.pin(threadKey{"t", "new"}))
	if got := m.recallKept.Load(); got != recallReclaimTo {
		t.Fatalf("after reclaiming: %d tokens kept, want %d", got, int64(recallReclaimTo))
	}
	for i, ts := range states {
		dropped := i >= 1 && i <= 3 // the three least recently used idle ones
		if (ts.recall.evs == nil) != dropped {
			t.Errorf("state %d: kept %v, want dropped %v", i, ts.recall.evs != nil, dropped)
		}
		if m.threads[ts.key] != ts {
			t.Errorf("state %d left the cache", i)
		}
	}
}
