package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/sqlite"
)

var fuzzTexts = []string{
	"Please look up invoice INV-4401 for the refund",
	"INV 4402 pending; 4401 INV reversed",
	"trace_id=checkout-failure-2026-03-15 in src/app/main.go",
	"checkout failure again and again",
	"我们明天开会 讨论预算 🚀 مرحبا שלום",
	"AND OR NOT NEAR * ^ ( ) \" ' ; -- DROP TABLE events",
	"café naïve Ünïcödé e\u0301 ǅ ß ﬁ",
	"हिन्दी में खोज, ภาษาไทย, العَرَبِيَّة, עִבְרִית 🏽",
}

// seedHits are seeds that must find something (marks and scripts whose
// words the tokenizers must keep whole).
var seedHits = map[string]int{"हिन्दी": 8, "العَرَبِيَّة": 8, "ภาษาไทย": 8, "e\u0301": 7, "INV-4401": 1}

// FuzzSearch: any query text gives hits or ErrInvalid from SQLite, never an
// SQL error, and the same hits as the in-memory backend (both implement one
// matching rule, fulltext.ParsedQuery): from the archive index (its MATCH
// expression is built from the query), and from the index's queue, which a
// tenant's search reads beside it.
func FuzzSearch(f *testing.F) {
	for _, s := range []string{"INV-4401", `"checkout failure`, "NEAR(a b)", "a* OR b", "讨论预算", "e\u0301", "ǅ", "ß", "\x00", `"""`, "हिन्दी", "العَرَبِيَّة", "ภาษาไทย"} {
		f.Add(s)
	}
	ctx := context.Background()
	sq, err := sqlite.Open(ctx, filepath.Join(f.TempDir(), "fuzz.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { sq.Close() })
	queued, err := sqlite.Open(ctx, filepath.Join(f.TempDir(), "queued.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { queued.Close() })
	mem := inmem.New()
	var evs []store.Event
	for _, s := range fuzzTexts {
		m := message.NewText(message.User, s)
		evs = append(evs, store.Event{Kind: store.KindMessage, Message: &m})
	}
	for _, st := range []store.Store{sq, queued, mem} {
		if _, err := st.Append(ctx, "t", "th", 0, evs); err != nil {
			f.Fatal(err)
		}
	}
	if err := sq.CatchUpIndex(ctx); err != nil { // sq searches its index; queued, its queue
		f.Fatal(err)
	}
	seqs := func(hs []store.Hit) []int64 {
		var out []int64
		for _, h := range hs {
			out = append(out, h.Seq)
		}
		slices.Sort(out)
		return out
	}
	f.Fuzz(func(t *testing.T, q string) {
		b, errB := mem.Search(ctx, "t", store.SearchQuery{Text: q, Limit: 100})
		for name, st := range map[string]store.Store{"index": sq, "queue": queued} {
			a, errA := st.Search(ctx, "t", store.SearchQuery{Text: q, Limit: 100})
			if errA != nil && !errors.Is(errA, store.ErrInvalid) {
				t.Fatalf("sqlite (%s) Search(%q): %v", name, q, errA)
			}
			if (errA == nil) != (errB == nil) {
				t.Fatalf("Search(%q): sqlite (%s) err %v, memory err %v", q, name, errA, errB)
			}
			if want := seedHits[q]; want != 0 && !slices.Contains(seqs(a), int64(want)) {
				t.Fatalf("sqlite (%s) Search(%q) = %v, want seq %d among them", name, q, seqs(a), want)
			}
			if !slices.Equal(seqs(a), seqs(b)) {
				t.Fatalf("Search(%q): sqlite (%s) %v, memory %v", q, name, seqs(a), seqs(b))
			}
		}
	})
}
