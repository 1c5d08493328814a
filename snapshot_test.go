package mneme_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/embed"
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

// snapshotFile opens a SQLite store in a new file, closed when the test
// ends, and returns it with a function that opens an engine with policy p
// on it (or on a wrapper of it).
func snapshotFile(t *testing.T, p *mneme.Policy) (*sqlite.Store, func(store.Store) *mneme.Engine) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, func(s store.Store) *mneme.Engine {
		m, err := mneme.Open(ctx, mneme.Config{Store: s, Policy: p})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}

// TestSnapshotWindowIsReplay: after a session with compactions, masking and
// a system prompt change, a cold Manager reads the window snapshot and the
// events after it, and its windows are byte-identical to those of a
// Manager that replays the log alone (I7), now and after more appends.
func TestSnapshotWindowIsReplay(t *testing.T) {
	ctx := context.Background()
	st, open := snapshotFile(t, smallPolicy())
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

// searchSpy counts the searches that reach the store.
type searchSpy struct {
	store.Store
	n atomic.Int64
}

func (s *searchSpy) Unwrap() store.Store { return s.Store }
func (s *searchSpy) Search(ctx context.Context, tenant string, q store.SearchQuery) ([]store.Hit, error) {
	s.n.Add(1)
	return s.Store.Search(ctx, tenant, q)
}

// TestSnapshotKeepsFruitlessRecall: a request whose auto-recall search
// found nothing to show is not searched for again after a restart that
// reads the window snapshot, as the process before it would not have
// searched again; the window is still the replay's (I7), and the next
// request is searched for.
func TestSnapshotKeepsFruitlessRecall(t *testing.T) {
	ctx := context.Background()
	st, open := snapshotFile(t, nil)
	fillAgent(t, st, "t", 2000)
	spy := &searchSpy{Store: st}
	m := open(spy)
	w, err := m.Thread("default", "t").Window(ctx, mneme.WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !w.Usage.Step || spy.n.Load() == 0 || w.Usage.RecallBlock != nil {
		t.Fatalf("the first window should compact and search in vain: step %v, %d searches, recalled %+v",
			w.Usage.Step, spy.n.Load(), w.Usage.RecallBlock)
	}
	m.Close() // waits for the snapshot write
	seq, _, err := st.GetSnapshot(ctx, "default", "t")
	last, _ := st.LastSeq(ctx, "default", "t")
	if err != nil || seq != last {
		t.Fatalf("snapshot at %d (%v), the log at %d", seq, err, last)
	}
	if !snapshotNamesRecall(t, st, "t") {
		t.Fatal("the snapshot does not name the search")
	}

	// restart opens an engine on the snapshot and one on the log alone,
	// and returns their windows and the first one's searches.
	restart := func() (fromSnap, fromLog []byte, searches int64) {
		spy := &searchSpy{Store: st}
		var ws [2][]byte
		for i, s := range []store.Store{spy, logOnly{st}} {
			m := open(s)
			w, err := m.Thread("default", "t").Window(ctx, mneme.WindowOptions{})
			m.Close()
			if err != nil {
				t.Fatal(err)
			}
			ws[i] = windowJSON(t, w)
		}
		return ws[0], ws[1], spy.n.Load()
	}
	a, b, n := restart()
	if n != 0 {
		t.Fatalf("the restart searched %d times for the request searched before it", n)
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("the window from the snapshot differs from the replay:\n%s\n---\n%s", a, b)
	}

	// A reply comes into the log after the snapshot (no compaction, so no
	// new snapshot): a search would read one message more, so the restart
	// searches again, as a replay does.
	m = open(st)
	if _, err := m.Thread("default", "t").Append(ctx, message.NewText(message.Assistant, "Working on it.")); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if now, _, _ := st.GetSnapshot(ctx, "default", "t"); now != seq {
		t.Fatalf("a snapshot at %d after the reply: the test proves little", now)
	}
	a, b, n = restart()
	if n == 0 {
		t.Fatal("the restart trusted a search made before the log moved")
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("after the reply, the window from the snapshot differs from the replay:\n%s\n---\n%s", a, b)
	}

	// A search, then more than snapshotEvery replies, and a snapshot at
	// the last of them: that snapshot does not vouch for the search,
	// which read fewer messages than the log now holds.
	m = open(st)
	th := m.Thread("default", "t")
	if _, err := th.Window(ctx, mneme.WindowOptions{}); err != nil {
		t.Fatal(err)
	}
	replies := make([]message.Message, 600)
	for i := range replies {
		replies[i] = message.NewText(message.Assistant, fmt.Sprintf("Still working (%d).", i))
	}
	if _, err := th.Append(ctx, replies...); err != nil {
		t.Fatal(err)
	}
	m.Close()
	seq, _, err = st.GetSnapshot(ctx, "default", "t")
	last, _ = st.LastSeq(ctx, "default", "t")
	if err != nil || seq != last {
		t.Fatalf("after the replies, a snapshot at %d (%v), the log at %d", seq, err, last)
	}
	a, b, n = restart()
	if n == 0 {
		t.Fatal("the restart trusted a search made before the replies")
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("after the replies, the window from the snapshot differs from the replay:\n%s\n---\n%s", a, b)
	}

	// The next request is searched for.
	spy = &searchSpy{Store: st}
	m = open(spy)
	defer m.Close()
	if _, _, err := m.Thread("default", "t").AppendWindow(ctx, []message.Message{
		message.NewText(message.User, "Now run the tests again."),
	}, mneme.WindowOptions{}); err != nil {
		t.Fatal(err)
	}
	if spy.n.Load() == 0 {
		t.Fatal("the next request was not searched for")
	}
}

// snapshotNamesRecall reports whether thread's window snapshot names an
// auto-recall search (its envelope's "recall").
func snapshotNamesRecall(t *testing.T, st store.Snapshots, thread string) bool {
	t.Helper()
	_, data, err := st.GetSnapshot(context.Background(), "default", thread)
	if err != nil {
		t.Fatal(err)
	}
	n, k := binary.Uvarint(data)
	if k <= 0 || n > uint64(len(data)-k) {
		t.Fatal("snapshot: bad envelope length")
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(data[k:k+int(n)], &env); err != nil {
		t.Fatal(err)
	}
	_, ok := env["recall"]
	return ok
}

// TestSnapshotRecallNotWithVectors: with an embedder, a snapshot never
// names a search, so a restart always searches: embeddings come in the
// background, and a later search can find what an earlier one could not
// in the same log.
func TestSnapshotRecallNotWithVectors(t *testing.T) {
	ctx := context.Background()
	st, _ := snapshotFile(t, nil)
	fillAgent(t, st, "t", 2000)
	spy := &searchSpy{Store: st}
	m, err := mneme.Open(ctx, mneme.Config{Store: spy, Embedder: embed.Hashing{Dims: 64}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Thread("default", "t").Window(ctx, mneme.WindowOptions{}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if spy.n.Load() == 0 {
		t.Fatal("the first window did not search: the test proves little")
	}
	if snapshotNamesRecall(t, st, "t") {
		t.Fatal("with vectors, the snapshot names the search")
	}
}
