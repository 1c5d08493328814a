package storetest

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// rulesDocs is the fixture of the search rules: seq i+1 is rulesDocs[i].
var rulesDocs = []string{
	1:  "Caroline's painting of a sunset won at the 8th annual show",
	2:  "Melanie made a self-portrait last week",
	3:  "She moved to the U.S in 2019",
	4:  "The artists/bands she likes are loud",
	5:  `I finished reading "Becoming Nicole" yesterday`,
	6:  "Deploy failed in src/shop/checkout.go with code E1234 at 0x1f",
	7:  "Invoice INV-4401 is paid",
	8:  "The painter paints; painted walls everywhere",
	9:  "hello there",                       // named Zoltan
	10: "ordinary words on an ordinary day", // at 2023-05-08
	11: "what did you do there",
	12: "the show was great",
	13: "a portrait of herself",
	14: "bands are fun",
	15: "Nicole called",
	16: "checkout go shop src",
	17: "code E 1234 and 0x 1f",
	18: "INV 4401 and 4401 INV",
	19: "Caroline said hi",
	20: "Nicole kept becoming tired", // the phrase's words, not the phrase
}

// rulesAt is when every fixture message but the tenth was written.
var rulesAt = time.Date(2026, 3, 15, 9, 0, 0, 0, time.UTC)

func loadRules(t *testing.T, s store.Store) {
	var evs []store.Event
	for i, d := range rulesDocs[1:] {
		m := message.NewText(message.User, d)
		at := rulesAt.Add(time.Duration(i) * time.Minute)
		switch i + 1 {
		case 9:
			m.Name = "Zoltan"
		case 10:
			at = time.Date(2023, 5, 8, 13, 56, 0, 0, time.UTC)
		}
		evs = append(evs, store.Event{Kind: store.KindMessage, At: at, Message: &m})
	}
	mustAppend(t, s, "acme", "rules", 0, evs...)
}

// testSearchRules: what each search rule (fulltext.ParseQuery) must and must
// not match, the same on every backend.
func testSearchRules(t *testing.T, s store.Store) {
	loadRules(t, s)
	cases := []struct {
		rule, q string
		first   int64   // the best hit, 0: not checked
		must    []int64 // among the hits
		mustNot []int64
	}{
		{"possessive in the text", "Caroline", 0, []int64{1, 19}, nil},
		{"possessive in the query", "Caroline's painting", 1, []int64{1, 19}, nil},
		{"stemming", "paint", 0, []int64{1, 8}, []int64{2}},
		{"stemming both ways", "painters painting", 0, []int64{1, 8}, nil},
		{"stopwords are dropped", "What did Caroline paint?", 1, []int64{1, 8, 19}, []int64{11, 12}},
		{"a query of stopwords only keeps them", "what did you do", 11, []int64{11}, []int64{1}},
		{"an ordinal is a word", "8th annual show", 1, []int64{1, 12}, nil},
		{"a hyphenated word is words", "self-portrait", 2, []int64{2, 13}, nil},
		{"an abbreviation is a word", "U.S", 3, []int64{3}, nil},
		{"a slashed word is words", "artists/bands", 4, []int64{4, 14}, nil},
		{"a title in a question is words", `Did she like "Becoming Nicole"?`, 5, []int64{5, 15}, nil},
		{"a quoted phrase alone is required", `"Becoming Nicole"`, 5, []int64{5}, []int64{15, 20}},
		{"a path is an identifier", "src/shop/checkout.go", 6, []int64{6}, []int64{16}},
		{"a code is an identifier", "E1234", 6, []int64{6}, []int64{17}},
		{"a hex number is an identifier", "0x1f", 6, []int64{6}, []int64{17}},
		{"an id is an identifier", "INV-4401", 7, []int64{7}, []int64{18}},
		{"an identifier is required among words", "INV-4401 paid invoice painting", 7, []int64{7}, []int64{1, 8, 18}},
		{"the name is searchable", "Zoltan", 9, []int64{9}, nil},
		{"the date is searchable", "2023-05-08", 10, []int64{10}, []int64{1, 9}},
		{"the month is searchable", "May 2023", 10, []int64{10}, []int64{1, 9}},
		{"the weekday is searchable", "Monday", 10, []int64{10}, []int64{1, 9}},
	}
	for _, c := range cases {
		hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: c.q, Thread: "rules", Limit: 50})
		if err != nil {
			t.Errorf("%s: Search(%q): %v", c.rule, c.q, err)
			continue
		}
		got := hitSeqs(hits)
		for _, w := range c.must {
			if !slices.Contains(got, w) {
				t.Errorf("%s: Search(%q) = %v, lacks %d (%q)", c.rule, c.q, got, w, rulesDocs[w])
			}
		}
		for _, w := range c.mustNot {
			if slices.Contains(got, w) {
				t.Errorf("%s: Search(%q) = %v, has %d (%q)", c.rule, c.q, got, w, rulesDocs[w])
			}
		}
		if c.first != 0 && (len(hits) == 0 || hits[0].Seq != c.first) {
			t.Errorf("%s: Search(%q) = %v, want %d first", c.rule, c.q, seqsInOrder(hits), c.first)
		}
	}
}

func seqsInOrder(hits []store.Hit) []int64 {
	var out []int64
	for _, h := range hits {
		out = append(out, h.Seq)
	}
	return out
}

// testSearchStatistics: BM25 statistics are those of the searched scope,
// so a tenant's scores (and what they could reveal) do not move when
// another tenant, or for a thread search another thread, writes.
func testSearchStatistics(t *testing.T, s store.Store) {
	mustAppend(t, s, "A", "t1", 0, text(message.User, "refund the invoice"), text(message.User, "lunch plans"), text(message.User, "refund again"))
	mustAppend(t, s, "A", "t2", 0, text(message.User, "weather talk"))
	scores := func(q store.SearchQuery) []float64 {
		hits, err := s.Search(ctx, "A", q)
		if err != nil {
			t.Fatal(err)
		}
		var out []float64
		for _, h := range hits {
			out = append(out, h.Score)
		}
		return out
	}
	same := func(a, b []float64) bool {
		return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(x)) })
	}
	tenant := scores(store.SearchQuery{Text: "refund invoice"})
	thread := scores(store.SearchQuery{Text: "refund invoice", Thread: "t1"})
	if len(tenant) != 2 || len(thread) != 2 {
		t.Fatalf("scores %v, %v; want 2 hits each", tenant, thread)
	}
	var noise []store.Event
	for i := range 30 {
		noise = append(noise, text(message.User, "refund refund invoice number "+string(rune('a'+i%26))))
	}
	mustAppend(t, s, "B", "t1", 0, noise...)
	if got := scores(store.SearchQuery{Text: "refund invoice"}); !same(got, tenant) {
		t.Errorf("tenant A's scores moved with tenant B's writes: %v, then %v", tenant, got)
	}
	mustAppend(t, s, "A", "t3", 0, noise...)
	if got := scores(store.SearchQuery{Text: "refund invoice", Thread: "t1"}); !same(got, thread) {
		t.Errorf("thread t1's scores moved with thread t3's writes: %v, then %v", thread, got)
	}
	if got := scores(store.SearchQuery{Text: "refund invoice"}); same(got[:2], tenant) {
		t.Errorf("tenant A's scores did not move with its own writes: %v", got)
	}
}
