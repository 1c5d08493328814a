package window

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
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
			// The calls a result can pair with are not in the encoding:
			// Restore indexes them again, and must find what replay has.
			if !reflect.DeepEqual(got.calls, pure.calls) || !reflect.DeepEqual(got.pending, pure.pending) {
				t.Fatalf("seed %d cut %d: calls after restore differ from replay", seed, cut)
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
	// The encoding: snapMark, the JSON's length, the JSON, the messages.
	n, k := binary.Uvarint(data[1:])
	if data[0] != snapMark || k <= 0 {
		t.Fatalf("not a version-%d encoding: % x", SnapshotVersion, data[:8])
	}
	js, msgs := data[1+k:1+k+int(n)], data[1+k+int(n):]
	withVersion := func(v int) []byte {
		var m map[string]any
		if err := json.Unmarshal(js, &m); err != nil {
			t.Fatal(err)
		}
		m["v"] = v
		other, _ := json.Marshal(m)
		return append(append(binary.AppendUvarint([]byte{snapMark}, uint64(len(other))), other...), msgs...)
	}
	if st, err := Restore(withVersion(SnapshotVersion), charSizer{}); err != nil || st == nil {
		t.Fatalf("the reassembled snapshot does not restore: %v", err)
	}
	// A version-3 snapshot: JSON alone.
	var old map[string]any
	json.Unmarshal(js, &old)
	old["v"] = 3
	v3, _ := json.Marshal(old)
	for name, c := range map[string]struct {
		data []byte
		want error
	}{
		"version":   {withVersion(SnapshotVersion + 1), ErrSnapshotVersion},
		"json v3":   {v3, ErrSnapshotVersion},
		"garbage":   {[]byte("{\"v\":"), nil},
		"empty":     {nil, nil},
		"truncated": {data[:len(data)-1], nil},
		"trailing":  {append(append([]byte(nil), data...), 0), nil},
		"no json":   {[]byte{snapMark, 0xff}, nil},
	} {
		st, err := Restore(c.data, charSizer{})
		if err == nil || st != nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: Restore = %v, %v", name, st, err)
		}
	}
}

// TestSnapshotIsWindowSized: the snapshot of a long session that compacted
// many times holds nothing of the calls that left the window (version 1
// held every call id of the log, so a cold start grew with it), and a
// result arriving for such a call afterwards is an orphan, left out of the
// window (I4) alike by replay and by a restored snapshot.
func TestSnapshotIsWindowSized(t *testing.T) {
	d := newDriver(t, DefaultPolicy(), 12000)
	d.add(message.NewText(message.System, "You are a coding agent."), message.NewText(message.User, "Goal: fix INV-4401"))
	for i := range 400 {
		if i%5 == 0 {
			d.add(message.NewText(message.User, fmt.Sprintf("now step %d", i)))
		}
		id := fmt.Sprintf("call_%d", i)
		d.add(message.NewToolCalls("", message.Part{ToolCallID: id, ToolName: "grep", Arguments: `{"q":"x"}`}),
			message.NewToolResult(id, strings.Repeat(fmt.Sprintf("match %d\n", i), 40)))
		if _, err := d.window(); err != nil {
			t.Fatal(err)
		}
	}
	if d.comps < 5 {
		t.Fatalf("%d compactions: the test needs many", d.comps)
	}
	data, err := d.st.Snapshot().Encode()
	if err != nil {
		t.Fatal(err)
	}
	forms := d.st.FormsOf()
	var covered []string
	for _, ev := range d.log {
		if ev.Message == nil || forms[ev.Seq] != Covered {
			continue
		}
		for _, c := range ev.Message.ToolCalls() {
			covered = append(covered, c.ToolCallID)
			if bytes.Contains(data, []byte(fmt.Sprintf("%q", c.ToolCallID))) {
				t.Fatalf("the snapshot names call %s, which left the window at seq %d", c.ToolCallID, ev.Seq)
			}
		}
	}
	if len(covered) < 100 {
		t.Fatalf("%d covered calls: the test would not cover the log's growth", len(covered))
	}
	if len(d.st.calls) >= len(covered) {
		t.Fatalf("the state indexes %d calls, more than the %d that left the window", len(d.st.calls), len(covered))
	}

	restored, err := Restore(data, charSizer{})
	if err != nil {
		t.Fatal(err)
	}
	late := message.NewToolResult(covered[0], "an orphan now: a result long after its call was compacted")
	d.add(late)
	if err := restored.Apply(d.log[len(d.log)-1]); err != nil {
		t.Fatal(err)
	}
	pure := replay(t, d, 0, nil)
	for name, st := range map[string]*State{"replay": pure, "restored": restored} {
		if f := st.FormsOf()[int64(len(d.log))]; f != Dropped {
			t.Errorf("%s: a result to a compacted call is %s, want %s", name, f, Dropped)
		}
	}
	// Window first: it counts the memory block, which the restored state
	// had counted already and replay had not.
	if !bytes.Equal(windowBytes(t, d, restored), windowBytes(t, d, pure)) {
		t.Fatal("after a late result, the restored window differs from replay")
	}
	if !bytes.Equal(stateBytes(t, restored), stateBytes(t, pure)) {
		t.Fatal("after a late result, the restored state differs from replay")
	}
	w, err := d.st.Build(d.req)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, d, w)
}

// TestLateResultIsOrphan: a result that comes after its call was closed
// with a synthetic result (its step ended) follows no open call, so it is
// left out of the window (I4), as is a second result to the same call.
func TestLateResultIsOrphan(t *testing.T) {
	d := newDriver(t, DefaultPolicy(), 12000)
	d.add(message.NewText(message.System, "sys"),
		message.NewToolCalls("", message.Part{ToolCallID: "h", ToolName: "ls", Arguments: "{}"}),
		message.NewToolResult("h", "head result"),
		message.NewText(message.User, "goal"))
	d.add(message.NewToolCalls("", message.Part{ToolCallID: "a", ToolName: "grep", Arguments: "{}"}),
		message.NewText(message.Assistant, "moving on"),
		message.NewToolResult("a", "an orphan: late"),
		message.NewToolCalls("", message.Part{ToolCallID: "b", ToolName: "grep", Arguments: "{}"}),
		message.NewToolResult("b", "b's result"),
		message.NewToolResult("b", "an orphan: b's second result"))
	w, err := d.window()
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, d, w)
	forms := d.st.FormsOf()
	for seq, want := range map[int64]Form{3: Raw, 7: Dropped, 9: Raw, 10: Dropped} {
		if forms[seq] != want {
			t.Errorf("seq %d is %s, want %s", seq, forms[seq], want)
		}
	}
}

// FuzzRestore: a snapshot read back from a store is outside input (a
// damaged file, another build's bytes): any bytes restore to a state or
// are refused, never a panic.
func FuzzRestore(f *testing.F) {
	d := newDriver(f, DefaultPolicy(), 12000)
	genThread(d, rand.New(rand.NewPCG(1, 1)), 20, func(*Window) {})
	data, err := d.st.Snapshot().Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(data[:len(data)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := Restore(data, charSizer{})
		if (st == nil) == (err == nil) {
			t.Fatalf("Restore = %v, %v", st, err)
		}
	})
}
