package postgres

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/fulltext"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/postgres/pgtest"
	"github.com/mnemehq/mneme/store/storetest"
)

func TestIndexTerms(t *testing.T) {
	cases := []struct {
		name, text, want string
		lossy            int16
	}{
		{"empty", "", "", exact},
		{"words and positions", "Refund the refunds, INV-4401!", "'4401':5 'inv':4 'refund':1,3 'the':2", exact},
		{"stems and possessives", "Caroline's paintings", "'carolin':1 'paint':2", exact},
		{"unicode", "讨论预算 Ünïcode e\u0301", "'e\u0301':3 'ünïcode':2 '讨论预算':1", exact},
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

// A search reads candidates' token ids from their terms literal (docIDs
// into a fulltext.Tally): it ranks them as it ranks their terms.
func TestTermsRankAsTerms(t *testing.T) {
	texts := []string{
		"the payment gateway timeout hit the payment gateway again, gateway payment",
		"nothing of the query here",
		"payment",
		strings.Repeat("gateway w ", 100) + "payment gateway",
	}
	for _, q := range []string{"payment gateway", `"payment gateway"`, "gateway timeout refund", "nothing here"} {
		pq, err := fulltext.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		tally := pq.Tally()
		var docs [][]string
		for _, text := range texts {
			terms, _ := indexTerms(text)
			lit := []byte(row{terms: terms, msg: &message.Message{}}.indexed("acme", "t1"))
			if ids := docIDs(lit, tally, nil); len(ids) != len(fulltext.IndexTerms(text)) {
				t.Errorf("%.20q: %d positions, want %d", text, len(ids), len(fulltext.IndexTerms(text)))
			} else {
				tally.AddIDs(ids)
			}
			docs = append(docs, fulltext.IndexTerms(text))
		}
		if got, want := tally.Rank(10), pq.Rank(docs, 10); !slices.Equal(got, want) {
			t.Errorf("%q: from the literals %v, from the terms %v", q, got, want)
		}
	}
}

// searchPaths are the ways a thread's search finds its candidates; each
// must find and rank exactly what the other does.
var searchPaths = []struct {
	name string
	path searchPath
}{
	{"index", useIndex},
	{"read-thread", readThread},
	{"cached-thread", cachedThread},
}

// TestSearchPaths runs the conformance suite's searches, and LoCoMo's
// questions against store/inmem, with every thread's search taking one
// path.
func TestSearchPaths(t *testing.T) {
	open := func(t *testing.T, path searchPath) *Store {
		s, err := Open(context.Background(), pgtest.DSN(t, "mneme_t"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		s.searchPath = path
		return s
	}
	for _, p := range searchPaths {
		t.Run(p.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store { return open(t, p.path) })
			t.Run("LoCoMoSame", func(t *testing.T) {
				storetest.LoCoMoSame(t, open(t, p.path), inmem.New())
			})
		})
	}
}

// TestIndexTermsSame: indexTerms writes what the first, plainer version
// of it wrote (indexTermsBefore, below), its lexemes sorted, on texts that
// reach its limits too.
func TestIndexTermsSame(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	words := []string{"refund", "the", "INV-4401", "Caroline's", "讨论预算", "e\u0301", "paintings", "a", "src/app/main.go", "2026-03-15"}
	texts := []string{"", "one", strings.Repeat("w ", maxPositions+5), strings.Repeat("a ", maxPosition) + "late b a",
		"ok " + strings.Repeat("z", maxLexeme+1) + " ok"}
	var many strings.Builder // distinct lexemes past maxLexemeBytes
	for i := 0; many.Len() < maxLexemeBytes+10_000; i++ {
		fmt.Fprintf(&many, "w%dx ", i)
	}
	texts = append(texts, many.String())
	for range 200 {
		var b strings.Builder
		for range rng.IntN(400) {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		texts = append(texts, b.String())
	}
	for _, text := range texts {
		got, gotLossy := indexTerms(text)
		want, wantLossy := indexTermsBefore(text)
		// The same lexemes and positions, now in PostgreSQL's order
		// (tokens hold no space nor quote, and sort after a quote).
		lexemes := strings.Fields(want)
		slices.Sort(lexemes)
		want = strings.Join(lexemes, " ")
		if got != want || gotLossy != wantLossy {
			t.Errorf("indexTerms(%.40q) = %.80q, %d; before %.80q, %d", text, got, gotLossy, want, wantLossy)
		}
		// The binary form an append sends is the literal's.
		bt := buildTerms(text, true)
		lit, nlex, lexemeBytes := appendTSVector(nil, got)
		if bt.lit != got || bt.lossy != gotLossy || !bytes.Equal(bt.bin, lit[4:]) || bt.lexemes != nlex || bt.bytes != lexemeBytes {
			t.Errorf("buildTerms(%.40q): %d lexemes of %d bytes, binary %.40x; the literal's %d of %d, %.40x",
				text, bt.lexemes, bt.bytes, bt.bin, nlex, lexemeBytes, lit[4:])
		}
	}
}

// indexTerms returns the tsvector literal of text and how lossy it is.
func indexTermsBefore(text string) (string, int16) {
	lossy := int16(exact)
	if len(text) > maxIndexText {
		text, lossy = text[:maxIndexText], partialLexs
		// The cut may split a token; its tail is lost with the rest.
	}
	toks := fulltext.IndexTerms(text)
	type lexeme struct {
		tok string
		pos []int
	}
	var lexs []*lexeme
	byTok := map[string]*lexeme{}
	bytes := 0
	for i, tok := range toks {
		l := byTok[tok]
		if l == nil {
			if len(tok) > maxLexeme || bytes+len(tok) > maxLexemeBytes {
				lossy = partialLexs
				continue
			}
			bytes += len(tok)
			l = &lexeme{tok: tok}
			byTok[tok] = l
			lexs = append(lexs, l)
		}
		switch {
		case i+1 > maxPosition, len(l.pos) == maxPositions:
			lossy = max(lossy, inexactPos)
		default:
			l.pos = append(l.pos, i+1)
		}
	}
	var b strings.Builder
	b.Grow(bytes + 8*len(lexs))
	for i, l := range lexs {
		if i > 0 {
			b.WriteByte(' ')
		}
		// Tokens are runs of letters, digits and marks: never a quote or a
		// backslash, the only characters a quoted lexeme would escape.
		b.WriteByte('\'')
		b.WriteString(l.tok)
		b.WriteByte('\'')
		for j, p := range l.pos {
			if j == 0 {
				b.WriteByte(':')
			} else {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(p))
		}
	}
	return b.String(), lossy
}

// TestTermsInPostgresOrder: a message's terms literal is written in the
// order PostgreSQL keeps a tsvector's lexemes, so that tsvectorin's sort
// is one pass: the stored tsvector prints as the literal, however the
// event was written.
func TestTermsInPostgresOrder(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.DSN(t, "mneme_t"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	texts := []string{"Refund the refunds, INV-4401!", "讨论预算 Ünïcode e\u0301 z a 0 9 _x x_ ab abc a1 ß ss",
		"Caroline's paintings and 2026-03-15 src/app/main.go", strings.Repeat("w ", maxPositions+3),
		"ok " + strings.Repeat("z", maxLexeme+1) + " ok", strings.Repeat("a ", maxPosition) + "late b"}
	var evs []store.Event
	for _, text := range texts {
		m := message.NewText(message.User, text)
		evs = append(evs, store.Event{Kind: store.KindMessage, Message: &m})
	}
	evs = append(evs, store.Event{Kind: store.KindNote, Data: []byte(`{"n":1}`)})
	// Every way events are written: a group commit, COPY (a large append),
	// an import.
	if _, err := s.Append(ctx, "acme", "t1", 0, evs); err != nil {
		t.Fatal(err)
	}
	var large []store.Event
	for len(large) < copyThreshold {
		large = append(large, evs...)
	}
	if _, err := s.Append(ctx, "acme", "t2", 0, large); err != nil {
		t.Fatal(err)
	}
	imported := slices.Clone(evs)
	for i := range imported {
		imported[i].Seq = int64(i + 1)
	}
	if err := s.Import(ctx, "acme", "t3", imported); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Pool().Query(ctx, `SELECT seq, terms, tsv::text FROM events ORDER BY thread, seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			seq        int64
			terms, tsv string
		)
		if err := rows.Scan(&seq, &terms, &tsv); err != nil {
			t.Fatal(err)
		}
		if terms != tsv {
			t.Errorf("event %d: terms %.100q, the tsvector %.100q", seq, terms, tsv)
		}
		n++
	}
	if want := 2*len(evs) + len(large); rows.Err() != nil || n != want {
		t.Fatalf("%d events, want %d, %v", n, want, rows.Err())
	}
}

// BenchmarkBuildTerms: an appended message's tsvector, on texts shaped as
// BenchmarkDurableAppend's messages (30 to 80 words of a skewed 2,000-word
// vocabulary).
func BenchmarkBuildTerms(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	texts := make([]string, 1000)
	for i := range texts {
		var t strings.Builder
		for range 30 + rng.IntN(50) {
			fmt.Fprintf(&t, "word%d ", int(2000*rng.Float64()*rng.Float64()))
		}
		texts[i] = t.String()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		buildTerms(texts[i%len(texts)], true)
	}
}
