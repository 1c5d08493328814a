package mneme

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/window"
)

// Window snapshots (docs/design.md, "Snapshots beside the log"): a thread's
// materialised window is written beside its log every snapshotEvery events
// and at every compaction, in the background, when the store implements
// store.Snapshots. A cold load reads the snapshot and the events after it,
// O(window + new events), instead of replaying the log, O(log). The log
// stays the definition (I7): a snapshot is used only when it is of this
// version, was taken under the same default policy, model table answer and
// tokenizer, and the log still holds the very event it was taken at;
// otherwise the state is rebuilt from the log, as it always can be.

// snapshotEvery is how many events after the last snapshot make a new one.
const snapshotEvery = 512

// snapshotWriteTimeout bounds one snapshot write, Close included.
const snapshotWriteTimeout = 30 * time.Second

// snapshotVersion is the envelope's version. Bump it (or
// window.SnapshotVersion) when what a replay computes changes: the token
// counts of rendered forms, the projection's system fields.
const snapshotVersion = 1

// snapState tracks a thread's snapshots (guarded by threadState.mu).
type snapState struct {
	seq         int64 // the last snapshot taken (or restored)
	compactions int   // the state's compactions at that point
	writing     bool  // a snapshot is being written
	last        lastEvent
}

// lastEvent names the last event applied, which a snapshot is checked
// against: a thread deleted and written again has other refs and times.
type lastEvent struct {
	Seq int64  `json:"seq"`
	Ref string `json:"ref,omitempty"`
	At  int64  `json:"at"` // unix nanoseconds
}

func lastOf(ev *store.Event) lastEvent {
	return lastEvent{Seq: ev.Seq, Ref: ev.Ref, At: ev.At.UnixNano()}
}

// snapshotEnvelope is what the root package keeps beside the window's
// state. The store holds a uvarint length, the envelope's JSON, then the
// state's encoding (window.Snapshot.Encode): the state is decoded in one
// pass, not scanned once more as a raw field.
type snapshotEnvelope struct {
	V      int             `json:"v"`
	Base   json.RawMessage `json:"base"` // the Manager's default policy
	Tok    string          `json:"tok"`
	Last   lastEvent       `json:"last"`
	System snapSystem      `json:"system"`
	// Recall is the request auto-recall last searched for and the
	// compactions it searched at (threadState.tried), when nothing
	// came into the log after that search: a restart that finds the log
	// still ending at the snapshot does not search again for a request
	// whose search found nothing to show, as the process before it would
	// not have. Its search would read the same messages and find the same
	// nothing, so the window is still a replay's (I7); once the log has
	// moved, the next window searches. Never with vectors (Recall.Hybrid):
	// their embeddings come in the background, and a later search can find
	// what an earlier one could not in the same log. Absent (older
	// snapshots): the next window searches.
	Recall *recallTry `json:"recall,omitempty"`
}

// snapSystem is the part of the projection every window reads (the
// system prompt); the rest of it is rebuilt from the log when a history is
// next compared (projector.broken).
type snapSystem struct {
	LeadSys []message.Message `json:"lead,omitempty"`
	System  []message.Message `json:"system,omitempty"`
	SysSet  bool              `json:"set,omitempty"`
	Parent  string            `json:"parent,omitempty"`
}

// errStaleSnapshot: the snapshot does not describe this log under this
// configuration; the state is rebuilt from the log.
var errStaleSnapshot = errors.New("mneme: stale window snapshot")

// restoreSnapshot loads ts from the thread's snapshot and the events after
// it. It reports false, with ts untouched, when there is no usable
// snapshot; an error only when reading the log fails.
func (t *Thread) restoreSnapshot(ctx context.Context, ts *threadState) (bool, error) {
	snaps, ok := store.As[store.Snapshots](t.m.store)
	if !ok {
		return false, nil
	}
	seq, data, err := snaps.GetSnapshot(ctx, t.tenant, t.id)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		t.m.log.Warn("window snapshot unreadable; rebuilding from the log", "tenant", t.tenant, "thread", t.id, "err", err)
		return false, nil
	}
	st, env, err := t.decodeSnapshot(seq, data, ts)
	if err != nil {
		if !errors.Is(err, errStaleSnapshot) {
			t.m.log.Warn("window snapshot refused; rebuilding from the log", "tenant", t.tenant, "thread", t.id, "err", err)
		}
		return false, nil
	}
	// The log must still hold the event the snapshot was taken at.
	evs, err := t.m.store.Load(ctx, t.tenant, t.id, seq, 0)
	if err != nil {
		return false, err
	}
	if len(evs) == 0 || lastOf(&evs[0]) != env.Last {
		return false, nil
	}
	budget, c, err := t.m.modelInfo(st.Policy())
	if err != nil || budget != st.Budget() || c.Name() != env.Tok {
		return false, nil
	}
	sz := sizer{cache: t.m.tokens, c: c}
	st.SetSizer(sz)
	ts.st, ts.policy, ts.tok, ts.sz = st, st.Policy(), env.Tok, sz
	ts.proj = newLogProjector()
	ts.proj.leadSys, ts.proj.system, ts.proj.sysSet, ts.proj.parent = env.System.LeadSys, env.System.System, env.System.SysSet, env.System.Parent
	ts.proj.started, ts.proj.lastSeq = true, seq
	ts.proj.broken = true // its units are rebuilt from the log on first use
	ts.snap = snapState{seq: seq, compactions: st.Compactions(), last: env.Last}
	if r := env.Recall; r != nil && r.Seq <= seq && len(evs) == 1 && !t.m.recall.Hybrid() {
		ts.tried = recallTry{Seq: r.Seq, At: r.At, Last: seq}
	}
	if err := t.applyAll(ts, evs[1:]); err != nil {
		ts.clear()
		return false, err
	}
	return true, nil
}

// decodeSnapshot checks the envelope against this Manager and decodes the
// state it holds.
func (t *Thread) decodeSnapshot(seq int64, data []byte, ts *threadState) (*window.State, *snapshotEnvelope, error) {
	n, k := binary.Uvarint(data)
	if k <= 0 || n > uint64(len(data)-k) {
		return nil, nil, errors.New("snapshot: bad envelope length")
	}
	var env snapshotEnvelope
	if err := json.Unmarshal(data[k:k+int(n)], &env); err != nil {
		return nil, nil, fmt.Errorf("snapshot: %w", err)
	}
	state := data[k+int(n):]
	base, err := json.Marshal(t.m.policy)
	if err != nil {
		return nil, nil, err
	}
	if env.V != snapshotVersion || string(env.Base) != string(base) || env.Last.Seq != seq {
		return nil, nil, errStaleSnapshot
	}
	// The sizer is set once the model is known; counting before that is a
	// bug Restore does not commit (it only decodes).
	st, err := window.Restore(state, nil)
	if errors.Is(err, window.ErrSnapshotVersion) {
		return nil, nil, errStaleSnapshot
	}
	if err != nil {
		return nil, nil, err
	}
	if st.LastSeq() != seq {
		return nil, nil, fmt.Errorf("snapshot at seq %d holds a state at %d", seq, st.LastSeq())
	}
	return st, &env, nil
}

// snapshotDue starts writing ts's snapshot in the background when enough
// happened since the last one (snapshotEvery events, or a compaction). It
// runs under ts.mu, at the end of each locked call, and costs a copy of the
// window; the encoding and the write happen off the request path.
func (m *Engine) snapshotDue(ts *threadState) {
	if ts.st == nil || len(ts.pending) > 0 || ts.snap.writing || m.bg.Err() != nil {
		return
	}
	last := ts.st.LastSeq()
	if last != ts.snap.last.Seq || last <= ts.snap.seq {
		return // the last event is unknown (not applied here) or snapshotted
	}
	if last-ts.snap.seq < snapshotEvery && ts.st.Compactions() == ts.snap.compactions {
		return
	}
	if !ts.proj.started {
		return // the system prompt may still grow: too early to be worth it
	}
	snaps, ok := store.As[store.Snapshots](m.store)
	if !ok {
		return
	}
	base, err := json.Marshal(m.policy)
	if err != nil {
		return
	}
	sn := ts.st.Snapshot()
	env := snapshotEnvelope{V: snapshotVersion, Base: base, Tok: ts.tok, Last: ts.snap.last,
		System: snapSystem{LeadSys: ts.proj.leadSys, System: ts.proj.system, SysSet: ts.proj.sysSet, Parent: ts.proj.parent}}
	if tried := ts.tried; tried.Seq > 0 && tried.Last == last && !m.recall.Hybrid() {
		env.Recall = &tried
	}
	ts.snap.writing = true
	ts.snap.seq, ts.snap.compactions = last, ts.st.Compactions()
	key := ts.key
	m.pinAgain(ts)
	// Close waits for the write; it is not one of the bounded jobs
	// (RunningJobs counts model calls).
	m.jobs.Add(1)
	go func() {
		defer m.jobs.Done()
		defer m.unpin(ts)
		err := m.writeSnapshot(snaps, key, &env, sn)
		ts.mu.Lock()
		ts.snap.writing = false
		ts.mu.Unlock()
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			m.log.Warn("window snapshot not written", "tenant", key.tenant, "thread", key.id, "seq", env.Last.Seq, "err", err)
		}
	}()
}

func (m *Engine) writeSnapshot(snaps store.Snapshots, key threadKey, env *snapshotEnvelope, sn *window.Snapshot) error {
	state, err := sn.Encode()
	if err != nil {
		return err
	}
	head, err := json.Marshal(env)
	if err != nil {
		return err
	}
	data := binary.AppendUvarint(make([]byte, 0, len(head)+len(state)+binary.MaxVarintLen64), uint64(len(head)))
	data = append(append(data, head...), state...)
	// Close stops the background work and then waits for it: a snapshot
	// already encoded is still written (bounded), so that a clean shutdown
	// leaves the cold start it was taken for.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.bg), snapshotWriteTimeout)
	defer cancel()
	return snaps.PutSnapshot(ctx, key.tenant, key.id, env.Last.Seq, data)
}
