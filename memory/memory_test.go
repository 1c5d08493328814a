package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/embed"
	"github.com/mnemehq/mneme/memory"
	"github.com/mnemehq/mneme/store"
	storemem "github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/token"
)

func backends(t *testing.T, fn func(t *testing.T, b store.Memories)) {
	t.Run("memory", func(t *testing.T) {
		s := storemem.New()
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
	t.Run("sqlite", func(t *testing.T) {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "m.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
}

func keys(items []store.Memory) []string {
	var out []string
	for _, it := range items {
		out = append(out, strings.Join(it.Namespace, "/")+":"+it.Key)
	}
	return out
}

func seed(t *testing.T, m *memory.Bank) {
	ctx := context.Background()
	for _, p := range []struct {
		tenant string
		ns     []string
		key    string
		value  string
	}{
		{"a", []string{"user", "prefs"}, "editor", `{"text":"prefers vim keybindings","kind":"pref"}`},
		{"a", []string{"user", "prefs"}, "lang", `{"text":"writes Go and some Rust","kind":"pref"}`},
		{"a", []string{"user", "facts"}, "ticket", `{"text":"owns ticket INV-4401 about checkout","kind":"fact"}`},
		{"a", []string{"project"}, "db", `{"text":"the checkout database is PostgreSQL 16","kind":"fact"}`},
		{"b", []string{"user", "prefs"}, "editor", `{"text":"tenant b prefers emacs","kind":"pref"}`},
		{"b", []string{"user", "facts"}, "ticket", `{"text":"tenant b owns INV-4401 too","kind":"fact"}`},
	} {
		if _, err := m.Put(ctx, p.tenant, p.ns, p.key, json.RawMessage(p.value), 0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPutGetListSearch(t *testing.T) {
	backends(t, func(t *testing.T, b store.Memories) {
		ctx := context.Background()
		m := memory.New(b, memory.Options{})
		seed(t, m)
		it, err := m.Get(ctx, "a", []string{"user", "prefs"}, "editor")
		if err != nil || !strings.Contains(string(it.Value), "vim") {
			t.Fatalf("get: %+v %v", it, err)
		}
		tests := []struct {
			name   string
			prefix []string
			query  string
			filter map[string]any
			want   []string // in any order
		}{
			{"list user", []string{"user"}, "", nil, []string{"user/facts:ticket", "user/prefs:editor", "user/prefs:lang"}},
			{"list all", nil, "", nil, []string{"project:db", "user/facts:ticket", "user/prefs:editor", "user/prefs:lang"}},
			{"word", nil, "checkout", nil, []string{"project:db", "user/facts:ticket"}},
			{"identifier exact", nil, "INV-4401", nil, []string{"user/facts:ticket"}},
			{"filter", nil, "checkout", map[string]any{"kind": "fact"}, []string{"project:db", "user/facts:ticket"}},
			{"filter narrows", []string{"user"}, "", map[string]any{"kind": "pref"}, []string{"user/prefs:editor", "user/prefs:lang"}},
			{"prefix is element-wise", []string{"use"}, "", nil, nil},
			{"no match", nil, "kubernetes", nil, nil},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				got, err := m.Search(ctx, "a", tc.prefix, tc.query, tc.filter, 10)
				if err != nil {
					t.Fatal(err)
				}
				k := keys(got)
				slices.Sort(k)
				if !slices.Equal(k, tc.want) {
					t.Fatalf("got %v, want %v", k, tc.want)
				}
			})
		}
		list, err := m.List(ctx, "a", []string{"user", "prefs"}, 10, 0)
		if err != nil || len(list) != 2 {
			t.Fatalf("list: %v %v", keys(list), err)
		}
		if err := m.Delete(ctx, "a", []string{"user", "prefs"}, "lang"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Get(ctx, "a", []string{"user", "prefs"}, "lang"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted item: %v", err)
		}
		for _, q := range []string{`"unbalanced`, `AND OR NOT *`, strings.Repeat("y", 100<<10)} {
			_, err := m.Search(ctx, "a", nil, q, nil, 5)
			if err != nil && (!errors.Is(err, store.ErrInvalid) || strings.Contains(strings.ToLower(err.Error()), "sql")) {
				t.Errorf("query %.20q: %v", q, err)
			}
		}
		if _, err := m.Put(ctx, "a", []string{"x"}, "k", json.RawMessage(`{bad`), 0); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("bad JSON: %v", err)
		}
		if _, err := m.Put(ctx, "a", []string{"x"}, "k", json.RawMessage(`1`), -time.Second); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("negative ttl: %v", err)
		}
	})
}

// I8: tenant a never gets, searches or lists tenant b's items.
func TestMemoryTenantIsolation(t *testing.T) {
	backends(t, func(t *testing.T, b store.Memories) {
		ctx := context.Background()
		m := memory.New(b, memory.Options{Embedder: embed.Hashing{}})
		seed(t, m)
		if _, err := m.Put(ctx, "b", []string{"secret"}, "only-b", json.RawMessage(`"tenant b only"`), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Get(ctx, "a", []string{"secret"}, "only-b"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("get of b's item as a: %v", err)
		}
		for _, q := range []string{"", "tenant b", "emacs", "INV-4401", "tenant"} {
			got, err := m.Search(ctx, "a", nil, q, nil, 50)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range got {
				if strings.Contains(string(it.Value), "tenant b") {
					t.Errorf("a's search %q returned b's item %s", q, it.Value)
				}
			}
		}
		list, _ := m.List(ctx, "a", nil, 100, 0)
		for _, it := range list {
			if strings.Contains(string(it.Value), "tenant b") {
				t.Errorf("a's list has b's item %s", it.Value)
			}
		}
		if len(list) != 4 {
			t.Errorf("a lists %d items, want its 4", len(list))
		}
	})
}

func TestTTL(t *testing.T) {
	backends(t, func(t *testing.T, b store.Memories) {
		ctx := context.Background()
		m := memory.New(b, memory.Options{})
		if _, err := m.Put(ctx, "a", []string{"tmp"}, "short", json.RawMessage(`"gone soon"`), time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Put(ctx, "a", []string{"tmp"}, "long", json.RawMessage(`"stays"`), time.Hour); err != nil {
			t.Fatal(err)
		}
		if it, err := m.Get(ctx, "a", []string{"tmp"}, "short"); err != nil || it.Expires.IsZero() {
			t.Fatalf("fresh item: %+v %v", it, err)
		}
		// A second of life: long enough to read it fresh on a loaded
		// machine under -race, short enough to wait out.
		time.Sleep(1200 * time.Millisecond)
		if _, err := m.Get(ctx, "a", []string{"tmp"}, "short"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("expired item: %v", err)
		}
		got, _ := m.Search(ctx, "a", []string{"tmp"}, "gone soon stays", nil, 10)
		if k := keys(got); !slices.Equal(k, []string{"tmp:long"}) {
			t.Errorf("search after expiry: %v", k)
		}
	})
}

// Semantic ranking: with the hashing embedder an item sharing more words
// with the query ranks first; a failing embedder degrades to BM25.
func TestMemoryHybridAndDegradation(t *testing.T) {
	backends(t, func(t *testing.T, b store.Memories) {
		ctx := context.Background()
		plain := memory.New(b, memory.Options{})
		seed(t, plain)
		q := "checkout database"
		want, err := plain.Search(ctx, "a", nil, q, nil, 5)
		if err != nil || len(want) == 0 {
			t.Fatal(want, err)
		}
		hybrid := memory.New(b, memory.Options{Embedder: embed.Hashing{}})
		got, err := hybrid.Search(ctx, "a", nil, q, nil, 5)
		if err != nil || len(got) == 0 || keys(got)[0] != "project:db" {
			t.Fatalf("hybrid: %v %v, want project:db first", keys(got), err)
		}
		broken := memory.New(b, memory.Options{Embedder: brokenEmbedder{}})
		got, err = broken.Search(ctx, "a", nil, q, nil, 5)
		if err != nil || !slices.Equal(keys(got), keys(want)) {
			t.Fatalf("degraded: %v %v, want BM25's %v", keys(got), err, keys(want))
		}
	})
}

type brokenEmbedder struct{}

func (brokenEmbedder) Model() string { return "broken" }
func (brokenEmbedder) Embed(context.Context, []string) ([][]float32, error) {
	return nil, fmt.Errorf("%w: down", embed.ErrEmbed)
}

// Inject renders a deterministic block within the token budget.
func TestInject(t *testing.T) {
	backends(t, func(t *testing.T, b store.Memories) {
		ctx := context.Background()
		m := memory.New(b, memory.Options{})
		seed(t, m)
		ns := [][]string{{"user", "prefs"}, {"project"}, {"user"}}
		c, _ := token.Get(token.O200kBase)
		got, err := memory.Inject(ctx, m, "a", ns, "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := memory.Inject(ctx, m, "a", ns, "", 1000)
		if got != again {
			t.Fatal("Inject is not deterministic")
		}
		if !strings.HasPrefix(got, memory.InjectPreamble) || !strings.HasSuffix(got, "</mneme:long-term-memory>") {
			t.Fatalf("block:\n%s", got)
		}
		if n := strings.Count(got, "\n- ["); n != 4 {
			t.Fatalf("%d items, want 4 (each once):\n%s", n, got)
		}
		if strings.Contains(got, "tenant b") {
			t.Fatal("tenant b's memory injected into a's window")
		}
		if strings.Index(got, "[user/prefs]") > strings.Index(got, "[project] db") {
			t.Fatalf("namespaces not in the order given:\n%s", got)
		}
		for _, budget := range []int{60, 80, 120} {
			small, err := memory.Inject(ctx, m, "a", ns, "", budget)
			if err != nil {
				t.Fatal(err)
			}
			if n := c.Count(small); n > budget {
				t.Errorf("budget %d: block costs %d tokens", budget, n)
			}
			if small != "" && !strings.HasPrefix(got, strings.TrimSuffix(small, "\n</mneme:long-term-memory>")) {
				t.Errorf("budget %d: not a prefix of the full block:\n%s", budget, small)
			}
		}
		if s, _ := memory.Inject(ctx, m, "a", ns, "", 10); s != "" {
			t.Errorf("budget below one item: %q", s)
		}
		matching, _ := memory.Inject(ctx, m, "a", ns, "vim", 1000)
		if strings.Count(matching, "\n- [") != 1 || !strings.Contains(matching, "editor") {
			t.Errorf("query: %s", matching)
		}
	})
}
