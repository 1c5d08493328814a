package mneme_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/window"
)

const summarizerModel = "gpt-4o-mini"

func observePolicy() *mneme.Policy {
	p := smallPolicy()
	p.Strategy = window.Observe
	p.MinTailTokens = 2000
	p.ReflectOver = window.Tokens(4000)
	return p
}

// openObserving opens an Engine on the SQLite file at path with srv as
// its summarizer (none when srv is nil: mod sets a Compactor).
func openObserving(t testing.TB, path string, srv *fakellm.Server, mod func(*mneme.Config)) *mneme.Engine {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mneme.Config{Store: st, Policy: observePolicy()}
	if srv != nil {
		cfg.Summarizer = compact.LLMConfig{URL: srv.URL(), Model: summarizerModel, Timeout: 5 * time.Second}
	}
	if mod != nil {
		mod(&cfg)
	}
	m, err := mneme.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); st.Close() })
	return m
}

// eventsOf decodes the thread's compacted and reflected events.
func eventsOf(t testing.TB, m *mneme.Engine, thread string) (cs []window.CompactedData, rs []window.ReflectedData) {
	t.Helper()
	evs, err := m.Store().Load(context.Background(), "default", thread, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		switch ev.Kind {
		case store.KindCompacted:
			var d window.CompactedData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			cs = append(cs, d)
		case store.KindReflected:
			var d window.ReflectedData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			rs = append(rs, d)
		}
	}
	return cs, rs
}

// With fakellm as the summarizer, observations and reflections are events
// in the log; a fresh Engine on the same file rebuilds the identical
// window without a single request to the summarizer (I7).
func TestObserveReflectReplay(t *testing.T) {
	ctx := context.Background()
	srv := fakellm.Start()
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "m.db")
	m := openObserving(t, path, srv, nil)
	th := m.Thread("default", "observe")
	begin(ctx, t, th)
	var last *window.Window
	for n := 1; n <= 150; n++ {
		w, err := step(ctx, th, n, mneme.WindowOptions{})
		if err != nil {
			t.Fatalf("step %d: %v", n, err)
		}
		if w.Usage.Total > w.Usage.Budget {
			t.Fatalf("step %d: %d tokens over the %d budget", n, w.Usage.Total, w.Usage.Budget)
		}
		last = w
	}
	cs, rs := eventsOf(t, m, "observe")
	byModel := 0
	for _, c := range cs {
		if c.Strategy == window.Observe && c.Model == summarizerModel && c.Fallback == "" && c.TokensAfter > 0 && c.TokensBefore > c.TokensAfter {
			byModel++
		}
	}
	reflectedByModel := 0
	for _, r := range rs {
		if r.Fallback == "" && r.Model == summarizerModel {
			reflectedByModel++
		}
	}
	if byModel == 0 || len(rs) == 0 {
		t.Fatalf("%d compacted events (%d by the model), %d reflected", len(cs), byModel, len(rs))
	}
	t.Logf("%d compacted events (%d by the model), %d reflected (%d by the model); %d summarizer requests", len(cs), byModel, len(rs), reflectedByModel, len(srv.Requests()))

	requests := len(srv.Requests())
	m2 := openObserving(t, path, srv, nil)
	before, _ := m2.Store().LastSeq(ctx, "default", "observe")
	w2, err := m2.Thread("default", "observe").Window(ctx, mneme.WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := m2.Store().LastSeq(ctx, "default", "observe")
	if after != before {
		t.Fatalf("replay wrote %d events", after-before)
	}
	if got := len(srv.Requests()); got != requests {
		t.Fatalf("replay made %d requests to the summarizer", got-requests)
	}
	a, _ := message.EncodeOpenAIMessages(last.Messages)
	b, _ := message.EncodeOpenAIMessages(w2.Messages)
	if !bytes.Equal(a, b) {
		t.Fatalf("replayed window differs:\n%s\n---\n%s", a, b)
	}
}

// Whatever the summarizer does wrong, every window fits, no call fails,
// and every observation records the fallback and its cause (I5).
func TestSummarizerFailures(t *testing.T) {
	cases := []struct {
		name    string
		reply   fakellm.Reply
		timeout time.Duration
		cause   string
	}{
		// Only the timeout case has a short timeout: on a loaded machine
		// a prompt answer may take longer than it, and would be named a
		// timeout instead of the fault under test.
		{"500", fakellm.Reply{Status: 500}, time.Minute, "500"},
		{"timeout", fakellm.Reply{Text: "late", Delay: 3 * time.Second}, 200 * time.Millisecond, "timeout"},
		{"garbage", fakellm.Reply{Malformed: true}, time.Minute, "malformed"},
		{"empty", fakellm.Reply{Text: ""}, time.Minute, "empty output"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			srv := fakellm.Start(fakellm.WithHandler(func(fakellm.Request) fakellm.Reply { return tc.reply }))
			defer srv.Close()
			m := openObserving(t, filepath.Join(t.TempDir(), "m.db"), srv, func(c *mneme.Config) { c.Summarizer.Timeout = tc.timeout })
			th := m.Thread("default", "fail")
			begin(ctx, t, th)
			for n := 1; n <= 90; n++ {
				w, err := step(ctx, th, n, mneme.WindowOptions{})
				if err != nil {
					t.Fatalf("step %d: %v", n, err)
				}
				if w.Usage.Total > w.Usage.Budget {
					t.Fatalf("step %d: %d tokens over the %d budget", n, w.Usage.Total, w.Usage.Budget)
				}
			}
			cs, rs := eventsOf(t, m, "fail")
			if len(cs) == 0 || len(srv.Requests()) == 0 {
				t.Fatalf("%d compactions, %d requests: the test proves nothing", len(cs), len(srv.Requests()))
			}
			for _, c := range cs {
				if !strings.Contains(c.Fallback, tc.cause) || c.Model != compact.ExtractiveModel || c.Text == "" {
					t.Errorf("compacted %d–%d: fallback %q model %q", c.From, c.To, c.Fallback, c.Model)
				}
			}
			for _, r := range rs {
				if !strings.Contains(r.Fallback, tc.cause) || r.TokensAfter >= r.TokensBefore {
					t.Errorf("reflected: %+v", r)
				}
			}
		})
	}
}

// TestBackgroundBuffering: with buffering on, observations are made in the
// background ahead of the trigger. A summarizer held at a gate proves that
// the requests crossing the trigger do not wait for it (they return while
// it is held, and the request path never calls it); once it is let go, the
// buffered observation and then a buffered reflection activate, with no
// summarizer call on the request path.
func TestBackgroundBuffering(t *testing.T) {
	ctx := requestCtx()
	g := newGated()
	g.passRequests = true
	var mu sync.Mutex
	var activated []mneme.CompactEvent
	m := openObserving(t, filepath.Join(t.TempDir(), "m.db"), nil, func(c *mneme.Config) {
		c.Compactor = g
		c.Buffer = true
		c.Policy.ReflectOver = window.Tokens(2500)
		c.OnCompact = func(_, _ string, ce mneme.CompactEvent) {
			mu.Lock()
			defer mu.Unlock()
			activated = append(activated, ce)
		}
	})
	th := m.Thread("default", "buffered")
	begin(ctx, t, th)
	buffered := func() (observed, reflected bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, ce := range activated {
			observed = observed || ce.Buffered && ce.Compacted != nil && ce.Compacted.Model == "gated"
			reflected = reflected || ce.Buffered && ce.Reflected != nil && ce.Reflected.Model == "gated"
		}
		return observed, reflected
	}
	n := 0
	next := func() *window.Window {
		t.Helper()
		n++
		w, err := step(ctx, th, n, mneme.WindowOptions{})
		if err != nil {
			t.Fatalf("step %d: %v", n, err)
		}
		if w.Usage.Total > w.Usage.Budget {
			t.Fatalf("step %d: over budget", n)
		}
		return w
	}

	// The first background observation starts, and is held.
	for g.heldCall() != "observe" {
		if n == 200 {
			t.Fatal("no background observation started in 200 steps")
		}
		next()
	}
	// The window crosses its trigger while it is held: every call returns.
	for {
		if n == 400 {
			t.Fatal("the window did not reach its trigger")
		}
		if w := next(); w.Usage.Step || w.Usage.Total > w.Usage.Trigger {
			break
		}
	}
	if o, _ := buffered(); o {
		t.Fatal("an observation activated while its summarizer was held")
	}

	// Let it go: the buffered observation activates, then a buffered
	// reflection, each on a call after its job finished.
	close(g.gate)
	for o, r := buffered(); !o || !r; o, r = buffered() {
		if n == 600 {
			t.Fatalf("after %d steps: buffered observation %v, buffered reflection %v", n, o, r)
		}
		waitIdle(t, m)
		next()
	}
	if k := g.onPath.Load(); k != 0 {
		t.Errorf("the request path called the summarizer %d times; buffering should have spared it", k)
	}
	t.Logf("%d steps, %d summarizer calls, all in the background", n, g.calls.Load())
}

// Close cancels a background observation in flight and waits for it: the
// summarizer is held at a gate that never opens, so Close returns only
// because the job's context was cancelled.
func TestCloseCancelsBackground(t *testing.T) {
	ctx := context.Background()
	g := newGated()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := mneme.Open(ctx, mneme.Config{Store: st, Policy: observePolicy(), Buffer: true, Compactor: g})
	if err != nil {
		t.Fatal(err)
	}
	th := m.Thread("default", "close")
	begin(ctx, t, th)
	for n := 1; g.heldCall() == ""; n++ {
		if n > 200 {
			t.Fatal("no background job started")
		}
		if _, err := step(ctx, th, n, mneme.WindowOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if n := g.cancelled.Load(); n != 1 {
		t.Fatalf("%d summarizer calls saw their context cancelled, want the one held", n)
	}
	if m.RunningJobs() != 0 {
		t.Fatalf("Close returned with %d jobs running", m.RunningJobs())
	}
}

// Without a summarizer model the observe strategy is extractive: the
// tickets the user mentioned in compacted turns are in the observations,
// verbatim.
func TestExtractiveObserveKeepsTickets(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := observePolicy()
	p.ReflectOver = window.Tokens(40000)
	m, err := mneme.Open(ctx, mneme.Config{Store: st, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	th := m.Thread("default", "tickets")
	begin(ctx, t, th)
	for n := 1; n <= 200; n++ {
		if _, err := step(ctx, th, n, mneme.WindowOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cs, _ := eventsOf(t, m, "tickets")
	var text strings.Builder
	covered := map[int64]bool{} // seqs an observation replaced (the current request stays live: Kept)
	for _, c := range cs {
		if c.Model != compact.ExtractiveModel || c.Fallback != "" {
			t.Fatalf("compacted %+v", c)
		}
		text.WriteString(c.Text)
		for q := c.From; q <= c.To; q++ {
			if !slices.Contains(c.Kept, q) {
				covered[q] = true
			}
		}
	}
	evs, _ := m.Store().Load(ctx, "default", "tickets", 1, 0)
	planted, kept := 0, 0
	for _, ev := range evs {
		if ev.Kind != store.KindMessage || ev.Message.Role != message.User || ev.Seq <= 2 || !covered[ev.Seq] {
			continue
		}
		planted++
		ticket := strings.Fields(ev.Message.TextOf())[3] // "Also check ticket INV-4025 please."
		if strings.Contains(text.String(), ticket) {
			kept++
		} else {
			t.Errorf("ticket %s (seq %d) is not in the observations", ticket, ev.Seq)
		}
	}
	if planted == 0 {
		t.Fatal("no planted ticket was compacted")
	}
	t.Logf("%d/%d planted tickets kept in %d observations", kept, planted, len(cs))
}
