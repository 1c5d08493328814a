package mneme_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/embed"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/sqlite"
)

// Long-term memories named by the policy enter the memory block at a
// compaction point, not before, and replay shows them the same way.
func TestMemoryInjectionAtCompaction(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	p := *smallPolicy()
	p.MemoryNamespaces = "users/alice"
	m := openSQLite(t, path, &p)
	if _, err := m.Memory().Put(ctx, "default", []string{"users", "alice"}, "diet", json.RawMessage(`{"preference":"vegetarian, no nuts"}`), 0); err != nil {
		t.Fatal(err)
	}
	th := m.Thread("default", "inject")
	begin(ctx, t, th)
	var w0, last []byte
	seenBefore := false
	stepped := false // a compaction point: masking alone is one (the prefix changes)
	for n := 1; n <= 60; n++ {
		w, err := step(ctx, th, n, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stepped = stepped || w.Usage.Step || w.Usage.Compactions > 0
		enc, _ := message.EncodeOpenAIMessages(w.Messages)
		if !stepped && strings.Contains(string(enc), "vegetarian") {
			seenBefore = true
		}
		if stepped && w0 == nil {
			w0 = enc
		}
		last = enc
	}
	if seenBefore {
		t.Fatal("memories were injected before any compaction: the prefix would change on memory writes")
	}
	if w0 == nil || !strings.Contains(string(w0), "vegetarian, no nuts") {
		t.Fatalf("no memory in the window after compaction:\n%.2000s", w0)
	}
	fresh := openSQLite(t, path, &p)
	w, err := fresh.Thread("default", "inject").Window(ctx, mneme.WindowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := message.EncodeOpenAIMessages(w.Messages)
	if string(enc) != string(last) {
		t.Fatal("replayed window differs")
	}
	// Another tenant's memories never enter this tenant's window (I8).
	if _, err := m.Memory().Put(ctx, "other", []string{"users", "alice"}, "secret", json.RawMessage(`{"x":"tenant-b-secret"}`), 0); err != nil {
		t.Fatal(err)
	}
	for n := 61; n <= 120; n++ {
		w, err := step(ctx, th, n, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := message.EncodeOpenAIMessages(w.Messages)
		if strings.Contains(string(enc), "tenant-b-secret") {
			t.Fatal("another tenant's memory leaked into the window")
		}
	}
}

// With an embedder, new messages are embedded in the background and search
// is hybrid; the recall tools' cost is counted from their definitions.
func TestEmbedderWiring(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := mneme.Open(ctx, mneme.Config{Store: st, Policy: smallPolicy(), Embedder: embed.Hashing{Dims: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	th := m.Thread("default", "hybrid")
	begin(ctx, t, th)
	if _, err := th.Append(ctx, message.NewText(message.User, "the invoice for ACME-77 was disputed by finance")); err != nil {
		t.Fatal(err)
	}
	if err := m.FlushIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if !m.Recall().Hybrid() {
		t.Fatal("recall is not hybrid with an embedder configured")
	}
	hits, err := m.Recall().Search(ctx, "default", store.SearchQuery{Text: "disputed invoice", Thread: "hybrid"})
	if err != nil || len(hits) == 0 || !strings.Contains(hits[0].Snippet, "ACME-77") {
		t.Fatalf("hits %+v, %v", hits, err)
	}
	for n := 1; n <= 80; n++ {
		w, err := step(ctx, th, n, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if w.NeedsRecall && w.Usage.Recall < 400 {
			t.Fatalf("recall tools counted as %d tokens: less than their definitions with the tools preamble", w.Usage.Recall)
		}
	}
}
