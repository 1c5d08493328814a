package postgres_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// TestImport: COPY keeps seqs, refs, times and token counts, resolves tool
// names, continues an existing tail and refuses one that does not fit.
func TestImport(t *testing.T) {
	s := open(t)
	base := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	var evs []store.Event
	for i := range 200 {
		ev := msg(message.User, fmt.Sprintf("imported message %d about zebra-%d", i, i))
		ev.Seq, ev.Ref, ev.Tokens, ev.At = int64(i+1), fmt.Sprintf("m_import%04d", i), i, base.Add(time.Duration(i)*time.Second)
		evs = append(evs, ev)
	}
	call := store.Event{Seq: 201, Kind: store.KindMessage, Ref: "m_call", At: base.Add(time.Hour),
		Message: ptr(message.NewToolCalls("", message.Part{ToolCallID: "c1", ToolName: "grep", Arguments: `{}`}))}
	note := store.Event{Seq: 202, Kind: store.KindNote, At: base.Add(time.Hour), Data: json.RawMessage(`{"n":1}`)}
	evs = append(evs, call, note)
	if err := s.Import(ctx, "acme", "t", evs[:150]); err != nil {
		t.Fatal(err)
	}
	if err := s.Import(ctx, "acme", "t", evs[150:]); err != nil {
		t.Fatal(err)
	}
	res := store.Event{Seq: 203, Kind: store.KindMessage, Ref: "m_res", Message: ptr(message.NewToolResult("c1", "found zebra-7"))}
	if err := s.Import(ctx, "acme", "t", []store.Event{res}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, "acme", "t", 0, 0)
	if err != nil || len(got) != 203 {
		t.Fatalf("Load = %d events, %v", len(got), err)
	}
	for i, ev := range evs {
		g := got[i]
		if g.Seq != ev.Seq || g.Ref != ev.Ref || g.Tokens != ev.Tokens || !g.At.Equal(ev.At) || g.Kind != ev.Kind {
			t.Fatalf("event %d: %+v, want %+v", i, g, ev)
		}
	}
	info, err := s.Thread(ctx, "acme", "t")
	if err != nil || info.Events != 203 || info.Messages != 202 || !info.Created.Equal(base) {
		t.Errorf("thread = %+v, %v", info, err)
	}
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "zebra-7"})
	if err != nil || len(hits) != 2 {
		t.Fatalf("search after import = %+v, %v", hits, err)
	}
	for _, h := range hits {
		if h.Seq == 203 && h.Tool != "grep" {
			t.Errorf("imported tool result's tool = %q, want grep", h.Tool)
		}
	}
	// A batch that does not continue the tail is refused whole.
	gap := msg(message.User, "gap")
	gap.Seq = 300
	if err := s.Import(ctx, "acme", "t", []store.Event{gap}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("import after a gap: %v, want ErrConflict", err)
	}
	bad := []store.Event{msg(message.User, "a"), msg(message.User, "b")}
	bad[0].Seq, bad[1].Seq = 204, 206
	if err := s.Import(ctx, "acme", "t", bad); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("import with non-consecutive seqs: %v, want ErrInvalid", err)
	}
	dup := msg(message.User, "dup ref")
	dup.Seq, dup.Ref = 204, "m_import0000"
	if err := s.Import(ctx, "acme", "t", []store.Event{dup}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("import of a used ref: %v, want ErrInvalid", err)
	}
	if n, _ := s.LastSeq(ctx, "acme", "t"); n != 203 {
		t.Errorf("a refused import wrote something: last seq %d", n)
	}
	// Seq 0 continues the thread, as documented; a negative seq is refused.
	next := []store.Event{msg(message.User, "next"), msg(message.Assistant, "after it")}
	if err := s.Import(ctx, "acme", "t", next); err != nil {
		t.Errorf("import with seq 0: %v", err)
	}
	if n, _ := s.LastSeq(ctx, "acme", "t"); n != 205 {
		t.Errorf("after importing two with seq 0: last seq %d, want 205", n)
	}
	neg := msg(message.User, "negative")
	neg.Seq = -1
	if err := s.Import(ctx, "acme", "t", []store.Event{neg}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("import with seq -1: %v, want ErrInvalid", err)
	}

	// Memories keep their times.
	it := store.Memory{Namespace: []string{"n"}, Key: "k", Value: json.RawMessage(`{"v":1}`), Created: base, Updated: base.Add(time.Minute)}
	if err := s.ImportMemory(ctx, "acme", it); err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMemory(ctx, "acme", []string{"n"}, "k")
	if err != nil || !m.Created.Equal(it.Created) || !m.Updated.Equal(it.Updated) {
		t.Errorf("imported memory = %+v, %v", m, err)
	}
}

func ptr[T any](v T) *T { return &v }
