package mneme_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/window"
)

// logOnly is hideOptional (bench_test.go): a Manager over it replays the
// log alone.
type logOnly = hideOptional

// loadSpy records where each Load starts, to tell a snapshot load (from
// the snapshot's seq) from a replay (from seq 1).
type loadSpy struct {
	store.Store
	mu    sync.Mutex
	froms []int64
}

func (s *loadSpy) Unwrap() store.Store { return s.Store }
func (s *loadSpy) Load(ctx context.Context, tenant, thread string, from int64, limit int) ([]store.Event, error) {
	s.mu.Lock()
	s.froms = append(s.froms, from)
	s.mu.Unlock()
	return s.Store.Load(ctx, tenant, thread, from, limit)
}

// windowJSON is the window as bytes: messages and usage.
func windowJSON(t *testing.T, w *window.Window) []byte {
	t.Helper()
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSnapshotWindowIsReplay: after a session with compactions, masking and
// a system prompt change, a cold Manager reads the window snapshot and the
// events after it, and its windows are byte-identical to those of a
// Manager that replays the log alone (I7), now and after more appends.
func TestSnapshotWindowIsReplay(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	open := func(s store.Store) *mneme.Engine {
		m, err := mneme.Open(ctx, mneme.Config{Store: s, Policy: smallPolicy()})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := open(st)
	th := m.Thread("default", "snap")
	begin(ctx, t, th)
	for n := 1; n <= 700; n++ {
		if _, err := step(ctx, th, n, mneme.WindowOptions{}); err != nil {
			t.Fatal(err)
		}
		if n == 300 {
			// A system prompt change: an event every later window reads.
			before, _ := st.LastSeq(ctx, "default", "snap")
			if _, err := th.AppendHistory(ctx, []message.Message{message.NewText(message.System, "You are a careful agent."),
				message.NewText(message.User, "Go on.")}, mneme.HistoryOptions{Append: true}); err != nil {
				t.Fatal(err)
			}
			evs, _ := st.Load(ctx, "default", "snap", before+1, 0)
			for _, ev := range evs {
				t.Logf("after the system change: %s %s", ev.Kind, ev.Data)
			}
		}
	}
	m.Close() // waits for the snapshot writes
	seq, _, err := st.GetSnapshot(ctx, "default", "snap")
	if err != nil {
		t.Fatalf("no snapshot after 700 steps: %v", err)
	}
	last, _ := st.LastSeq(ctx, "default", "snap")
	t.Logf("snapshot at seq %d of %d", seq, last)

	for round := 0; round < 2; round++ {
		spy := &loadSpy{Store: st}
		fromSnap, fromLog := open(spy), open(logOnly{st})
		a, err := fromSnap.Thread("default", "snap").Window(ctx, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := fromLog.Thread("default", "snap").Window(ctx, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(spy.froms) == 0 || spy.froms[0] <= 1 {
			t.Fatalf("round %d: the cold load read the log from %v, not from the snapshot", round, spy.froms)
		}
		if !bytes.Equal(windowJSON(t, a), windowJSON(t, b)) {
			t.Fatalf("round %d: the window from the snapshot differs from the replay:\n%s\n---\n%s", round, windowJSON(t, a), windowJSON(t, b))
		}
		if a.Usage.Compactions == 0 {
			t.Fatal("no compaction: the test proves little")
		}
		// More events after the snapshot, written by the snapshot reader.
		for n := 701 + round*40; n <= 740+round*40; n++ {
			if _, err := step(ctx, fromSnap.Thread("default", "snap"), n, mneme.WindowOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		fromSnap.Close()
		fromLog.Close()
	}
}
