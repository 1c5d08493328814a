// Package storetest is the conformance suite every store.Store backend runs:
// call Run from the backend's tests with a function that opens a fresh,
// empty store. It checks the documented semantics of store.Store, including
// the invariants the storage layer carries (I1 nothing lost, I8 tenant
// isolation), through the interface only.
//
// It imports the store and message packages and the testing package, and no
// backend.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// Run runs the conformance suite. open must return a new, empty store for
// each call; Run closes it when the subtest ends (Close must therefore
// tolerate being called again if open also registers it).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"AppendLoad", testAppendLoad},
		{"Conflict", testConflict},
		{"InvalidArguments", testInvalid},
		{"ConcurrentAppend", testConcurrentAppend},
		{"GroupedAppend", testGroupedAppend},
		{"Snapshots", testSnapshots},
		{"TenantIsolation", testTenantIsolation},
		{"DeleteThread", testDeleteThread},
		{"ToolNames", testToolNames},
		{"ThreadsPaging", testThreadsPaging},
		{"LargePayload", testLargePayload},
		{"Unicode", testUnicode},
		{"MessageJSON", testMessageJSON},
		{"Search", testSearch},
		{"SearchFilters", testSearchFilters},
		{"SearchHostile", testSearchHostile},
		{"SearchRules", testSearchRules},
		{"SearchStatistics", testSearchStatistics},
		{"Memories", testMemories},
		{"MemoryNamespaces", testMemoryNamespaces},
		{"MemorySearch", testMemorySearch},
		{"MemoryTTL", testMemoryTTL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { s.Close() })
			tc.fn(t, s)
		})
	}
}

var ctx = context.Background()

func msgEvent(m message.Message) store.Event {
	return store.Event{Kind: store.KindMessage, Message: &m}
}

func text(role message.Role, s string) store.Event {
	return msgEvent(message.NewText(role, s))
}

func mustAppend(t *testing.T, s store.Store, tenant, thread string, after int64, evs ...store.Event) []store.Event {
	t.Helper()
	out, err := s.Append(ctx, tenant, thread, after, evs)
	if err != nil {
		t.Fatalf("Append(%s/%s after %d): %v", tenant, thread, after, err)
	}
	return out
}

func mustLoad(t *testing.T, s store.Store, tenant, thread string) []store.Event {
	t.Helper()
	evs, err := s.Load(ctx, tenant, thread, 0, 0)
	if err != nil {
		t.Fatalf("Load(%s/%s): %v", tenant, thread, err)
	}
	return evs
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sameEvents(t *testing.T, got, want []store.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.Kind != w.Kind || g.Ref != w.Ref || g.Tokens != w.Tokens || !g.At.Equal(w.At) {
			t.Errorf("event %d: got seq=%d kind=%s ref=%s tokens=%d at=%v, want seq=%d kind=%s ref=%s tokens=%d at=%v",
				i, g.Seq, g.Kind, g.Ref, g.Tokens, g.At, w.Seq, w.Kind, w.Ref, w.Tokens, w.At)
		}
		if jsonOf(t, g.Message) != jsonOf(t, w.Message) {
			t.Errorf("event %d: message %s, want %s", i, jsonOf(t, g.Message), jsonOf(t, w.Message))
		}
		if !jsonEqual(g.Data, w.Data) {
			t.Errorf("event %d: data %s, want %s", i, g.Data, w.Data)
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func testAppendLoad(t *testing.T, s store.Store) {
	at := time.Date(2026, 3, 15, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))
	user := text(message.User, "hello")
	user.Tokens = 5
	call := msgEvent(message.NewToolCalls("", message.Part{ToolCallID: "c1", ToolName: "ls", Arguments: `{"dir":"/"}`}))
	call.Tokens = 7
	call.At = at
	note := store.Event{Kind: store.KindNote, Data: json.RawMessage(`{"why":"test"}`)}

	got := mustAppend(t, s, "acme", "t1", 0, user, call, note)
	if len(got) != 3 {
		t.Fatalf("Append returned %d events, want 3", len(got))
	}
	for i, ev := range got {
		if ev.Seq != int64(i+1) {
			t.Errorf("event %d: seq %d, want %d", i, ev.Seq, i+1)
		}
		if ev.At.IsZero() {
			t.Errorf("event %d: zero At not set to now", i)
		}
	}
	if !got[1].At.Equal(at) {
		t.Errorf("given At %v not kept: %v", at, got[1].At)
	}
	if !strings.HasPrefix(got[0].Ref, "m_") || !strings.HasPrefix(got[1].Ref, "m_") || got[0].Ref == got[1].Ref {
		t.Errorf("message refs %q %q: want distinct NewRef()s", got[0].Ref, got[1].Ref)
	}
	sameEvents(t, mustLoad(t, s, "acme", "t1"), got)

	more := mustAppend(t, s, "acme", "t1", 3, text(message.Assistant, "world"))
	if more[0].Seq != 4 {
		t.Fatalf("second append got seq %d, want 4", more[0].Seq)
	}
	all := append(got, more...)
	sameEvents(t, mustLoad(t, s, "acme", "t1"), all)

	for _, c := range []struct {
		from  int64
		limit int
		want  []int64
	}{
		{0, 0, []int64{1, 2, 3, 4}},
		{2, 0, []int64{2, 3, 4}},
		{2, 2, []int64{2, 3}},
		{4, 10, []int64{4}},
		{5, 0, nil},
	} {
		evs, err := s.Load(ctx, "acme", "t1", c.from, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, e := range evs {
			seqs = append(seqs, e.Seq)
		}
		if !slices.Equal(seqs, c.want) {
			t.Errorf("Load(from %d, limit %d) = %v, want %v", c.from, c.limit, seqs, c.want)
		}
	}

	last, err := s.LastSeq(ctx, "acme", "t1")
	if err != nil || last != 4 {
		t.Errorf("LastSeq = %d, %v; want 4", last, err)
	}
	info, err := s.Thread(ctx, "acme", "t1")
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != "t1" || info.Events != 4 || info.Messages != 3 || info.Tokens != 12 {
		t.Errorf("Thread = %+v; want id t1, 4 events, 3 messages, 12 tokens", info)
	}
	if info.Created.IsZero() || info.Updated.Before(info.Created) {
		t.Errorf("Thread created %v updated %v", info.Created, info.Updated)
	}

	ref := got[1].Ref
	th, ev, err := s.EventByRef(ctx, "acme", ref)
	if err != nil || th != "t1" || ev.Seq != 2 || jsonOf(t, ev.Message) != jsonOf(t, got[1].Message) {
		t.Errorf("EventByRef = %q, seq %d, %v", th, ev.Seq, err)
	}
	if _, _, err := s.EventByRef(ctx, "acme", "m_000000000000000000000000"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("EventByRef(unknown) err = %v, want ErrNotFound", err)
	}

	// Unknown threads: empty, not errors (except Thread).
	if evs, err := s.Load(ctx, "acme", "nope", 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("Load(unknown) = %d events, %v", len(evs), err)
	}
	if n, err := s.LastSeq(ctx, "acme", "nope"); err != nil || n != 0 {
		t.Errorf("LastSeq(unknown) = %d, %v", n, err)
	}
	if _, err := s.Thread(ctx, "acme", "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Thread(unknown) err = %v, want ErrNotFound", err)
	}

	// The caller's message is not aliased by the store.
	m := message.NewText(message.User, "original")
	stored := mustAppend(t, s, "acme", "t2", 0, msgEvent(m))
	m.Parts[0].Text = "mutated"
	stored[0].Message.Parts[0].Text = "mutated too"
	if l := mustLoad(t, s, "acme", "t2"); l[0].Message.TextOf() != "original" {
		t.Errorf("stored message changed through an alias: %q", l[0].Message.TextOf())
	}
}

func testConflict(t *testing.T, s store.Store) {
	mustAppend(t, s, "acme", "t", 0, text(message.User, "one"), text(message.User, "two"))
	for _, after := range []int64{0, 1, 3, 10} {
		_, err := s.Append(ctx, "acme", "t", after, []store.Event{text(message.User, "stale")})
		if !errors.Is(err, store.ErrConflict) {
			t.Errorf("Append after %d on a thread at 2: err = %v, want ErrConflict", after, err)
		}
	}
	if _, err := s.Append(ctx, "acme", "new", 1, []store.Event{text(message.User, "x")}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Append after 1 on a new thread: err = %v, want ErrConflict", err)
	}
	evs := mustLoad(t, s, "acme", "t")
	if len(evs) != 2 {
		t.Fatalf("a conflicting append wrote something: %d events", len(evs))
	}
	if _, err := s.Thread(ctx, "acme", "new"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a conflicting append created a thread: %v", err)
	}
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "stale"})
	if err != nil || len(hits) != 0 {
		t.Errorf("a conflicting append was indexed: %v, %v", hits, err)
	}
	// A batch with a bad event writes nothing either.
	_, err = s.Append(ctx, "acme", "t", 2, []store.Event{text(message.User, "ok"), {Kind: "bogus"}})
	if !errors.Is(err, store.ErrInvalid) {
		t.Errorf("bad batch err = %v, want ErrInvalid", err)
	}
	if n, _ := s.LastSeq(ctx, "acme", "t"); n != 2 {
		t.Errorf("a rejected batch was partly written: last seq %d", n)
	}
}

func testInvalid(t *testing.T, s store.Store) {
	ok := []store.Event{text(message.User, "x")}
	long := strings.Repeat("x", 300)
	cases := []struct {
		name           string
		tenant, thread string
		evs            []store.Event
	}{
		{"empty tenant", "", "t", ok},
		{"empty thread", "a", "", ok},
		{"long thread", "a", long, ok},
		{"unknown kind", "a", "t", []store.Event{{Kind: "gossip"}}},
		{"message event without message", "a", "t", []store.Event{{Kind: store.KindMessage}}},
		{"bad role", "a", "t", []store.Event{msgEvent(message.NewText("wizard", "x"))}},
		{"bad data", "a", "t", []store.Event{{Kind: store.KindNote, Data: json.RawMessage(`{nope`)}}},
		{"control character in a ref", "a", "t", []store.Event{{Kind: store.KindMessage, Message: ok[0].Message, Ref: "m_\x01x"}}},
		{"ref starting with a control character", "a", "t", []store.Event{{Kind: store.KindMessage, Message: ok[0].Message, Ref: "\x01" + strings.Repeat("0", 16)}}},
		{"DEL in a ref", "a", "t", []store.Event{{Kind: store.KindMessage, Message: ok[0].Message, Ref: "a\x7fb"}}},
	}
	for _, c := range cases {
		if _, err := s.Append(ctx, c.tenant, c.thread, 0, c.evs); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: Append err = %v, want ErrInvalid", c.name, err)
		}
	}
	if _, err := s.Load(ctx, "", "t", 0, 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Load with empty tenant: %v", err)
	}
	if _, _, err := s.Threads(ctx, "", store.Page{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Threads with empty tenant: %v", err)
	}
	if _, err := s.Search(ctx, "", store.SearchQuery{Text: "x"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Search with empty tenant: %v", err)
	}
	if _, err := s.Search(ctx, "a", store.SearchQuery{Text: "x", Role: "wizard"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Search with a bad role: %v", err)
	}
}

// testConcurrentAppend: 8 writers race on one thread for 2 s, each retrying
// on ErrConflict; the log ends gapless with every acknowledged message
// exactly once (I1).
func testConcurrentAppend(t *testing.T, s store.Store) {
	const writers = 8
	deadline := time.Now().Add(2 * time.Second)
	acked := make([][]string, writers)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Capped so that a very fast backend does not build a huge log.
			for i := 0; i < 5000 && time.Now().Before(deadline); i++ {
				body := fmt.Sprintf("writer %d message %d", w, i)
				for {
					last, err := s.LastSeq(ctx, "acme", "race")
					if err != nil {
						errs <- err
						return
					}
					_, err = s.Append(ctx, "acme", "race", last, []store.Event{text(message.User, body)})
					if errors.Is(err, store.ErrConflict) {
						continue
					}
					if err != nil {
						errs <- fmt.Errorf("writer %d: %w", w, err)
						return
					}
					acked[w] = append(acked[w], body)
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	evs := mustLoad(t, s, "acme", "race")
	count := map[string]int{}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("seq gap: event %d has seq %d", i, ev.Seq)
		}
		count[ev.Message.TextOf()]++
	}
	total := 0
	for w := range writers {
		total += len(acked[w])
		for _, body := range acked[w] {
			if count[body] != 1 {
				t.Errorf("acknowledged %q is in the log %d times", body, count[body])
			}
		}
	}
	if len(evs) != total {
		t.Errorf("log has %d events, writers were acknowledged for %d", len(evs), total)
	}
	if total < writers {
		t.Errorf("only %d appends in 2 s", total)
	}
	t.Logf("%d appends by %d writers", total, writers)
}

// testGroupedAppend: 32 threads append at once, as a backend that commits
// concurrent appends together (group commit) sees them; beside each good
// append runs a bad one on the same thread (an expected seq behind or ahead
// of the tail, or a ref already used). Every bad append fails alone with its
// own error, every good one lands exactly once, in order.
func testGroupedAppend(t *testing.T, s store.Store) {
	const threads, rounds = 32, 12
	errs := make(chan error, threads*rounds*2)
	var wg sync.WaitGroup
	for th := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("g%02d", th)
			var last int64
			var firstRef string
			for i := range rounds {
				bad := text(message.User, fmt.Sprintf("bad %s %d", id, i))
				var badAfter int64
				wantErr := store.ErrConflict
				switch {
				case i%3 == 0 || last == 0:
					badAfter = last + 1000 // ahead: never the tail
				case i%3 == 1:
					badAfter = last - 1 // behind: the tail only grows
				default:
					badAfter, bad.Ref, wantErr = -1, firstRef, store.ErrInvalid
				}
				var inner sync.WaitGroup
				inner.Add(1)
				go func() {
					defer inner.Done()
					after := badAfter
					if after < 0 {
						after = last
					}
					_, err := s.Append(ctx, "acme", id, after, []store.Event{bad})
					// A used ref appended at the tail fails as invalid, or as
					// a conflict when the good append took the tail first.
					if !errors.Is(err, wantErr) && !(badAfter < 0 && errors.Is(err, store.ErrConflict)) {
						errs <- fmt.Errorf("%s round %d: bad append (after %d) gave %v, want %v", id, i, after, err, wantErr)
					}
				}()
				got, err := s.Append(ctx, "acme", id, last, []store.Event{text(message.User, fmt.Sprintf("good %s %d", id, i))})
				inner.Wait()
				if err != nil {
					errs <- fmt.Errorf("%s round %d: good append: %w", id, i, err)
					return
				}
				if firstRef == "" {
					firstRef = got[0].Ref
				}
				last = got[0].Seq
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for th := range threads {
		id := fmt.Sprintf("g%02d", th)
		evs := mustLoad(t, s, "acme", id)
		if len(evs) != rounds {
			t.Errorf("%s: %d events, want %d", id, len(evs), rounds)
			continue
		}
		for i, ev := range evs {
			if want := fmt.Sprintf("good %s %d", id, i); ev.Seq != int64(i+1) || ev.Message.TextOf() != want {
				t.Errorf("%s: event %d is seq %d %q, want seq %d %q", id, i, ev.Seq, ev.Message.TextOf(), i+1, want)
			}
		}
		if ti, err := s.Thread(ctx, "acme", id); err != nil || ti.Messages != rounds || ti.Events != rounds {
			t.Errorf("%s: thread info %+v, %v; want %d messages and events", id, ti, err, rounds)
		}
	}
}

// testSnapshots: the window snapshot beside the log (store.Snapshots,
// which every backend implements): a later seq replaces, an earlier one is
// ignored, a seq past the log is refused, other tenants see nothing, and
// DeleteThread takes it with the log.
func testSnapshots(t *testing.T, s store.Store) {
	sn, ok := store.As[store.Snapshots](s)
	if !ok {
		t.Fatal("the store does not implement store.Snapshots")
	}
	if _, _, err := sn.GetSnapshot(ctx, "acme", "snap"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSnapshot before any: %v, want ErrNotFound", err)
	}
	if err := sn.PutSnapshot(ctx, "acme", "snap", 1, []byte("x")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PutSnapshot on no thread: %v, want ErrNotFound", err)
	}
	mustAppend(t, s, "acme", "snap", 0, text(message.User, "one"), text(message.Assistant, "two"), text(message.User, "three"))
	if err := sn.PutSnapshot(ctx, "acme", "snap", 4, []byte("x")); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("PutSnapshot past the log: %v, want ErrInvalid", err)
	}
	blob := []byte{0, 1, 2, 0xff, '{', '"'}
	for _, c := range []struct {
		seq  int64
		data []byte
	}{{2, []byte("at two")}, {3, blob}, {1, []byte("older")}} {
		if err := sn.PutSnapshot(ctx, "acme", "snap", c.seq, c.data); err != nil {
			t.Fatalf("PutSnapshot %d: %v", c.seq, err)
		}
	}
	seq, data, err := sn.GetSnapshot(ctx, "acme", "snap")
	if err != nil || seq != 3 || string(data) != string(blob) {
		t.Fatalf("GetSnapshot = %d %q %v, want 3 %q", seq, data, err, blob)
	}
	if _, _, err := sn.GetSnapshot(ctx, "other", "snap"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant's GetSnapshot: %v, want ErrNotFound", err)
	}
	if err := s.DeleteThread(ctx, "acme", "snap"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sn.GetSnapshot(ctx, "acme", "snap"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSnapshot after DeleteThread: %v, want ErrNotFound", err)
	}
}

// testTenantIsolation: tenant B can do nothing to or learn nothing of
// tenant A's data (I8).
func testTenantIsolation(t *testing.T, s store.Store) {
	a := mustAppend(t, s, "A", "shared-id", 0, text(message.User, "secret-token-A lives here"), text(message.Assistant, "noted"))
	ref := a[0].Ref
	if _, err := s.PutMemory(ctx, "A", store.Memory{Namespace: []string{"prefs"}, Key: "k", Value: json.RawMessage(`{"v":"secret-token-A"}`)}); err != nil {
		t.Fatal(err)
	}

	if infos, _, err := s.Threads(ctx, "B", store.Page{}); err != nil || len(infos) != 0 {
		t.Errorf("B lists %v, %v", infos, err)
	}
	if evs, err := s.Load(ctx, "B", "shared-id", 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("B loads %d events, %v", len(evs), err)
	}
	if n, err := s.LastSeq(ctx, "B", "shared-id"); err != nil || n != 0 {
		t.Errorf("B's LastSeq = %d, %v", n, err)
	}
	if _, err := s.Thread(ctx, "B", "shared-id"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("B's Thread err = %v", err)
	}
	if _, _, err := s.EventByRef(ctx, "B", ref); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("B's EventByRef(A's ref) err = %v", err)
	}
	if hits, err := s.Search(ctx, "B", store.SearchQuery{Text: "secret-token-A"}); err != nil || len(hits) != 0 {
		t.Errorf("B's search finds %v, %v", hits, err)
	}
	if hits, err := s.Search(ctx, "B", store.SearchQuery{Text: "secret", Thread: "shared-id"}); err != nil || len(hits) != 0 {
		t.Errorf("B's search in the thread finds %v, %v", hits, err)
	}
	if err := s.DeleteThread(ctx, "B", "shared-id"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("B's DeleteThread err = %v", err)
	}
	// B's thread of the same id is B's own, starting at seq 1.
	b := mustAppend(t, s, "B", "shared-id", 0, text(message.User, "B's own"))
	if b[0].Seq != 1 {
		t.Errorf("B's thread starts at seq %d", b[0].Seq)
	}
	if _, err := s.Append(ctx, "B", "shared-id", 2, []store.Event{text(message.User, "x")}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("B appending after A's last seq: %v", err)
	}

	if _, err := s.GetMemory(ctx, "B", []string{"prefs"}, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("B's GetMemory err = %v", err)
	}
	if items, err := s.SearchMemory(ctx, "B", store.MemoryQuery{}); err != nil || len(items) != 0 {
		t.Errorf("B's SearchMemory = %v, %v", items, err)
	}
	if items, err := s.SearchMemory(ctx, "B", store.MemoryQuery{Text: "secret-token-A"}); err != nil || len(items) != 0 {
		t.Errorf("B's SearchMemory(text) = %v, %v", items, err)
	}
	if err := s.DeleteMemory(ctx, "B", []string{"prefs"}, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("B's DeleteMemory err = %v", err)
	}
	if n, err := s.DeleteNamespace(ctx, "B", []string{"prefs"}); err != nil || n != 0 {
		t.Errorf("B's DeleteNamespace = %d, %v", n, err)
	}

	// A is untouched.
	if evs := mustLoad(t, s, "A", "shared-id"); len(evs) != 2 || evs[0].Message.TextOf() != "secret-token-A lives here" {
		t.Errorf("A's thread changed: %d events", len(evs))
	}
	if hits, err := s.Search(ctx, "A", store.SearchQuery{Text: "secret-token-A"}); err != nil || len(hits) != 1 {
		t.Errorf("A's search = %v, %v", hits, err)
	}
	if _, err := s.GetMemory(ctx, "A", []string{"prefs"}, "k"); err != nil {
		t.Errorf("A's memory gone: %v", err)
	}
}

func testDeleteThread(t *testing.T, s store.Store) {
	evs := mustAppend(t, s, "acme", "doomed", 0,
		text(message.User, "delete-me-7731 please"),
		msgEvent(message.NewToolResult("c1", "payload delete-me-7731")),
		store.Event{Kind: store.KindNote, Data: json.RawMessage(`{"x":1}`)})
	mustAppend(t, s, "acme", "kept", 0, text(message.User, "delete-me-7731 survives here"))

	if err := s.DeleteThread(ctx, "acme", "doomed"); err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, s, "acme", "doomed"); len(got) != 0 {
		t.Errorf("Load after delete: %d events", len(got))
	}
	if n, _ := s.LastSeq(ctx, "acme", "doomed"); n != 0 {
		t.Errorf("LastSeq after delete: %d", n)
	}
	if _, err := s.Thread(ctx, "acme", "doomed"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Thread after delete: %v", err)
	}
	for _, ev := range evs[:2] {
		if _, _, err := s.EventByRef(ctx, "acme", ev.Ref); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("EventByRef after delete: %v", err)
		}
	}
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "delete-me-7731"})
	if err != nil || len(hits) != 1 || hits[0].Thread != "kept" {
		t.Errorf("Search after delete = %+v, %v; want only the kept thread", hits, err)
	}
	infos, _, err := s.Threads(ctx, "acme", store.Page{})
	if err != nil || len(infos) != 1 || infos[0].ID != "kept" {
		t.Errorf("Threads after delete = %+v, %v", infos, err)
	}
	if err := s.DeleteThread(ctx, "acme", "doomed"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteThread err = %v, want ErrNotFound", err)
	}
	// The id is free again and starts over at seq 1.
	again := mustAppend(t, s, "acme", "doomed", 0, text(message.User, "reborn"))
	if again[0].Seq != 1 {
		t.Errorf("recreated thread starts at seq %d", again[0].Seq)
	}
	if info, _ := s.Thread(ctx, "acme", "doomed"); info.Events != 1 || info.Messages != 1 {
		t.Errorf("recreated thread info %+v", info)
	}
}

func testThreadsPaging(t *testing.T, s store.Store) {
	const n = 7
	for i := range n {
		mustAppend(t, s, "acme", fmt.Sprintf("t%d", i), 0, text(message.User, "hi"))
		time.Sleep(3 * time.Millisecond)
	}
	mustAppend(t, s, "acme", "t0", 1, text(message.User, "bump")) // t0 is now the newest
	want := []string{"t0", "t6", "t5", "t4", "t3", "t2", "t1"}

	for _, limit := range []int{1, 3, 7, 50} {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > n+1 {
				t.Fatalf("limit %d: paging does not end", limit)
			}
			infos, next, err := s.Threads(ctx, "acme", store.Page{Cursor: cursor, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			if len(infos) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(infos))
			}
			for _, in := range infos {
				got = append(got, in.ID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: threads %v, want %v", limit, got, want)
		}
	}
	infos, _, _ := s.Threads(ctx, "acme", store.Page{Limit: 1})
	if len(infos) != 1 || infos[0].Events != 2 || infos[0].Messages != 2 {
		t.Errorf("first listed %+v", infos)
	}
	if _, _, err := s.Threads(ctx, "acme", store.Page{Cursor: "garbage!"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("bad cursor err = %v, want ErrInvalid", err)
	}
}

func testLargePayload(t *testing.T, s store.Store) {
	var b strings.Builder
	for i := 0; b.Len() < 6<<20; i++ {
		fmt.Fprintf(&b, "line %d of a very long tool output with words and numbers %x\n", i, i*7919)
	}
	b.WriteString("the end: needle-7781\n")
	big := b.String()
	res := message.NewToolResult("c9", big)
	res.Name = "cat"
	arg := msgEvent(message.NewToolCalls("", message.Part{ToolCallID: "c9", ToolName: "cat", Arguments: `{"data":"` + strings.Repeat("z", 3<<20) + `"}`}))
	got := mustAppend(t, s, "acme", "big", 0, arg, msgEvent(res))
	sameEvents(t, mustLoad(t, s, "acme", "big"), got)
	if l := mustLoad(t, s, "acme", "big"); l[1].Message.PlainText() != big {
		t.Fatalf("6 MB tool result did not round-trip")
	}
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "needle-7781"})
	if err != nil || len(hits) != 1 || hits[0].Seq != 2 {
		t.Fatalf("search in a 6 MB message = %+v, %v", hits, err)
	}
	if !strings.Contains(hits[0].Snippet, "«needle-7781»") || len(hits[0].Snippet) > 4096 {
		t.Errorf("snippet %q", hits[0].Snippet)
	}
}

func testUnicode(t *testing.T, s store.Store) {
	texts := []string{
		"我们明天开会 讨论预算",
		"日本語のテキスト と 한국어 텍스트",
		"deploy 🚀 done 👍🏽 👨‍👩‍👧",
		"مرحبا بالعالم — שלום עולם",
		"controls:\t\x01\x02\x1b[31m red \x1b[0m\x7f\u200b\u200d\ufeff end",
		"combining: e\u0301 vs é; math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
		"quotes \" ' ` and backslash \\ and </script> & <b>",
	}
	var evs []store.Event
	for _, s := range texts {
		m := message.NewText(message.User, s)
		m.Name = "名前-🙂"
		m.Meta = map[string]string{"lang": s}
		evs = append(evs, msgEvent(m))
	}
	got := mustAppend(t, s, "acme", "uni-线程-🧵", 0, evs...)
	loaded := mustLoad(t, s, "acme", "uni-线程-🧵")
	sameEvents(t, loaded, got)
	for i, ev := range loaded {
		if ev.Message.TextOf() != texts[i] || ev.Message.Meta["lang"] != texts[i] || ev.Message.Name != "名前-🙂" {
			t.Errorf("text %d: got %q, want %q", i, ev.Message.TextOf(), texts[i])
		}
	}
	for _, c := range []struct {
		q   string
		seq int64
	}{
		{"讨论预算", 1}, {"한국어", 2}, {"deploy", 3}, {"مرحبا", 4}, {"שלום", 4}, {"red", 5}, {"𝔘𝔫𝔦𝔠𝔬𝔡𝔢", 6}, {"backslash", 7},
	} {
		hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: c.q})
		if err != nil || len(hits) != 1 || hits[0].Seq != c.seq {
			t.Errorf("search %q = %+v, %v; want seq %d", c.q, hits, err, c.seq)
		}
	}
}

func testMessageJSON(t *testing.T, s store.Store) {
	m := message.Message{
		Role: message.System,
		Name: "ops",
		Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("X", -7*3600)),
		Meta: map[string]string{"k": "v"},
		Wire: message.Wire{API: "openai", Form: "parts", Role: "developer",
			Extra: map[string]json.RawMessage{"cache_control": json.RawMessage(`{"type":"ephemeral"}`), "z": json.RawMessage(`[1,{"b":2,"a":1}]`)}},
		Parts: []message.Part{
			{Type: message.Text, Text: "be brief", Wire: message.Wire{Type: "input_text"}},
			{Type: message.Image, ImageURL: "data:image/png;base64,AAAA", Detail: "low"},
			{Type: message.ToolCall, ToolCallID: "call_1", ToolName: "f", Arguments: `{"b": 1, "a": [true, null]}`},
			{Type: message.ToolResult, ToolCallID: "call_1", IsError: true, Content: []message.Part{{Type: message.Text, Text: "boom"}}},
			{Type: message.Reasoning, Text: "hmm", Signature: "sig=="},
			{Type: message.Opaque, Raw: json.RawMessage(`{"type":"server_tool_use","z":1,"a":{"y":2,"x":1}}`), Wire: message.Wire{API: "anthropic", Type: "server_tool_use"}},
		},
	}
	data := json.RawMessage(`{"from_seq":1,"to_seq":1,"text":"obs","nested":{"b":[1,2],"a":null}}`)
	got := mustAppend(t, s, "acme", "json", 0, msgEvent(m), store.Event{Kind: store.KindCompacted, Data: data, Tokens: 0})
	loaded := mustLoad(t, s, "acme", "json")
	if a, b := jsonOf(t, loaded[0].Message), jsonOf(t, &m); a != b {
		t.Errorf("message JSON changed:\n got %s\nwant %s", a, b)
	}
	if !bytes.Equal(loaded[0].Message.Parts[5].Raw, m.Parts[5].Raw) {
		t.Errorf("opaque part not byte-exact: %s", loaded[0].Message.Parts[5].Raw)
	}
	if !loaded[0].Message.Time.Equal(m.Time) {
		t.Errorf("message time %v, want %v", loaded[0].Message.Time, m.Time)
	}
	if !jsonEqual(loaded[1].Data, data) || loaded[1].Kind != store.KindCompacted || loaded[1].Message != nil {
		t.Errorf("compacted event = %+v", loaded[1])
	}
	sameEvents(t, loaded, got)
}

// testToolNames: a tool result that names no tool is recorded with the
// tool of the call it answers (the Tool filter of a search), found in an
// earlier append of its thread: the newest call of that id, never one of
// the thread's former self once it was deleted, never another thread's.
func testToolNames(t *testing.T, s store.Store) {
	calls := func(id, name string) store.Event {
		return msgEvent(message.NewToolCalls("", message.Part{ToolCallID: id, ToolName: name, Arguments: `{}`}))
	}
	result := func(id, body string) store.Event { return msgEvent(message.NewToolResult(id, body)) }
	user := func(body string) store.Event { return text(message.User, body) }
	tools := func(word string) map[string][]int64 {
		t.Helper()
		out := map[string][]int64{}
		for _, tool := range []string{"lookup", "cat", "grep", "ls"} {
			hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: word, Thread: "tools", Tool: tool})
			if err != nil {
				t.Fatal(err)
			}
			if seqs := hitSeqs(hits); len(seqs) > 0 {
				out[tool] = seqs
			}
		}
		return out
	}
	check := func(word string, want map[string][]int64) {
		t.Helper()
		if got := tools(word); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: tool results by tool %v, want %v", word, got, want)
		}
	}

	// Another tenant's thread of the same name first, up to the seq at
	// which the result below comes, with the same call id (I8).
	mustAppend(t, s, "globex", "tools", 0, user("find zebra"))
	mustAppend(t, s, "globex", "tools", 1, calls("c1", "ls"))
	// Each in an append of its own, as an agent's turns come. Another
	// thread's call of the same id comes in between.
	mustAppend(t, s, "acme", "tools", 0, user("find zebra"))
	mustAppend(t, s, "acme", "tools", 1, calls("c1", "lookup"))
	mustAppend(t, s, "acme", "other", 0, calls("c1", "ls"))
	mustAppend(t, s, "acme", "tools", 2, result("c1", "zebra paid"))
	// The same id again (clients that number their calls per turn): the
	// newest call names it.
	mustAppend(t, s, "acme", "tools", 3, calls("c1", "cat"), user("wait"))
	mustAppend(t, s, "acme", "tools", 5, result("c1", "zebra again"))
	// A result whose call is in its own append, and one whose call is
	// older than the append before it.
	mustAppend(t, s, "acme", "tools", 6, calls("c2", "grep"), result("c2", "zebra grep"))
	mustAppend(t, s, "acme", "tools", 8, result("c1", "zebra late"))
	check("zebra", map[string][]int64{"lookup": {3}, "cat": {6, 9}, "grep": {8}})

	// The thread deleted and made again up to the same seq, c1 now another
	// tool's: the result is named by the new call.
	if err := s.DeleteThread(ctx, "acme", "tools"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "acme", "tools", 0, user("a"), user("b"), user("c"), user("d"), user("e"), calls("c1", "grep"))
	mustAppend(t, s, "acme", "tools", 6, user("f"), user("g"), user("h"))
	mustAppend(t, s, "acme", "tools", 9, result("c1", "okapi found"))
	check("okapi", map[string][]int64{"grep": {10}})
}

// archive is the fixture of the search tests.
var archive = []struct {
	role message.Role
	msg  message.Message
}{
	{message.User, message.NewText(message.User, "Please look up invoice INV-4401 for the refund")},
	{message.Assistant, message.NewToolCalls("checking", message.Part{ToolCallID: "call_a", ToolName: "lookup_invoice", Arguments: `{"id":"INV-4401"}`})},
	{message.Tool, message.NewToolResult("call_a", "INV-4401: status paid, amount 120 EUR")},
	{message.User, message.NewText(message.User, "Also INV 4402 is pending, and INV 4401 was a typo")},
	{message.User, message.NewText(message.User, "4401 INV reversed; invoice number unknown")},
	{message.Assistant, message.NewText(message.Assistant, "trace_id=checkout-failure-2026-03-15 seen in src/app/main.go line 42")},
	{message.User, message.NewText(message.User, "checkout failure again: trace id checkout failure 2026 03 15, see src app main go")},
	{message.User, message.NewText(message.User, "INV-44010 is a different invoice; so is XINV-4401")},
	{message.Tool, func() message.Message {
		m := message.NewToolResult("call_b", "docs say: refund within 30 days")
		m.Name = "search_docs"
		return m
	}()},
}

var archiveBase = time.Date(2026, 3, 15, 9, 0, 0, 0, time.UTC)

func loadArchive(t *testing.T, s store.Store) []store.Event {
	var evs []store.Event
	for i, a := range archive {
		ev := msgEvent(a.msg)
		ev.At = archiveBase.Add(time.Duration(i+1) * time.Minute)
		evs = append(evs, ev)
	}
	return mustAppend(t, s, "acme", "inv", 0, evs...)
}

func hitSeqs(hits []store.Hit) []int64 {
	var out []int64
	for _, h := range hits {
		out = append(out, h.Seq)
	}
	slices.Sort(out)
	return out
}

func testSearch(t *testing.T, s store.Store) {
	evs := loadArchive(t, s)
	mustAppend(t, s, "acme", "noise", 0, text(message.User, "unrelated chatter about lunch"))
	cases := []struct {
		q    string
		want []int64
	}{
		{"INV-4401", []int64{1, 2, 3}},
		{"inv-4401", []int64{1, 2, 3}},
		{"(INV-4401).", []int64{1, 2, 3}},
		{`"INV-4401"`, []int64{1, 2, 3}},
		{"INV-4402", nil},
		{"INV-44010", []int64{8}},
		{"trace_id=checkout-failure-2026-03-15", []int64{6}},
		{"src/app/main.go", []int64{6}},
		{"main.go", []int64{6}},
		{"refund", []int64{1, 9}},
		{"REFUND", []int64{1, 9}},
		{"checkout failure", []int64{6, 7}},
		{`"checkout failure"`, []int64{6, 7}},
		{`"failure checkout"`, nil},
		{"INV-4401 refund", []int64{1, 2, 3}},
		{"lookup_invoice", []int64{2}},
		{"paid", []int64{3}},
		{"", nil},
		{"   ", nil},
		{"zebra", nil},
	}
	for _, c := range cases {
		hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: c.q})
		if err != nil {
			t.Errorf("Search(%q): %v", c.q, err)
			continue
		}
		if got := hitSeqs(hits); !slices.Equal(got, c.want) {
			t.Errorf("Search(%q) = seqs %v, want %v", c.q, got, c.want)
		}
		for i := 1; i < len(hits); i++ {
			if hits[i].Score > hits[i-1].Score {
				t.Errorf("Search(%q): hits not best first", c.q)
			}
		}
	}

	// Ranking: the message with both words comes first.
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "refund invoice"})
	if err != nil || len(hits) == 0 || hits[0].Seq != 1 {
		t.Errorf("Search(refund invoice) = %+v, %v; want seq 1 first", hits, err)
	}

	// Hit fields.
	hits, err = s.Search(ctx, "acme", store.SearchQuery{Text: "INV-4401", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hits {
		ev := evs[h.Seq-1]
		if h.Thread != "inv" || h.Ref != ev.Ref || h.Role != ev.Message.Role || !h.At.Equal(ev.At) || h.Score <= 0 {
			t.Errorf("hit %+v does not describe event %d (ref %s, at %v)", h, ev.Seq, ev.Ref, ev.At)
		}
		if !strings.Contains(h.Snippet, "«INV-4401»") {
			t.Errorf("hit %d snippet %q lacks «INV-4401»", h.Seq, h.Snippet)
		}
		wantTool := ""
		if h.Seq == 3 {
			wantTool = "lookup_invoice" // resolved from the call it answers
		}
		if h.Tool != wantTool {
			t.Errorf("hit %d tool %q, want %q", h.Seq, h.Tool, wantTool)
		}
	}
	hits, _ = s.Search(ctx, "acme", store.SearchQuery{Text: "refund", Role: message.Tool})
	if len(hits) != 1 || hits[0].Tool != "search_docs" {
		t.Errorf("tool result carrying its name: %+v", hits)
	}
	hits, _ = s.Search(ctx, "acme", store.SearchQuery{Text: "Please look up invoice"})
	if len(hits) == 0 || !strings.Contains(hits[0].Snippet, "«Please»") || !strings.Contains(hits[0].Snippet, "«invoice»") {
		t.Errorf("snippet marks: %+v", hits)
	}
}

func testSearchFilters(t *testing.T, s store.Store) {
	loadArchive(t, s)
	mustAppend(t, s, "acme", "other", 0, text(message.User, "INV-4401 mentioned elsewhere"))
	at := func(min int) time.Time { return archiveBase.Add(time.Duration(min) * time.Minute) }
	cases := []struct {
		name string
		q    store.SearchQuery
		want []int64
	}{
		{"all threads", store.SearchQuery{Text: "INV-4401"}, []int64{1, 1, 2, 3}},
		{"thread", store.SearchQuery{Text: "INV-4401", Thread: "inv"}, []int64{1, 2, 3}},
		{"other thread", store.SearchQuery{Text: "INV-4401", Thread: "other"}, []int64{1}},
		{"unknown thread", store.SearchQuery{Text: "INV-4401", Thread: "nope"}, nil},
		{"role", store.SearchQuery{Text: "INV-4401", Thread: "inv", Role: message.Assistant}, []int64{2}},
		{"tool", store.SearchQuery{Text: "INV-4401", Tool: "lookup_invoice"}, []int64{3}},
		{"tool none", store.SearchQuery{Text: "INV-4401", Tool: "cat"}, nil},
		{"seq range", store.SearchQuery{Text: "INV-4401", Thread: "inv", FromSeq: 2, ToSeq: 2}, []int64{2}},
		{"from seq", store.SearchQuery{Text: "INV-4401", Thread: "inv", FromSeq: 2}, []int64{2, 3}},
		{"to seq", store.SearchQuery{Text: "INV-4401", Thread: "inv", ToSeq: 2}, []int64{1, 2}},
		{"since", store.SearchQuery{Text: "INV-4401", Thread: "inv", Since: at(2)}, []int64{2, 3}},
		{"until", store.SearchQuery{Text: "INV-4401", Thread: "inv", Until: at(2)}, []int64{1, 2}},
		{"window", store.SearchQuery{Text: "INV-4401", Thread: "inv", Since: at(2), Until: at(2)}, []int64{2}},
		{"limit", store.SearchQuery{Text: "INV-4401", Thread: "inv", Limit: 2}, nil}, // checked by count below
	}
	for _, c := range cases {
		hits, err := s.Search(ctx, "acme", c.q)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if c.name == "limit" {
			if len(hits) != 2 {
				t.Errorf("limit 2 gave %d hits", len(hits))
			}
			continue
		}
		if got := hitSeqs(hits); !slices.Equal(got, c.want) {
			t.Errorf("%s: seqs %v, want %v", c.name, got, c.want)
		}
	}
	// Default limit is 10.
	var many []store.Event
	for i := range 15 {
		many = append(many, text(message.User, fmt.Sprintf("repeated-word number %d", i)))
	}
	mustAppend(t, s, "acme", "many", 0, many...)
	if hits, _ := s.Search(ctx, "acme", store.SearchQuery{Text: "repeated-word"}); len(hits) != 10 {
		t.Errorf("default limit gave %d hits, want 10", len(hits))
	}
}

// testSearchHostile: no user query reaches a query language raw; every
// string gives hits or nothing, or ErrInvalid, never another error.
func testSearchHostile(t *testing.T, s store.Store) {
	loadArchive(t, s)
	queries := []string{
		`"unbalanced`, `unbalanced"`, `"INV-4401`, `""`, `"""`, `AND`, `OR`, `NOT`, `NEAR`,
		`INV-4401 OR refund`, `refund NOT paid`, `NEAR(refund invoice, 2)`, `NEAR(`, `* ^ ( )`,
		`refund*`, `^refund`, `(refund`, `refund)`, `role:user`, `message:refund`, `{refund}`,
		`'; DROP TABLE events; --`, `refund' OR '1'='1`, `\`, `%`, `_`, `-`, `--`, `.`, `=`, `:`,
		"\x00refund", "refund\x00", "\xff\xfe invalid utf8 \xc3", "+refund -paid", `a"b"c"d`,
		strings.Repeat("a", 100<<10), strings.Repeat("refund ", 15000), strings.Repeat(`"`, 1000),
		strings.Repeat("INV-4401 ", 200), strings.Repeat("(", 5000), strings.Repeat("x-", 50000),
	}
	for _, q := range queries {
		hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: q})
		short := q
		if len(short) > 40 {
			short = short[:40] + "…"
		}
		if err != nil && !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Search(%q): %v, want hits or ErrInvalid", short, err)
		}
		for _, h := range hits {
			if h.Thread != "inv" || h.Seq < 1 || h.Seq > int64(len(archive)) {
				t.Errorf("Search(%q): bogus hit %+v", short, h)
			}
		}
	}
	// Operators are words, not operators.
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "refund NOT paid"})
	if err != nil || !slices.Contains(hitSeqs(hits), 3) {
		t.Errorf(`"refund NOT paid" treats NOT as an operator: %v, %v`, hitSeqs(hits), err)
	}
	hits, err = s.Search(ctx, "acme", store.SearchQuery{Text: `"INV-4401`})
	if err != nil || !slices.Equal(hitSeqs(hits), []int64{1, 2, 3}) {
		t.Errorf(`unbalanced quote: %v, %v`, hitSeqs(hits), err)
	}
	if _, err := s.Search(ctx, "acme", store.SearchQuery{Text: "x", FromSeq: -1}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("negative FromSeq: %v", err)
	}
}

func testMemories(t *testing.T, s store.Store) {
	ns := []string{"users", "u1", "prefs"}
	v1 := json.RawMessage(`{"color":"dark","size":12}`)
	put, err := s.PutMemory(ctx, "acme", store.Memory{Namespace: ns, Key: "theme", Value: v1})
	if err != nil {
		t.Fatal(err)
	}
	if put.Created.IsZero() || !put.Created.Equal(put.Updated) || !slices.Equal(put.Namespace, ns) || put.Key != "theme" {
		t.Errorf("PutMemory = %+v", put)
	}
	got, err := s.GetMemory(ctx, "acme", ns, "theme")
	if err != nil || !jsonEqual(got.Value, v1) || !got.Created.Equal(put.Created) || !slices.Equal(got.Namespace, ns) {
		t.Fatalf("GetMemory = %+v, %v", got, err)
	}
	time.Sleep(5 * time.Millisecond)
	v2 := json.RawMessage(`{"color":"light"}`)
	upd, err := s.PutMemory(ctx, "acme", store.Memory{Namespace: ns, Key: "theme", Value: v2})
	if err != nil {
		t.Fatal(err)
	}
	if !upd.Created.Equal(put.Created) || !upd.Updated.After(put.Updated) {
		t.Errorf("update: created %v (was %v), updated %v (was %v)", upd.Created, put.Created, upd.Updated, put.Updated)
	}
	got, _ = s.GetMemory(ctx, "acme", ns, "theme")
	if !jsonEqual(got.Value, v2) || !got.Created.Equal(put.Created) {
		t.Errorf("after update GetMemory = %+v", got)
	}
	if _, err := s.GetMemory(ctx, "acme", ns, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetMemory(unknown) err = %v", err)
	}
	if _, err := s.GetMemory(ctx, "acme", []string{"users", "u1"}, "theme"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetMemory in the parent namespace err = %v", err)
	}
	if err := s.DeleteMemory(ctx, "acme", ns, "theme"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetMemory(ctx, "acme", ns, "theme"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetMemory after delete err = %v", err)
	}
	if err := s.DeleteMemory(ctx, "acme", ns, "theme"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteMemory err = %v", err)
	}

	for _, it := range []store.Memory{
		{Namespace: nil, Key: "k", Value: v1},
		{Namespace: []string{""}, Key: "k", Value: v1},
		{Namespace: []string{"a\x1fb"}, Key: "k", Value: v1},
		{Namespace: ns, Key: "", Value: v1},
		{Namespace: ns, Key: "k", Value: json.RawMessage(`{bad`)},
	} {
		if _, err := s.PutMemory(ctx, "acme", it); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutMemory(%q, %q, %s) err = %v, want ErrInvalid", it.Namespace, it.Key, it.Value, err)
		}
	}
	if _, err := s.PutMemory(ctx, "", store.Memory{Namespace: ns, Key: "k", Value: v1}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("PutMemory with empty tenant err = %v", err)
	}
}

func put(t *testing.T, s store.Store, ns []string, key, value string) store.Memory {
	t.Helper()
	it, err := s.PutMemory(ctx, "acme", store.Memory{Namespace: ns, Key: key, Value: json.RawMessage(value)})
	if err != nil {
		t.Fatalf("PutMemory(%q, %q): %v", ns, key, err)
	}
	return it
}

func keysOf(items []store.Memory) []string {
	var out []string
	for _, it := range items {
		out = append(out, strings.Join(it.Namespace, "/")+":"+it.Key)
	}
	slices.Sort(out)
	return out
}

func testMemoryNamespaces(t *testing.T, s store.Store) {
	put(t, s, []string{"a"}, "k", `1`)
	put(t, s, []string{"a", "b"}, "k", `2`)
	put(t, s, []string{"a", "b", "c"}, "k", `3`)
	put(t, s, []string{"ab"}, "k", `4`)
	put(t, s, []string{"a b"}, "k", `5`)
	put(t, s, []string{"x"}, "k", `6`)
	cases := []struct {
		prefix []string
		want   []string
	}{
		{[]string{"a"}, []string{"a/b/c:k", "a/b:k", "a:k"}},
		{[]string{"a", "b"}, []string{"a/b/c:k", "a/b:k"}},
		{[]string{"a", "b", "c"}, []string{"a/b/c:k"}},
		{[]string{"ab"}, []string{"ab:k"}},
		{[]string{"a", "bc"}, nil},
		{[]string{"b"}, nil},
		{nil, []string{"a b:k", "a/b/c:k", "a/b:k", "a:k", "ab:k", "x:k"}},
	}
	for _, c := range cases {
		items, err := s.SearchMemory(ctx, "acme", store.MemoryQuery{Prefix: c.prefix, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if got := keysOf(items); !slices.Equal(got, c.want) {
			t.Errorf("prefix %q: %v, want %v", c.prefix, got, c.want)
		}
	}
	n, err := s.DeleteNamespace(ctx, "acme", []string{"a", "b"})
	if err != nil || n != 2 {
		t.Errorf("DeleteNamespace(a/b) = %d, %v; want 2", n, err)
	}
	items, _ := s.SearchMemory(ctx, "acme", store.MemoryQuery{Limit: 100})
	if got := keysOf(items); !slices.Equal(got, []string{"a b:k", "a:k", "ab:k", "x:k"}) {
		t.Errorf("after DeleteNamespace(a/b): %v", got)
	}
	if _, err := s.DeleteNamespace(ctx, "acme", nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("DeleteNamespace(empty) err = %v, want ErrInvalid", err)
	}
}

func testMemorySearch(t *testing.T, s store.Store) {
	ns := []string{"facts"}
	put(t, s, ns, "billing", `{"text":"customer disputes invoice INV-4401","kind":"billing","priority":2,"open":true}`)
	put(t, s, ns, "shipping", `{"text":"parcel delayed, invoice INV 4401 unrelated","kind":"shipping","priority":1,"open":false}`)
	put(t, s, ns, "tz", `{"text":"user lives in Berlin","kind":"profile","priority":2,"tags":["tz","europe"]}`)
	put(t, s, ns, "plain", `"just a string about Berlin weather"`)
	put(t, s, []string{"other"}, "billing", `{"text":"invoice INV-4401 in another namespace","kind":"billing"}`)

	cases := []struct {
		name string
		q    store.MemoryQuery
		want []string
	}{
		{"identifier", store.MemoryQuery{Prefix: ns, Text: "INV-4401"}, []string{"facts:billing"}},
		{"identifier all namespaces", store.MemoryQuery{Text: "INV-4401"}, []string{"facts:billing", "other:billing"}},
		{"word", store.MemoryQuery{Prefix: ns, Text: "berlin"}, []string{"facts:plain", "facts:tz"}},
		{"key text", store.MemoryQuery{Prefix: ns, Text: "shipping"}, []string{"facts:shipping"}},
		{"array value", store.MemoryQuery{Prefix: ns, Text: "europe"}, []string{"facts:tz"}},
		{"filter", store.MemoryQuery{Prefix: ns, Filter: map[string]any{"kind": "billing"}}, []string{"facts:billing"}},
		{"filter number", store.MemoryQuery{Prefix: ns, Filter: map[string]any{"priority": 2}}, []string{"facts:billing", "facts:tz"}},
		{"filter float", store.MemoryQuery{Prefix: ns, Filter: map[string]any{"priority": 1.0}}, []string{"facts:shipping"}},
		{"filter bool", store.MemoryQuery{Prefix: ns, Filter: map[string]any{"open": false}}, []string{"facts:shipping"}},
		{"filter two", store.MemoryQuery{Prefix: ns, Filter: map[string]any{"priority": 2, "kind": "profile"}}, []string{"facts:tz"}},
		{"filter missing", store.MemoryQuery{Prefix: ns, Filter: map[string]any{"nope": 1}}, nil},
		{"filter and text", store.MemoryQuery{Prefix: ns, Text: "invoice", Filter: map[string]any{"kind": "shipping"}}, []string{"facts:shipping"}},
		{"no match", store.MemoryQuery{Prefix: ns, Text: "zebra"}, nil},
		{"hostile", store.MemoryQuery{Prefix: ns, Text: `"NEAR( * OR`}, nil},
	}
	for _, c := range cases {
		items, err := s.SearchMemory(ctx, "acme", c.q)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := keysOf(items); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if c.q.Text != "" {
			for _, it := range items {
				if it.Score <= 0 {
					t.Errorf("%s: item %s has score %v", c.name, it.Key, it.Score)
				}
			}
		}
	}

	// Paging without text: newest first, Limit and Offset.
	page := []string{"page"}
	for i := range 5 {
		put(t, s, page, fmt.Sprintf("k%d", i), fmt.Sprintf(`{"i":%d}`, i))
		time.Sleep(2 * time.Millisecond)
	}
	var seen []string
	for off := 0; off < 6; off += 2 {
		items, err := s.SearchMemory(ctx, "acme", store.MemoryQuery{Prefix: page, Limit: 2, Offset: off})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			seen = append(seen, it.Key)
		}
	}
	if want := []string{"k4", "k3", "k2", "k1", "k0"}; !slices.Equal(seen, want) {
		t.Errorf("pages: %v, want %v", seen, want)
	}
	if _, err := s.SearchMemory(ctx, "acme", store.MemoryQuery{Offset: -1}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("negative offset err = %v", err)
	}
}

func testMemoryTTL(t *testing.T, s store.Store) {
	ns := []string{"ttl"}
	exp := time.Now().Add(time.Second)
	it, err := s.PutMemory(ctx, "acme", store.Memory{Namespace: ns, Key: "short", Value: json.RawMessage(`{"text":"ephemeral_fact"}`), Expires: exp})
	if err != nil {
		t.Fatal(err)
	}
	if !it.Expires.Equal(exp) {
		t.Errorf("Expires %v, want %v", it.Expires, exp)
	}
	put(t, s, ns, "long", `{"text":"durable_fact"}`)
	if _, err := s.PutMemory(ctx, "acme", store.Memory{Namespace: ns, Key: "past", Value: json.RawMessage(`1`), Expires: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetMemory(ctx, "acme", ns, "past"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an item put already expired is visible: %v", err)
	}
	if got, err := s.GetMemory(ctx, "acme", ns, "short"); err != nil || !got.Expires.Equal(exp) {
		t.Fatalf("before expiry GetMemory = %+v, %v", got, err)
	}
	if items, _ := s.SearchMemory(ctx, "acme", store.MemoryQuery{Prefix: ns, Text: "ephemeral_fact"}); len(items) != 1 {
		t.Errorf("before expiry search finds %d", len(items))
	}

	time.Sleep(time.Until(exp) + 100*time.Millisecond)

	if _, err := s.GetMemory(ctx, "acme", ns, "short"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("expired GetMemory err = %v", err)
	}
	if items, _ := s.SearchMemory(ctx, "acme", store.MemoryQuery{Prefix: ns, Text: "ephemeral_fact"}); len(items) != 0 {
		t.Errorf("expired item found by text: %v", keysOf(items))
	}
	if items, _ := s.SearchMemory(ctx, "acme", store.MemoryQuery{Prefix: ns}); !slices.Equal(keysOf(items), []string{"ttl:long"}) {
		t.Errorf("after expiry: %v", keysOf(items))
	}
	if err := s.DeleteMemory(ctx, "acme", ns, "short"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteMemory(expired) err = %v", err)
	}
	// Putting the key again starts a new item, not an update of the dead one.
	again := put(t, s, ns, "short", `{"text":"back"}`)
	if !again.Created.After(it.Created) {
		t.Errorf("re-put of an expired key kept Created %v", again.Created)
	}
	if n, err := s.DeleteNamespace(ctx, "acme", ns); err != nil || n != 2 {
		t.Errorf("DeleteNamespace = %d, %v; want 2 (expired items not counted)", n, err)
	}
}
