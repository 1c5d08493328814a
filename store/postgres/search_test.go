package postgres

import (
	"strconv"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store/fulltext"
)

func TestIndexTerms(t *testing.T) {
	cases := []struct {
		name, text, want string
		lossy            int16
	}{
		{"empty", "", "", exact},
		{"words and positions", "Refund the refunds, INV-4401!", "'refund':1,3 'the':2 'inv':4 '4401':5", exact},
		{"stems and possessives", "Caroline's paintings", "'carolin':1 'paint':2", exact},
		{"unicode", "讨论预算 Ünïcode e\u0301", "'讨论预算':1 'ünïcode':2 'e\u0301':3", exact},
		{"operators are separators", `a & b | !c <-> 'd' "e"`, "'a':1 'b':2 'c':3 'd':4 'e':5", exact},
		{"too long a lexeme", "ok " + strings.Repeat("z", maxLexeme+1), "'ok':1", partialLexs},
		{"too many positions", strings.Repeat("w ", maxPositions+1), "'w':" + positions(maxPositions), inexactPos},
	}
	for _, c := range cases {
		got, lossy := indexTerms(c.text)
		if got != c.want || lossy != c.lossy {
			t.Errorf("%s: indexTerms = %q, %d; want %q, %d", c.name, short(got), lossy, short(c.want), c.lossy)
		}
	}
	// Past position 16383 every lexeme is kept, positions are not.
	text := strings.Repeat("a ", maxPosition) + "late"
	got, lossy := indexTerms(text)
	if lossy != inexactPos || !strings.HasSuffix(got, " 'late'") {
		t.Errorf("long text: lossy %d, tail %q", lossy, got[max(0, len(got)-20):])
	}
}

func positions(n int) string {
	p := make([]string, n)
	for i := range p {
		p[i] = strconv.Itoa(i + 1)
	}
	return strings.Join(p, ",")
}

func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func TestTSQuery(t *testing.T) {
	cases := []struct {
		q, exact, loose string
	}{
		{"refund", "('refund')", "('refund')"},
		{"refund invoices", "('refund') | ('invoic')", "('refund') | ('invoic')"},
		{"INV-4401", "('inv' <-> '4401')", "('inv' & '4401')"},
		{`"checkout failure" "refund"`, "('checkout' <-> 'failur') & ('refund')", "('checkout' & 'failur') & ('refund')"},
		{`INV-4401 refund`, "('inv' <-> '4401') & (('inv' <-> '4401') | ('refund'))", "('inv' & '4401') & (('inv' & '4401') | ('refund'))"},
		{`it's "a \ b" NOT & | !x`, "('a' <-> 'b') | ('x') | ('b')", "('a' & 'b') | ('x') | ('b')"},
	}
	for _, c := range cases {
		pq, err := fulltext.ParseQuery(c.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := tsQuery(pq, false); got != c.exact {
			t.Errorf("tsQuery(%q) = %s, want %s", c.q, got, c.exact)
		}
		if got := tsQuery(pq, true); got != c.loose {
			t.Errorf("loose tsQuery(%q) = %s, want %s", c.q, got, c.loose)
		}
	}
}

func TestDocTerms(t *testing.T) {
	terms, _ := indexTerms("the cat saw the other cat")
	r := row{terms: terms, msg: &message.Message{}}
	got := strings.Join(docTerms(r.indexed("acme", "t1")), " ")
	if got != "the cat saw the other cat" {
		t.Errorf("docTerms = %q", got)
	}
	long := strings.Repeat("w ", 300) + "end"
	terms, lossy := indexTerms(long)
	if got := docTerms(terms); lossy != inexactPos || len(got) < 256 || got[0] != "w" {
		t.Errorf("docTerms of a long document: %d terms, lossy %d", len(got), lossy)
	}
}

// A search reads candidates' terms keeping only the query's tokens: the
// sequence has docTerms' length and the same phrase counts for every
// term of the query, which is all BM25 asks of it.
func TestDocTermsKeepsWhatRankingReads(t *testing.T) {
	text := "the payment gateway timeout hit the payment gateway again, gateway payment"
	terms, _ := indexTerms(text)
	lit := row{terms: terms, msg: &message.Message{}}.indexed("acme", "t1")
	for _, q := range []string{"payment gateway", `"payment gateway"`, "gateway timeout refund", "nothing here"} {
		pq, err := fulltext.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		keep := map[string]string{}
		for _, term := range pq.Terms {
			for _, tok := range term.Tokens {
				keep[tok] = tok
			}
		}
		full, kept := docTerms(lit), docTermsOf([]byte(lit), keep)
		if len(kept) != len(full) {
			t.Errorf("%q: %d positions kept, %d in the document", q, len(kept), len(full))
		}
		for _, term := range pq.Terms {
			if a, b := fulltext.PhraseCount(full, term.Tokens), fulltext.PhraseCount(kept, term.Tokens); a != b {
				t.Errorf("%q: term %v counted %d times in what is kept, %d in the document", q, term.Tokens, b, a)
			}
		}
		if got := pq.Rank([][]string{kept}, 10); len(got) != len(pq.Rank([][]string{full}, 10)) {
			t.Errorf("%q: ranked differently", q)
		}
	}
}
