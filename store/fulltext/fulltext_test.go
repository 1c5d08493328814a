package fulltext

import (
	"errors"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/store"
)

func TestParseQuery(t *testing.T) {
	type term struct {
		text     string
		toks     string
		req, vbt bool
	}
	cases := []struct {
		q    string
		want []term
	}{
		{"refund", []term{{"refund", "refund", false, false}}},
		{"Refund  POLICY", []term{{"Refund", "refund", false, false}, {"POLICY", "polici", false, false}}},
		{"INV-4401", []term{{"INV-4401", "inv 4401", true, true}}},
		{"(INV-4401),", []term{{"INV-4401", "inv 4401", true, true}}},
		{"trace_id=checkout-failure-2026-03-15", []term{{"trace_id=checkout-failure-2026-03-15", "trace id checkout failur 2026 03 15", true, true}}},
		{"src/app/main.go", []term{{"src/app/main.go", "src app main go", true, true}}},
		{"v2", []term{{"v2", "v2", true, true}}},
		{"2026", []term{{"2026", "2026", false, false}}},
		{`"checkout failure"`, []term{{"checkout failure", "checkout failur", true, false}}},
		{`"INV-4401"`, []term{{"INV-4401", "inv 4401", true, true}}},
		{`"unbalanced words`, []term{{"unbalanced", "unbalanc", false, false}, {"words", "word", false, false}}},
		{`AND OR NOT NEAR`, []term{{"NEAR", "near", false, false}}},
		{`and or not`, []term{{"and", "and", false, false}, {"or", "or", false, false}, {"not", "not", false, false}}},
		{`* ^ ( ) "" - _ .`, nil},
		{"dup dup DUP", []term{{"dup", "dup", false, false}}},
		{"", nil},
		{"讨论预算 🚀", []term{{"讨论预算", "讨论预算", false, false}}},
		{"\xff\xfeabc", []term{{"abc", "abc", false, false}}},
		// Possessives, stopwords, stems.
		{"What is Caroline's job?", []term{{"Caroline", "carolin", false, false}, {"job", "job", false, false}}},
		{"Caroline’s painting", []term{{"Caroline", "carolin", false, false}, {"painting", "paint", false, false}}},
		// Not identifiers: words.
		{"8th", []term{{"8th", "8th", false, false}}},
		{"1990s", []term{{"1990s", "1990s", false, false}}},
		{"self-portrait", []term{{"self-portrait", "self portrait", false, false}, {"self", "self", false, false}, {"portrait", "portrait", false, false}}},
		{"U.S", []term{{"U", "u", false, false}}},
		{"artists/bands", []term{{"artists/bands", "artist band", false, false}, {"artists", "artist", false, false}, {"bands", "band", false, false}}},
		{"8th-grade", []term{{"8th-grade", "8th grade", false, false}, {"8th", "8th", false, false}, {"grade", "grade", false, false}}},
		// A title in a sentence: a phrase that ranks, and its words.
		{`read "Becoming Nicole"`, []term{{"Becoming Nicole", "becom nicol", false, false}, {"read", "read", false, false}, {"Becoming", "becom", false, false}, {"Nicole", "nicol", false, false}}},
		// Identifiers.
		{"E1234", []term{{"E1234", "e1234", true, true}}},
		{"0x1f", []term{{"0x1f", "0x1f", true, true}}},
		{"src/shop/checkout.go", []term{{"src/shop/checkout.go", "src shop checkout go", true, true}}},
		{"gpt-4", []term{{"gpt-4", "gpt 4", true, true}}},
		{"example.com", []term{{"example.com", "exampl com", true, true}}},
		{"lookup_invoice", []term{{"lookup_invoice", "lookup invoic", true, true}}},
	}
	for _, c := range cases {
		q, err := ParseQuery(c.q)
		if err != nil {
			t.Errorf("ParseQuery(%q): %v", c.q, err)
			continue
		}
		var got []term
		for _, tm := range q.Terms {
			got = append(got, term{tm.Text, strings.Join(tm.Tokens, " "), tm.Required, tm.Verbatim})
		}
		if len(got) != len(c.want) {
			t.Errorf("ParseQuery(%q) = %+v, want %+v", c.q, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("ParseQuery(%q) term %d = %+v, want %+v", c.q, i, got[i], c.want[i])
			}
		}
	}
}

func TestParseQueryLimits(t *testing.T) {
	if _, err := ParseQuery(strings.Repeat("a", MaxQueryBytes+1)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("oversized query: err = %v, want store.ErrInvalid", err)
	}
	if q, err := ParseQuery(strings.Repeat("ab ", MaxQueryBytes/3)); err != nil || len(q.Terms) != 1 {
		t.Errorf("query of %d bytes: %v, %v", MaxQueryBytes, q, err)
	}
	var words []string
	for i := range MaxQueryTerms + 1 {
		words = append(words, strings.Repeat("x", i+1))
	}
	if _, err := ParseQuery(strings.Join(words, " ")); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("%d terms: err = %v, want store.ErrInvalid", len(words), err)
	}
	if _, err := ParseQuery(strings.Join(words[:MaxQueryTerms], " ")); err != nil {
		t.Errorf("%d terms: %v", MaxQueryTerms, err)
	}
}

func TestFTS5(t *testing.T) {
	cases := []struct{ q, want string }{
		{"refund policy", `"refund" OR "polici"`},
		{"INV-4401", `"inv 4401"`},
		{"INV-4401 src/main.go", `"inv 4401" AND "src main go"`},
		{"INV-4401 refund", `"inv 4401" AND ("inv 4401" OR "refund")`},
		{`"a b" "c"`, `"a b" AND "c"`},
		{`"a b" OR c`, `"a b" OR "c" OR "b"`},
	}
	for _, c := range cases {
		q, _ := ParseQuery(c.q)
		if got := q.FTS5(); got != c.want {
			t.Errorf("FTS5(%q) = %s, want %s", c.q, got, c.want)
		}
	}
}

// ftsShape is everything FTS5() may produce: quoted phrases joined by AND,
// OR and one pair of parentheses; inside the quotes only word tokens
// (IsTokenRune, which SQLite's tables decide: they count code points
// Unicode 6.1 did not assign, such as U+05CC) and spaces (ftsPhrasesOK).
var ftsShape = regexp.MustCompile(`^("[^"]+"|AND|OR|\(|\)| )*$`)

func ftsPhrasesOK(e string) bool {
	in := false
	for _, r := range e {
		switch {
		case r == '"':
			in = !in
		case in && r != ' ' && !IsTokenRune(r):
			return false
		}
	}
	return !in
}

func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"INV-4401", `"a b`, "NEAR(a b)", "a*", "\x00", "x=y:z/w.v_u-t", `"""`, "🚀a1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := ParseQuery(s)
		if err != nil {
			if !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("ParseQuery(%q): %v", s, err)
			}
			return
		}
		if e := q.FTS5(); !ftsShape.MatchString(e) || !ftsPhrasesOK(e) {
			t.Fatalf("ParseQuery(%q).FTS5() = %q: not only quoted phrases", s, e)
		}
		for _, tm := range q.Terms {
			if len(tm.Tokens) == 0 {
				t.Fatalf("term %+v has no tokens", tm)
			}
			if tm.Verbatim && !(ParsedQuery{Terms: []SearchTerm{tm}}).MatchesVerbatim(tm.Text) {
				t.Fatalf("verbatim term %q does not match itself", tm.Text)
			}
		}
		_ = Snippet(s, q, 50)
	})
}

func TestMatchesVerbatim(t *testing.T) {
	cases := []struct {
		q, text string
		want    bool
	}{
		{"INV-4401", "see INV-4401.", true},
		{"INV-4401", "see inv-4401", true},
		{"INV-4401", "INV 4401", false},
		{"INV-4401", "4401 INV", false},
		{"INV-4401", "INV-44010", false},
		{"INV-4401", "XINV-4401", false},
		{"INV-4401", "XINV-4401 and (INV-4401)", true},
		{"main.go", "src/app/main.go:42", true},
		{"main.go", "main_go", false},
		{"a=b", "x a=b y", true},
		{"INV-4401 refund", "INV-4401 only", true}, // plain words are not verbatim
		{"ÄB-12", "äb-12", true},
	}
	for _, c := range cases {
		q, _ := ParseQuery(c.q)
		if got := q.MatchesVerbatim(c.text); got != c.want {
			t.Errorf("MatchesVerbatim(%q, %q) = %v, want %v", c.q, c.text, got, c.want)
		}
	}
}

func TestSnippet(t *testing.T) {
	long := strings.Repeat("filler words here ", 40)
	cases := []struct {
		q, text, want string
	}{
		{"refund", "Please refund the order", "Please «refund» the order"},
		{"INV-4401", "INV 4401 no, INV-4401 yes", "INV 4401 no, «INV-4401» yes"},
		{"checkout failure", "checkout\n\nfailure   again", "«checkout» «failure» again"},
		{`"checkout failure"`, "a checkout failure b", "a «checkout failure» b"},
		{"zebra", "no match here", "no match here"},
		{"painting Caroline", "Caroline's sister painted it", "«Caroline»'s sister «painted» it"},
		{"needle", long + "the needle is here" + long, "…"},
	}
	for _, c := range cases {
		q, _ := ParseQuery(c.q)
		got := Snippet(c.text, q, 60)
		if c.want == "…" {
			if !strings.HasPrefix(got, "…") || !strings.HasSuffix(got, "…") || !strings.Contains(got, "«needle»") || len([]rune(got)) > 70 {
				t.Errorf("Snippet(long) = %q", got)
			}
			continue
		}
		if got != c.want {
			t.Errorf("Snippet(%q, %q) = %q, want %q", c.q, c.text, got, c.want)
		}
	}
}

func TestRank(t *testing.T) {
	q, _ := ParseQuery("refund invoice")
	docs := [][]string{IndexTerms("lunch"), IndexTerms("refund"), IndexTerms("refund the invoice"), IndexTerms("invoice")}
	got := q.Rank(docs, 10)
	if len(got) != 3 || got[0].Index != 2 {
		t.Fatalf("Rank = %+v; want 3 hits, doc 2 first", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Score > got[i-1].Score || got[i].Score <= 0 {
			t.Errorf("Rank = %+v: not best first, or a score not positive", got)
		}
	}
	req, _ := ParseQuery("INV-4401 refund")
	if got := req.Rank([][]string{IndexTerms("refund"), IndexTerms("INV 4401 refund")}, 2); len(got) != 1 || got[0].Index != 1 {
		t.Errorf("Rank with a required term = %+v; want doc 1 only", got)
	}
}

// rankByDefinition is BM25 as Rank defines it, written the plain way
// (PhraseCount of each term in each document): what Tally must equal.
func rankByDefinition(q ParsedQuery, docs [][]string, n int) []Scored {
	n = max(n, len(docs))
	df := make([]int, len(q.Terms))
	total := 0
	for _, d := range docs {
		total += len(d)
		for j, t := range q.Terms {
			if PhraseCount(d, t.Tokens) > 0 {
				df[j]++
			}
		}
	}
	avgdl := float64(total) / float64(len(docs))
	hasReq := len(q.Required()) > 0
	var out []Scored
	for i, d := range docs {
		ok, any := true, false
		var score float64
		for j, t := range q.Terms {
			tf := PhraseCount(d, t.Tokens)
			if tf == 0 {
				ok = ok && !t.Required
				continue
			}
			any = true
			score += BM25(tf, len(d), df[j], n, avgdl)
		}
		if ok && (hasReq || any) {
			out = append(out, Scored{i, score})
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Score > out[b].Score })
	return out
}

// TestTally: a Tally fed terms or stored bodies ranks exactly as the
// definition does, phrases (overlapping ones too) and required terms
// included, over random documents of a small vocabulary, fed as terms, as
// bodies or as token ids; AddBody says whether a document holds a term,
// and RemoveLast forgets it.
func TestTally(t *testing.T) {
	long := strings.Repeat("x", 70) // past the Tally's length filter
	vocab := []string{"refund", "invoice", "a", "self", "portrait", "inv", "4401", "lunch", "becom", "nicol", long, long[:69] + "y"}
	queries := []string{
		"refund invoice", `"a a"`, "self-portrait lunch", "INV-4401 refund", `read "Becoming Nicole" refund`,
		`"a a a" refund`, "zebra", "refund refund invoice", long + " lunch",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		docs := make([][]string, 1+rng.IntN(30))
		for i := range docs {
			for range rng.IntN(12) {
				docs[i] = append(docs[i], vocab[rng.IntN(len(vocab))])
			}
		}
		for _, qs := range queries {
			q, _ := ParseQuery(qs)
			want := rankByDefinition(q, docs, 50)
			if got := q.Rank(docs, 50); !slices.Equal(got, want) {
				t.Fatalf("round %d, %q: Rank = %v, want %v", round, qs, got, want)
			}
			ta := q.Tally()
			for i, d := range docs {
				if i%3 == 0 { // a document removed again leaves no trace
					ta.AddBody([]byte("refund a a invoice"))
					ta.RemoveLast()
				}
				holds := ta.AddBody([]byte(strings.Join(d, " ")))
				if want := slices.ContainsFunc(q.Terms, func(t SearchTerm) bool { return PhraseCount(d, t.Tokens) > 0 }); holds != want {
					t.Fatalf("round %d, %q: AddBody(%q) = %v, want %v", round, qs, d, holds, want)
				}
			}
			if got := ta.Rank(50); !slices.Equal(got, want) {
				t.Fatalf("round %d, %q: Tally of bodies = %v, want %v", round, qs, got, want)
			}
			tp := q.Tally()
			for _, d := range docs { // token by token, positions filled in reverse as an index may give them
				ids := make([]int32, len(d))
				for i := len(d) - 1; i >= 0; i-- {
					ids[i] = tp.TokenID([]byte(d[i]))
				}
				tp.AddIDs(ids)
			}
			if got := tp.Rank(50); !slices.Equal(got, want) {
				t.Fatalf("round %d, %q: Tally of ids = %v, want %v", round, qs, got, want)
			}
		}
	}
	// Bodies with stray spaces split as strings.Fields does.
	q, _ := ParseQuery("refund")
	ta := q.Tally()
	ta.AddBody([]byte("  refund   lunch "))
	ta.AddBody(nil)
	if got := ta.Rank(2); len(got) != 1 || got[0].Index != 0 || ta.Len() != 2 || ta.lens[0] != 2 || ta.lens[1] != 0 {
		t.Errorf("Tally of spaced bodies: %v, lengths %v", got, ta.lens)
	}
}
