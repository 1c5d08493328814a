package mneme_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
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
// its summarizer.
func openObserving(t testing.TB, path string, srv *fakellm.Server, mod func(*mneme.Config)) *mneme.Engine {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mneme.Config{Store: st, Policy: observePolicy(), Summarizer: compact.LLMConfig{URL: srv.URL(), Model: summarizerModel, Timeout: 5 * time.Second}}
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
		name  string
		reply fakellm.Reply
		cause string
	}{
		{"500", fakellm.Reply{Status: 500}, "500"},
		{"timeout", fakellm.Reply{Text: "late", Delay: 3 * time.Second}, "timeout"},
		{"garbage", fakellm.Reply{Malformed: true}, "malformed"},
		{"empty", fakellm.Reply{Text: ""}, "empty output"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			srv := fakellm.Start(fakellm.WithHandler(func(fakellm.Request) fakellm.Reply { return tc.reply }))
			defer srv.Close()
			m := openObserving(t, filepath.Join(t.TempDir(), "m.db"), srv, func(c *mneme.Config) { c.Summarizer.Timeout = 200 * time.Millisecond })
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

// With buffering, the call that crosses the trigger does not wait for a
// summarizer that takes 2 s: the observation was computed in the
// background and activates without a model call on the request path; so
// does the reflection.
func TestBackgroundBuffering(t *testing.T) {
	ctx := context.Background()
	srv := fakellm.Start(fakellm.WithHandler(func(r fakellm.Request) fakellm.Reply {
		rep := fakellm.DefaultReply(r)
		if r.IsSummarization() {
			rep.Delay = 2 * time.Second
		}
		return rep
	}))
	defer srv.Close()
	var mu sync.Mutex
	var activated []mneme.CompactEvent
	m := openObserving(t, filepath.Join(t.TempDir(), "m.db"), srv, func(c *mneme.Config) {
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
	var crossing, slowest time.Duration
	crossed := false
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		observed, reflected := false, false
		for _, ce := range activated {
			observed = observed || ce.Buffered && ce.Compacted != nil && ce.Compacted.Model == summarizerModel
			reflected = reflected || ce.Buffered && ce.Reflected != nil
		}
		return observed && reflected
	}
	n := 0
	for ; n < 200 && !done(); n++ {
		time.Sleep(150 * time.Millisecond) // the agent's model call
		start := time.Now()
		w, err := step(ctx, th, n+1, mneme.WindowOptions{})
		d := time.Since(start)
		if err != nil {
			t.Fatalf("step %d: %v", n+1, err)
		}
		if w.Usage.Total > w.Usage.Budget {
			t.Fatalf("step %d: over budget", n+1)
		}
		slowest = max(slowest, d)
		if !crossed && (w.Usage.Step || w.Usage.Total > w.Usage.Trigger) {
			crossed, crossing = true, d
		}
		if d > time.Second {
			t.Fatalf("step %d took %v: the request path waited for the summarizer", n+1, d)
		}
	}
	if !crossed || !done() {
		t.Fatalf("after %d steps: crossed %v, buffered observation activated %v", n, crossed, done())
	}
	t.Logf("%d steps; the call crossing the trigger took %v, the slowest call %v; %d summarizer requests (2 s each, in the background)", n, crossing, slowest, len(srv.Requests()))
	for _, ce := range activated {
		if ce.Reflected != nil {
			t.Logf("buffered reflection: %d -> %d tokens, level %d, model %s, fallback %q", ce.Reflected.TokensBefore, ce.Reflected.TokensAfter, ce.Reflected.Level, ce.Reflected.Model, ce.Reflected.Fallback)
			break
		}
	}
}

// Close cancels a background observation in flight and waits for it.
func TestCloseCancelsBackground(t *testing.T) {
	ctx := context.Background()
	srv := fakellm.Start(fakellm.WithHandler(func(r fakellm.Request) fakellm.Reply {
		rep := fakellm.DefaultReply(r)
		rep.Delay = 30 * time.Second
		return rep
	}))
	defer srv.Close()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := mneme.Open(ctx, mneme.Config{Store: st, Policy: observePolicy(), Buffer: true,
		Summarizer: compact.LLMConfig{URL: srv.URL(), Model: summarizerModel}})
	if err != nil {
		t.Fatal(err)
	}
	th := m.Thread("default", "close")
	begin(ctx, t, th)
	for n := 1; n <= 40 && len(srv.Requests()) == 0; n++ {
		if _, err := step(ctx, th, n, mneme.WindowOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(srv.Requests()) == 0 {
		t.Fatal("no background job started")
	}
	start := time.Now()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v: the job was not cancelled", d)
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
	covered := int64(0)
	for _, c := range cs {
		if c.Model != compact.ExtractiveModel || c.Fallback != "" {
			t.Fatalf("compacted %+v", c)
		}
		text.WriteString(c.Text)
		covered = max(covered, c.To)
	}
	evs, _ := m.Store().Load(ctx, "default", "tickets", 1, int(covered))
	planted, kept := 0, 0
	for _, ev := range evs {
		if ev.Kind != store.KindMessage || ev.Message.Role != message.User || ev.Seq <= 2 {
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
