package mneme_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/window"
)

// Two engines (two replicas) on one store cross the trigger of one thread
// at the same time: the summarizer runs once, one compaction lands, and the
// replica that did not hold the lease answers without waiting for it: its
// call returns while a's summarizer is held at a gate.
func TestLeaseOneSummaryAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	p := *smallPolicy()
	p.Strategy = window.Observe
	comp := newGated()
	open := func() *mneme.Engine {
		st := openSQLite(t, path, &p).Store()
		m, err := mneme.Open(ctx, mneme.Config{Store: st, Policy: &p, Compactor: comp})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	a, b := open(), open()
	th := a.Thread("default", "lease")
	begin(ctx, t, th)
	// Grow the thread to just under its trigger.
	for n := 1; ; n++ {
		w, err := th.Window(ctx, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if w.Usage.Total > w.Usage.Trigger-900 {
			break
		}
		if _, err := step(ctx, th, n, mneme.WindowOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	big := func(who string) []message.Message {
		return []message.Message{message.NewText(message.User, who+": "+strings.Repeat("more context ", 400))}
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := a.Thread("default", "lease").AppendWindow(ctx, big("a"), mneme.WindowOptions{})
		done <- err
	}()
	if what := <-comp.started; what != "observe" { // a holds the lease, its summarizer at the gate
		t.Fatalf("a's summarizer call is %q, want observe", what)
	}
	_, wb, err := b.Thread("default", "lease").AppendWindow(ctx, big("b"), mneme.WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("a's call returned (%v) before its summarizer was let go", err)
	default:
	}
	close(comp.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if wb.Usage.Total > wb.Usage.Budget {
		t.Fatalf("b's window is over budget")
	}
	if n := comp.calls.Load(); n != 1 {
		t.Fatalf("the summarizer ran %d times, want once", n)
	}
	evs, err := a.Store().Load(ctx, "default", "lease", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	compacted := 0
	for _, ev := range evs {
		if ev.Kind == store.KindCompacted {
			compacted++
		}
	}
	if compacted != 1 {
		t.Fatalf("%d compacted events, want 1", compacted)
	}
	// b catches the compaction up from the log on its next call.
	wb2, err := b.Thread("default", "lease").Window(ctx, mneme.WindowOptions{})
	if err != nil || wb2.Usage.Compactions != 1 {
		t.Fatalf("b sees %d compactions (%v)", wb2.Usage.Compactions, err)
	}
}
