package window

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"testing"
)

// TestSnapshotRestoreIsReplay cuts random sessions (compactions, masking,
// eviction, dangling calls, orphans) at many points: restoring a snapshot
// taken there and applying the rest of the log must give, byte for byte,
// the window and the whole state that applying the log alone gives (I7).
func TestSnapshotRestoreIsReplay(t *testing.T) {
	for seed := uint64(0); seed < 12; seed++ {
		d := newDriver(t, DefaultPolicy(), 12000)
		genThread(d, rand.New(rand.NewPCG(seed, 7)), 150, func(*Window) {})
		if d.comps == 0 {
			t.Fatalf("seed %d: no compaction: the test would not cover one", seed)
		}
		pure := replay(t, d, 0, nil)
		want := stateBytes(t, pure)
		wantWin := windowBytes(t, d, pure)
		for cut := 1; cut < len(d.log); cut += 1 + len(d.log)/23 {
			head := replay(t, d, cut, nil)
			data, err := head.Snapshot().Encode()
			if err != nil {
				t.Fatal(err)
			}
			restored, err := Restore(data, charSizer{})
			if err != nil {
				t.Fatalf("seed %d cut %d: %v", seed, cut, err)
			}
			got := replay(t, d, 0, restored)
			// State first: Build counts a stale memory block, as it did on pure.
			if !bytes.Equal(stateBytes(t, got), want) {
				t.Fatalf("seed %d cut %d: state after restore differs from replay", seed, cut)
			}
			if !bytes.Equal(windowBytes(t, d, got), wantWin) {
				t.Fatalf("seed %d cut %d: window after restore differs from replay", seed, cut)
			}
		}
	}
}

// replay applies the driver's log to st (a fresh state when nil), up to
// event `to` (0: all).
func replay(t *testing.T, d *driver, to int, st *State) *State {
	t.Helper()
	if st == nil {
		var err error
		if st, err = NewState(DefaultPolicy(), 12000, charSizer{}); err != nil {
			t.Fatal(err)
		}
	}
	evs := d.log
	if to > 0 {
		evs = evs[:to]
	}
	for _, ev := range evs {
		if err := st.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func stateBytes(t *testing.T, st *State) []byte {
	t.Helper()
	b, err := st.Snapshot().Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func windowBytes(t *testing.T, d *driver, st *State) []byte {
	t.Helper()
	w, err := st.Build(d.req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSnapshotRefused: another version, or bytes that are not a snapshot,
// are an error (the caller rebuilds from the log), never a state.
func TestSnapshotRefused(t *testing.T) {
	d := newDriver(t, DefaultPolicy(), 12000)
	genThread(d, rand.New(rand.NewPCG(1, 1)), 20, func(*Window) {})
	data, err := d.st.Snapshot().Encode()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m["v"] = SnapshotVersion + 1
	other, _ := json.Marshal(m)
	for name, c := range map[string]struct {
		data []byte
		want error
	}{
		"version": {other, ErrSnapshotVersion},
		"garbage": {[]byte("{\"v\":"), nil},
		"empty":   {nil, nil},
	} {
		st, err := Restore(c.data, charSizer{})
		if err == nil || st != nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: Restore = %v, %v", name, st, err)
		}
	}
}
