package fulltext

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// testIndex is an inverted index of docs, doc d at number first+2d (the
// numbers of a scope need not be dense), built with Posting.Add as a
// backend builds one.
type testIndex struct {
	docs     [][]string
	first    int64
	postings map[string]*Posting
}

func newTestIndex(docs [][]string, first int64) *testIndex {
	ix := &testIndex{docs: docs, first: first, postings: map[string]*Posting{}}
	for i, d := range docs {
		for _, tok := range d {
			p := ix.postings[tok]
			if p == nil {
				p = &Posting{}
				ix.postings[tok] = p
			}
			p.Add(ix.num(i))
		}
	}
	return ix
}

func (ix *testIndex) num(i int) int64             { return ix.first + 2*int64(i) }
func (ix *testIndex) at(doc int64) []string       { return ix.docs[(doc-ix.first)/2] }
func (ix *testIndex) Posting(tok string) *Posting { return ix.postings[tok] }
func (ix *testIndex) Len(doc int64) int           { return len(ix.at(doc)) }
func (ix *testIndex) Terms(docs []int64) ([][]string, error) {
	out := make([][]string, len(docs))
	for i, doc := range docs {
		out[i] = ix.at(doc)
	}
	return out, nil
}

// checkPostings: a Tally fed postings (in two scopes, as a tenant's search
// feeds one thread after another) ranks exactly as one fed the terms of
// the candidates (every document holding a term that keep accepts), the
// exhaustive path, and as the definition; Ranked gives Rank's order; the
// documents AddPostings returns are those candidates, in order.
func checkPostings(t *testing.T, q ParsedQuery, docs [][]string, keep func(i int) bool, n int) {
	t.Helper()
	half := len(docs) / 2
	scopes := []*testIndex{newTestIndex(docs[:half], 1), newTestIndex(docs[half:], 5)}
	var cands [][]string
	var want []int64 // candidates' numbers, scope by scope
	exhaustive := q.Tally()
	for s, ix := range scopes {
		for i, d := range ix.docs {
			if keep != nil && !keep(s*half+i) {
				continue
			}
			if exhaustive.AddTerms(d) {
				cands = append(cands, d)
				want = append(want, ix.num(i))
			} else {
				exhaustive.RemoveLast()
			}
		}
	}
	wantRank := exhaustive.Rank(n)
	if def := rankByDefinition(q, cands, n); len(cands) > 0 && !slices.Equal(wantRank, def) {
		t.Fatalf("%+v: the exhaustive Tally ranks %v, the definition %v", q.Terms, wantRank, def)
	}
	fast := q.Tally()
	var got []int64
	for s, ix := range scopes {
		var keepDoc func(int64) bool
		if keep != nil {
			keepDoc = func(doc int64) bool { return keep(s*half + int((doc-ix.first)/2)) }
		}
		added, err := fast.AddPostings(ix, keepDoc)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, added...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%+v over %q: AddPostings added %v, the candidates are %v", q.Terms, docs, got, want)
	}
	if !slices.Equal(fast.lens, exhaustive.lens) || !slices.Equal(fast.tf, exhaustive.tf) {
		t.Fatalf("%+v over %q: postings counted lengths %v, counts %v; the terms %v, %v", q.Terms, docs, fast.lens, fast.tf, exhaustive.lens, exhaustive.tf)
	}
	gotRank := fast.Rank(n)
	if !slices.Equal(gotRank, wantRank) {
		t.Fatalf("%+v over %q: Rank from postings %v, from terms %v", q.Terms, docs, gotRank, wantRank)
	}
	var lazy []Scored
	for r := range fast.Ranked(n) {
		lazy = append(lazy, r)
	}
	if !slices.Equal(lazy, wantRank) {
		t.Fatalf("%+v: Ranked %v, Rank %v", q.Terms, lazy, wantRank)
	}
	for k := range min(3, len(wantRank)) { // stopping early
		var first []Scored
		for r := range fast.Ranked(n) {
			if len(first) == k {
				break
			}
			first = append(first, r)
		}
		if !slices.Equal(first, wantRank[:k]) {
			t.Fatalf("%+v: Ranked's first %d: %v, want %v", q.Terms, k, first, wantRank[:k])
		}
	}
}

// TestAddPostings holds the postings path to the exhaustive one on random
// documents of a small vocabulary (so that terms repeat, phrases overlap and
// scores tie), with and without a filter.
func TestAddPostings(t *testing.T) {
	long := strings.Repeat("x", 70)
	vocab := []string{"refund", "invoice", "a", "self", "portrait", "inv", "4401", "lunch", "becom", "nicol", long, "src", "f12", "go"}
	queries := []string{
		"refund invoice", `"a a"`, "self-portrait lunch", "INV-4401 refund", `read "Becoming Nicole" refund`,
		`"a a a" refund`, "zebra", "refund refund invoice", long + " lunch", `"self portrait" "a a"`,
		"src/f12.go: does F12 still return nil?", `"portrait self" invoice a`, "INV-4401 src/f12.go",
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		docs := make([][]string, rng.IntN(40))
		for i := range docs {
			for range rng.IntN(14) {
				docs[i] = append(docs[i], vocab[rng.IntN(len(vocab))])
			}
		}
		mod := 1 + rng.IntN(4)
		for _, qs := range queries {
			q, err := ParseQuery(qs)
			if err != nil {
				t.Fatal(err)
			}
			checkPostings(t, q, docs, nil, 60)
			checkPostings(t, q, docs, func(i int) bool { return i%mod != 0 }, 60)
		}
	}
}

// FuzzAddPostings: any query over any documents ranks the same from
// postings as from terms. The documents are the lines of text.
func FuzzAddPostings(f *testing.F) {
	f.Add("refund invoice", "the refund\nan invoice for the refund\nlunch")
	f.Add(`"a a" b`, "a a a b\nb a\na a")
	f.Add("self-portrait INV-4401", "self portrait self-portrait\nINV 4401 inv-4401 self\n\nportrait self portrait")
	f.Add("src/f12.go nil", "src/f12.go returns nil\nsrc f12 go\ngo src/f12.go src/f12.go")
	f.Fuzz(func(t *testing.T, query, text string) {
		q, err := ParseQuery(query)
		if err != nil {
			return
		}
		var docs [][]string
		for _, line := range strings.Split(text, "\n") {
			docs = append(docs, IndexTerms(line))
		}
		checkPostings(t, q, docs, nil, 0)
		checkPostings(t, q, docs, func(i int) bool { return i%2 == 0 }, 0)
	})
}

// TestCollapseSpace: collapseSpace is strings.Fields joined by spaces, on
// random strings of spaces (ASCII and not), words and invalid bytes.
func TestCollapseSpace(t *testing.T) {
	parts := []string{" ", "  ", "\t", "\n", "\v", "\f", "\r", "\u0085", "\u00a0", "\u2003", "\u3000", "a", "bc", "é", "日本", "\xff", "\xe2\x80", "«x»", "…"}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		s := b.String()
		if got, want := collapseSpace(s), strings.Join(strings.Fields(s), " "); got != want {
			t.Fatalf("collapseSpace(%q) = %q, want %q", s, got, want)
		}
	}
}

func FuzzCollapseSpace(f *testing.F) {
	f.Add(" a \u00a0b\t\xffc ")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := collapseSpace(s), strings.Join(strings.Fields(s), " "); got != want {
			t.Fatalf("collapseSpace(%q) = %q, want %q", s, got, want)
		}
	})
}
