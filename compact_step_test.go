package mneme_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/window"
)

// leaseCounter is an appendCounter that is a store.Leaser (always
// granted), counting the leases taken.
type leaseCounter struct {
	appendCounter
	leases atomic.Int64
}

func (c *leaseCounter) TryLease(context.Context, string, string, string, string, time.Duration) (bool, error) {
	c.leases.Add(1)
	return true, nil
}

func (c *leaseCounter) ReleaseLease(context.Context, string, string, string, string) error {
	return nil
}

// modelCompactor is a Compactor the engine cannot tell from one that calls
// a model (it observes extractively); it notes whether the log held the
// test's request when it was called.
type modelCompactor struct {
	mneme.Compactor
	st     store.Store
	logged atomic.Bool
}

func (c *modelCompactor) Observe(ctx context.Context, in mneme.CompactInput) (window.CompactedData, error) {
	evs, err := c.st.Load(ctx, in.Tenant, in.Thread, 1, 0)
	if err != nil {
		return window.CompactedData{}, err
	}
	for _, ev := range evs {
		if ev.Message != nil && strings.HasPrefix(ev.Message.PlainText(), "Now check") {
			c.logged.Store(true)
		}
	}
	return c.Compactor.Observe(ctx, in)
}

// TestDeferredStep: a deferred request (what the proxy sends) that crosses
// the trigger is compacted, and when no model call went into the step its
// events are written with the request and the reply in the turn's one
// append, without a lease; the log then holds the request, the step and
// the reply, in that order, and replaying it gives the window the turn's
// engine shows (I7). A step that may call a model keeps the lease and
// writes the request before the call.
func TestDeferredStep(t *testing.T) {
	cases := []struct {
		name        string
		strategy    window.Strategy
		model       bool  // the compactor may call a model
		wantAppends int64 // by the turn; 0: more than one
	}{
		{name: "mask", strategy: window.Mask, wantAppends: 1},
		{name: "observe, extractive", strategy: window.Observe, wantAppends: 1},
		{name: "observe, model", strategy: window.Observe, model: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			st := &leaseCounter{appendCounter: appendCounter{Store: inmem.New()}}
			var comp mneme.Compactor = mneme.NewCompactor(compact.Extractive{})
			mc := &modelCompactor{Compactor: comp, st: st}
			if c.model {
				comp = mc
			}
			p := smallPolicy()
			p.Strategy = c.strategy
			p.AutoRecall = true
			m, err := mneme.Open(ctx, mneme.Config{Store: st, Policy: p, Compactor: comp})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			th := m.Thread("default", "t")
			begin(ctx, t, th)
			// Grow the thread to just under its trigger.
			var w *window.Window
			for n := 1; ; n++ {
				if w, err = th.Window(ctx, mneme.WindowOptions{}); err != nil {
					t.Fatal(err)
				}
				if w.Usage.Total > w.Usage.Trigger-1500 {
					break
				}
				if _, err := step(ctx, th, n, mneme.WindowOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			logged := len(lines(t, m, "t"))
			appends, leases := st.n.Load(), st.leases.Load()
			req := message.NewText(message.User, "Now check INV-4401 again: "+strings.Repeat("the checkout totals look wrong ", 300))
			x, err := th.AppendHistory(ctx, []message.Message{req}, mneme.HistoryOptions{Defer: true, Append: true})
			if err != nil {
				t.Fatal(err)
			}
			if x.Window.Usage.Compactions <= w.Usage.Compactions {
				t.Fatalf("the request made no compaction (%d, %d before): the test proves nothing", x.Window.Usage.Compactions, w.Usage.Compactions)
			}
			if _, err := x.Record(ctx, message.NewText(message.Assistant, "Done.")); err != nil {
				t.Fatal(err)
			}
			x.Close()
			if got := st.n.Load() - appends; got != c.wantAppends && (c.wantAppends > 0 || got < 2) {
				t.Errorf("the turn made %d appends, want %d (0: more than one)", got, c.wantAppends)
			}
			if got := st.leases.Load() - leases; (got > 0) != c.model {
				t.Errorf("the turn took %d leases; want some: %v", got, c.model)
			}
			if c.model && !mc.logged.Load() {
				t.Error("the model was called before the request was in the log")
			}
			got := lines(t, m, "t")
			if len(got) != logged+2 || !strings.HasPrefix(got[logged], "user:Now check") || got[logged+1] != "assistant:Done." {
				t.Fatalf("the log's last messages are %q, want the request and the reply", got[logged:])
			}
			evs, err := st.Load(ctx, "default", "t", 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, ev := range evs {
				if ev.Seq > evs[len(evs)-1].Seq-8 {
					kinds = append(kinds, string(ev.Kind))
				}
			}
			if i := strings.Index(strings.Join(kinds, " "), string(store.KindCompacted)); i < 0 {
				t.Errorf("the log ends %q: no compaction after the request", kinds)
			}
			// The turn's engine's window, and a replay of the log alone
			// (copied into a store without snapshots of it).
			warm, err := th.Window(ctx, mneme.WindowOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cp := inmem.New()
			for i := range evs {
				evs[i].Seq = 0
			}
			if _, err := cp.Append(ctx, "default", "t", 0, evs); err != nil {
				t.Fatal(err)
			}
			m2, err := mneme.Open(ctx, mneme.Config{Store: cp, Policy: p, Compactor: comp})
			if err != nil {
				t.Fatal(err)
			}
			defer m2.Close()
			cold, err := m2.Thread("default", "t").Window(ctx, mneme.WindowOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sameReplay(t, warm.Messages, cold.Messages)
		})
	}
}

// TestDeferredFirstRequestRecalls: a new thread's first request, deferred,
// brings a history the window cannot hold; the step leaves the planted
// fact out, and the request asks about it. Its messages are pending on the
// state, not yet in the log, so the archive search could not find the
// fact unless they are written first: the window recalls it.
func TestDeferredFirstRequestRecalls(t *testing.T) {
	ctx := context.Background()
	st := &appendCounter{Store: inmem.New()}
	p := smallPolicy()
	m, err := mneme.Open(ctx, mneme.Config{Store: st, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var cfg strings.Builder
	for l := 0; l < 30; l++ {
		if l == 4 {
			cfg.WriteString(plantedFact + "\n")
			continue
		}
		fmt.Fprintf(&cfg, "config/shop.yaml:%d: setting_%d: value_%d\n", l, l, l)
	}
	hist := []message.Message{
		message.NewText(message.System, "You are an agent."),
		message.NewText(message.User, "Now fix the checkout rounding."),
		message.NewToolCalls("Reading the config.", message.Part{ToolCallID: "call_cfg", ToolName: "read_file", Arguments: `{"path":"config/shop.yaml"}`}),
		message.NewToolResult("call_cfg", cfg.String()),
	}
	for n := 1; n <= 60; n++ {
		id := fmt.Sprintf("call_%d", n)
		var body strings.Builder
		for l := 0; l < 40; l++ {
			fmt.Fprintf(&body, "src/shop/checkout_%d.go:%d: total := round(sum(cart), %d)\n", n, l, l)
		}
		hist = append(hist,
			message.NewToolCalls(fmt.Sprintf("step %d", n), message.Part{ToolCallID: id, ToolName: "read_file", Arguments: `{"path":"src/shop"}`}),
			message.NewToolResult(id, body.String()))
	}
	hist = append(hist, message.NewText(message.Assistant, "Rounding fixed."), message.NewText(message.User, "Which vault path holds the deploy key?"))
	x, err := m.Thread("default", "new").AppendHistory(ctx, hist, mneme.HistoryOptions{Defer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	w := x.Window
	if w.Usage.Compactions == 0 && len(w.Usage.Masked) == 0 {
		t.Fatal("the first window took no step: the test proves nothing")
	}
	text := windowText(w.Messages)
	if strings.Count(text, "deploy-7731") != 1 || w.Usage.RecallBlock == nil || len(w.Usage.RecallBlock.Hits) == 0 {
		t.Fatalf("the first window does not recall the planted fact once (block %+v)", w.Usage.RecallBlock)
	}
	if _, err := x.Record(ctx, message.NewText(message.Assistant, "secret/shop/deploy-7731")); err != nil {
		t.Fatal(err)
	}
}
