package recall_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/sqlite"
)

// backends runs fn against each store backend that supports vectors.
func backends(t *testing.T, fn func(t *testing.T, s store.Store)) {
	t.Run("memory", func(t *testing.T) {
		s := inmem.New()
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
	t.Run("sqlite", func(t *testing.T) {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "r.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
}

func msg(m message.Message) store.Event { return store.Event{Kind: store.KindMessage, Message: &m} }

func text(role message.Role, s string) store.Event { return msg(message.NewText(role, s)) }

// appendAll appends evs to the thread after its last seq and returns them as stored.
func appendAll(t testing.TB, s store.Store, tenant, thread string, evs ...store.Event) []store.Event {
	t.Helper()
	ctx := context.Background()
	last, err := s.LastSeq(ctx, tenant, thread)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Append(ctx, tenant, thread, last, evs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func refs(hits []store.Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.Ref)
	}
	return out
}

// archive plants a small conversation with near-miss identifiers in two
// threads of tenant "a" and one of tenant "b"; it returns the stored
// events of a/t1.
func archive(t *testing.T, s store.Store) []store.Event {
	call := func(id, name string) store.Event {
		return msg(message.NewToolCalls("", message.Part{ToolCallID: id, ToolName: name, Arguments: `{}`}))
	}
	evs := appendAll(t, s, "a", "t1",
		text(message.User, "Please fix invoice INV-4401 in src/app/main.go"),
		call("c1", "grep"),
		msg(message.NewToolResult("c1", "log: trace_id=checkout-failure-2026-03-15 status=500\nlog: trace_id=checkout-failure-2026-03-16 status=200")),
		text(message.Assistant, "INV 4401 and INV-4402 look related; also 4401-INV."),
		call("c2", "read_file"),
		msg(message.NewToolResult("c2", "package main // src/app/main_test.go and app/main.go are unrelated")),
		text(message.Assistant, "The checkout failure is a timeout in the payment service."),
	)
	appendAll(t, s, "a", "t2", text(message.User, "Another thread about INV-4401 and the checkout timeout."))
	appendAll(t, s, "b", "t1", text(message.User, "Tenant b also has INV-4401 and trace_id=checkout-failure-2026-03-15 and a checkout timeout."))
	return evs
}

func TestSearch(t *testing.T) {
	backends(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		evs := archive(t, s)
		r := &recall.Recall{Store: s}
		ref := func(i int) string { return evs[i].Ref }
		tests := []struct {
			name string
			q    store.SearchQuery
			want []string // refs, in any order
		}{
			{"identifier exact", store.SearchQuery{Text: "INV-4401", Thread: "t1"}, []string{ref(0)}},
			{"identifier case-insensitive", store.SearchQuery{Text: "inv-4401", Thread: "t1"}, []string{ref(0)}},
			{"near miss", store.SearchQuery{Text: "INV-4402", Thread: "t1"}, []string{ref(3)}},
			{"key=value exact", store.SearchQuery{Text: "trace_id=checkout-failure-2026-03-15", Thread: "t1"}, []string{ref(2)}},
			{"path exact", store.SearchQuery{Text: "src/app/main.go", Thread: "t1"}, []string{ref(0)}},
			{"tool filter", store.SearchQuery{Text: "main", Thread: "t1", Tool: "read_file"}, []string{ref(5)}},
			{"role filter", store.SearchQuery{Text: "checkout", Thread: "t1", Role: message.Assistant}, []string{ref(6)}},
			{"seq range", store.SearchQuery{Text: "checkout", Thread: "t1", FromSeq: 4}, []string{ref(6)}},
			{"all threads of the tenant", store.SearchQuery{Text: "INV-4401"}, nil}, // checked below
			{"empty", store.SearchQuery{Text: "   "}, nil},
			{"only operators", store.SearchQuery{Text: `AND OR NOT * ^ ( ) : NEAR`, Thread: "t1"}, nil},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				hits, err := r.Search(ctx, "a", tc.q)
				if err != nil {
					t.Fatal(err)
				}
				if tc.name == "all threads of the tenant" {
					threads := map[string]bool{}
					for _, h := range hits {
						threads[h.Thread] = true
					}
					if len(hits) != 2 || !threads["t1"] || !threads["t2"] {
						t.Fatalf("hits %+v, want one in t1 and one in t2", hits)
					}
					return
				}
				if tc.name == "only operators" {
					return // any result is fine as long as there is no error
				}
				got := refs(hits)
				slices.Sort(got)
				want := slices.Clone(tc.want)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("got %v, want %v (hits %+v)", got, want, hits)
				}
			})
		}
		hits, err := r.Search(ctx, "a", store.SearchQuery{Text: "INV-4401", Thread: "t1"})
		if err != nil || len(hits) != 1 {
			t.Fatal(hits, err)
		}
		h := hits[0]
		if h.Seq != 1 || h.Role != message.User || h.At.IsZero() || !strings.Contains(h.Snippet, "«INV-4401»") {
			t.Errorf("hit %+v: want seq 1, user, a time and a marked snippet", h)
		}
	})
}

// Hostile input: a clear error or an empty result, never a SQL error.
func TestSearchBadInput(t *testing.T) {
	backends(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		archive(t, s)
		r := &recall.Recall{Store: s}
		for _, q := range []string{
			`"unbalanced quote INV-4401`, `checkout"`, `"""`, `NEAR(checkout timeout)`, `checkout*`, `^checkout`,
			`body:checkout`, `- -- ---`, `'; DROP TABLE events; --`, "\x00\xff\xfe", `{"json": [1,2]}`,
			strings.Repeat("checkout ", 1000),
		} {
			hits, err := r.Search(ctx, "a", store.SearchQuery{Text: q})
			if err != nil && !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%.40q: error %v is not ErrInvalid", q, err)
			}
			if err != nil && strings.Contains(strings.ToLower(err.Error()), "sql") {
				t.Errorf("%.40q: SQL leaked: %v", q, err)
			}
			for _, h := range hits {
				if h.Thread == "" || h.Ref == "" {
					t.Errorf("%.40q: malformed hit %+v", q, h)
				}
			}
		}
		_, err := r.Search(ctx, "a", store.SearchQuery{Text: strings.Repeat("x", 100<<10)})
		if !errors.Is(err, store.ErrInvalid) || strings.Contains(strings.ToLower(err.Error()), "sql") {
			t.Errorf("100 KB query: %v, want a clear ErrInvalid", err)
		}
		hits, err := r.Search(ctx, "a", store.SearchQuery{Text: `"unbalanced INV-4401`, Thread: "t1"})
		if err != nil || len(hits) != 1 {
			t.Errorf("unbalanced quote with an id: %v %v, want the id's one hit", hits, err)
		}
		if _, err := r.Search(ctx, "", store.SearchQuery{Text: "x"}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("empty tenant: %v", err)
		}
	})
}

// I8: nothing of tenant b is searchable or readable as tenant a, and
// nothing of another thread is readable in a thread's scope.
func TestTenantIsolation(t *testing.T) {
	backends(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		evs := archive(t, s)
		bEvs, err := s.Load(ctx, "b", "t1", 1, 0)
		if err != nil || len(bEvs) != 1 {
			t.Fatal(bEvs, err)
		}
		r := &recall.Recall{Store: s}
		for _, q := range []string{"INV-4401", "trace_id=checkout-failure-2026-03-15", "tenant b", "checkout timeout"} {
			for _, thread := range []string{"", "t1"} {
				hits, err := r.Search(ctx, "a", store.SearchQuery{Text: q, Thread: thread})
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range hits {
					if h.Ref == bEvs[0].Ref || strings.Contains(h.Snippet, "Tenant b") {
						t.Errorf("tenant a's search %q found tenant b's message", q)
					}
				}
			}
		}
		if _, err := recall.Read(ctx, s, "a", "", bEvs[0].Ref, 0, 0); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("read of tenant b's ref as a: %v, want ErrNotFound", err)
		}
		t2, _ := s.Load(ctx, "a", "t2", 1, 0)
		if _, err := recall.Read(ctx, s, "a", "t1", t2[0].Ref, 0, 0); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("read of thread t2's ref in t1's scope: %v, want ErrNotFound", err)
		}
		if _, err := recall.Read(ctx, s, "a", "", t2[0].Ref, 0, 0); err != nil {
			t.Errorf("read of t2's ref across the tenant: %v", err)
		}
		if _, err := recall.Read(ctx, s, "b", "t1", evs[0].Ref, 0, 0); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("read of a's ref as b: %v", err)
		}
		// The tool handler says the same to a model.
		h := &recall.Handler{Recall: r}
		out, err := h.Call(ctx, recall.Scope{Tenant: "a", Thread: "t1"}, recall.ToolRead, fmt.Sprintf(`{"ref":%q}`, bEvs[0].Ref))
		if !errors.Is(err, recall.ErrTool) || !strings.Contains(out, "no message with ref") || strings.Contains(out, "Tenant b") {
			t.Errorf("tool read across tenants: %q %v", out, err)
		}
	})
}
