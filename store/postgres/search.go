package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

// Indexing. PostgreSQL's own text search parser splits words differently
// from SQLite FTS5 (hyphenated words, file paths, numbers, non-Latin
// scripts), so it is not used at all: the text is reduced to terms in Go by
// fulltext.IndexTerms and written as a tsvector literal ('tok':1,5 'next':2),
// which the generated column casts without reparsing; queries are tsquery
// literals of the same quoted lexemes. What matches is then exactly what
// matches on SQLite, within tsvector's limits:
//
//   - a lexeme keeps at most 256 positions and positions stop at 16383;
//   - a lexeme is at most 2047 bytes, a tsvector's lexemes at most 1 MB.
//
// A document past the first limits is indexed with every lexeme but
// inexact positions (lossy 1: phrases are checked in Go); past the second,
// only partly (lossy 2: it is a candidate of every search of its tenant and
// checked in Go). Both are rare (multi-megabyte tool outputs) and still
// found.
const (
	maxPositions   = 256
	maxPosition    = 16383
	maxLexeme      = 2047
	maxLexemeBytes = 900_000
	maxIndexText   = 8 << 20 // bytes of a document tokenized at all
)

// Lossiness of a document's tsvector (the lossy column).
const (
	exact       = 0 // tsv @@ query is exactly the match
	inexactPos  = 1 // every lexeme is there, phrase positions are not exact
	partialLexs = 2 // some lexemes are missing
)

// indexTerms returns the tsvector literal of text and how lossy it is.
func indexTerms(text string) (string, int16) {
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

// tsQuery renders a parsed query as a tsquery literal, shaped by
// fulltext.ParsedQuery.Boolean as FTS5's MATCH text is. A term's tokens are a
// phrase (<->), or with loose set, merely all present (&): the candidate
// test for documents whose positions are not exact.
func tsQuery(q fulltext.ParsedQuery, loose bool) string {
	term := func(t fulltext.SearchTerm) string {
		op := " <-> "
		if loose {
			op = " & "
		}
		parts := make([]string, len(t.Tokens))
		for i, tok := range t.Tokens {
			parts[i] = "'" + tok + "'"
		}
		return "(" + strings.Join(parts, op) + ")"
	}
	return q.Boolean(term, " & ", " | ")
}

// matchesFully checks every condition of q on text, as the index would if
// it were exact: required phrases all present, else at least one optional
// one, and verbatim terms as typed.
func matchesFully(q fulltext.ParsedQuery, text string) bool {
	toks := fulltext.IndexTerms(text)
	req := q.Required()
	for _, t := range req {
		if fulltext.PhraseCount(toks, t.Tokens) == 0 {
			return false
		}
	}
	if len(req) == 0 {
		found := false
		for _, t := range q.Optional() {
			if fulltext.PhraseCount(toks, t.Tokens) > 0 {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return q.MatchesVerbatim(text)
}

// accept reports whether a candidate with this text and lossiness is a hit.
func accept(q fulltext.ParsedQuery, text string, lossy int16) bool {
	if lossy == exact {
		return q.MatchesVerbatim(text)
	}
	return matchesFully(q, text)
}

// minScore is the score of a hit the index could not rank (a lossy
// document matching past its indexed part): last, but positive.
const minScore = 1e-9

const maxLimit = 1000

// Scope lexemes. An event's tsvector also holds two lexemes naming its
// tenant and its thread, and a search ANDs its terms with one of them, so
// that the GIN index itself narrows to the scope: the cost of a search does
// not grow with what other threads and tenants hold. They start with '#',
// which no term holds (terms are runs of token characters), and are hashes
// (ids are arbitrary strings; a collision only adds candidates, which the
// tenant and thread columns then drop).
func tenantLexeme(tenant string) string { return "#t" + scopeHash(tenant) }

func threadLexeme(tenant, thread string) string {
	return "#h" + scopeHash(tenant+"\x00"+thread)
}

func scopeHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:10])
}

// indexed returns the terms column of the row: its terms and, for a
// message, the scope lexemes.
func (r row) indexed(tenant, thread string) string {
	if r.msg == nil {
		return r.terms
	}
	sc := "'" + tenantLexeme(tenant) + "' '" + threadLexeme(tenant, thread) + "'"
	if r.terms == "" {
		return sc
	}
	return r.terms + " " + sc
}

// docTerms rebuilds a document's index terms, in order, from the tsvector
// literal indexTerms wrote (exact documents only), without scope lexemes.
func docTerms(lit string) []string { return docTermsOf([]byte(lit), nil) }

// docTermsOf is docTerms over the literal's bytes as the driver holds
// them, keeping only the tokens of keep (as keep's own strings, so that a
// candidate costs no string of its own): every other position is "". The
// sequence keeps its length, so phrase counts and document lengths, all
// BM25 asks of it, are docTerms'. A nil keep keeps every token. It runs on
// every candidate of a search, so it scans the literal once without
// splitting it: 'tok':1,5 'next':2 '#t…' '#h…'.
func docTermsOf(lit []byte, keep map[string]string) []string {
	seq := make([]string, 0, bytes.Count(lit, []byte{','})+bytes.Count(lit, []byte{':'}))
	for i := 0; i < len(lit); {
		if lit[i] != '\'' {
			i++
			continue
		}
		end := bytes.IndexByte(lit[i+1:], '\'')
		if end < 0 {
			break
		}
		raw := lit[i+1 : i+1+end]
		i += end + 2
		if i >= len(lit) || lit[i] != ':' || (len(raw) > 0 && raw[0] == '#') {
			continue
		}
		var tok string
		if keep != nil {
			tok = keep[string(raw)] // "" when the query does not hold it
		} else {
			tok = string(raw)
		}
		i++
		for i < len(lit) {
			p := 0
			for i < len(lit) && '0' <= lit[i] && lit[i] <= '9' {
				p = p*10 + int(lit[i]-'0')
				i++
			}
			if p >= 1 {
				for len(seq) < p {
					seq = append(seq, "")
				}
				seq[p-1] = tok
			}
			if i >= len(lit) || lit[i] != ',' {
				break
			}
			i++
		}
	}
	return seq
}

// Search implements store.Archive. The GIN index finds the candidates,
// every document of the scope (the thread, or the tenant) containing any
// term, with the scope's document count in the same statement (one snapshot); fulltext.ParsedQuery.Rank scores them by
// BM25 with the scope's statistics (never another tenant's), and each is
// checked in Go, best first (verbatim identifiers; everything for lossy
// documents) until Limit hits are found.
func (s *Store) Search(ctx context.Context, tenant string, q store.SearchQuery) ([]store.Hit, error) {
	if err := backend.CheckSearch(tenant, q); err != nil {
		return nil, err
	}
	pq, err := fulltext.ParseQuery(q.Text)
	if err != nil || pq.Empty() {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, maxLimit)

	scope := tenantLexeme(tenant)
	if q.Thread != "" {
		scope = threadLexeme(tenant, q.Thread)
	}
	union := func(loose bool) string {
		op := " <-> "
		if loose {
			op = " & "
		}
		return "'" + scope + "' & (" + pq.Union(func(t fulltext.SearchTerm) string { return lexemes(t, op) }, " | ") + ")"
	}
	args := []any{union(false), tenant, union(true)}
	// Shaped so that the planner can OR the GIN index with the partial
	// index on lossy documents.
	where := []string{"e.tenant = $2", "(e.tsv @@ $1::tsquery OR (e.lossy > 0 AND (e.lossy = 2 OR e.tsv @@ $3::tsquery)))"}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	count := `(SELECT COALESCE(SUM(messages), 0)::bigint FROM threads WHERE tenant = $2)`
	if q.Thread != "" {
		add("e.thread = $%d", q.Thread)
		count = fmt.Sprintf(`(SELECT COALESCE(SUM(messages), 0)::bigint FROM threads WHERE tenant = $2 AND id = $%d)`, len(args))
	}
	if q.Role != "" {
		add("e.role = $%d", string(q.Role))
	}
	if q.Tool != "" {
		add("e.tool = $%d", q.Tool)
	}
	if q.FromSeq > 0 {
		add("e.seq >= $%d", q.FromSeq)
	}
	if q.ToSeq > 0 {
		add("e.seq <= $%d", q.ToSeq)
	}
	if !q.Since.IsZero() {
		add("e.at >= $%d", backend.Nanos(q.Since))
	}
	if !q.Until.IsZero() {
		add("e.at <= $%d", backend.Nanos(q.Until))
	}
	// One statement finds the candidates and the scope's document count
	// (every message event is indexed), so both come from one snapshot
	// and one round trip: on a loaded machine each round trip costs more
	// than the index scan. The candidates carry their terms, not their
	// text (bodies can be megabytes), but for lossy documents, whose terms
	// are incomplete.
	sqlText := `SELECT ` + count + `, e.thread, e.seq, e.ref, e.role, e.tool, e.at, e.lossy, e.terms,
			CASE WHEN e.lossy > 0 THEN e.message END
		FROM events e WHERE ` + strings.Join(where, " AND ") + ` ORDER BY e.thread, e.seq`

	type cand struct {
		hit  store.Hit
		text *string // SearchText, once read
	}
	var (
		n     int64
		cands []cand
		docs  [][]string
	)
	keep := map[string]string{}
	for _, t := range pq.Terms {
		for _, tok := range t.Tokens {
			keep[tok] = tok
		}
	}
	rows, err := s.pool.Query(ctx, sqlText, args...)
	if err != nil {
		return nil, dbErr("search", err)
	}
	for rows.Next() {
		var (
			c         cand
			ref, tool *string
			role      string
			at        int64
			lossy     int16
			lossyMsg  *string
		)
		// terms is read in place (RawValues: valid until the next row),
		// not copied into a string of its own.
		if err := rows.Scan(&n, &c.hit.Thread, &c.hit.Seq, &ref, &role, &tool, &at, &lossy, nil, &lossyMsg); err != nil {
			rows.Close()
			return nil, dbErr("search", err)
		}
		c.hit.Ref, c.hit.Role, c.hit.At, c.hit.Tool = deref(ref), message.Role(role), backend.FromNanos(at), deref(tool)
		d := docTermsOf(rows.RawValues()[8], keep)
		if lossy != exact {
			text, err := searchText(lossyMsg, c.hit)
			if err != nil {
				rows.Close()
				return nil, err
			}
			if !matchesFully(pq, text) {
				continue
			}
			c.text, d = &text, fulltext.IndexTerms(text)
		}
		cands = append(cands, c)
		docs = append(docs, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, dbErr("search", err)
	}
	// Texts are read a page of ranked candidates at a time, in one query
	// each: a round trip per hit would cost more than the search. They are
	// read after the candidates' snapshot, which is safe because an event
	// is never rewritten: a text is the candidate's if its ref is (a
	// thread deleted and written again meanwhile reuses seqs, not refs),
	// and a candidate whose event is gone is no hit.
	var hits []store.Hit
	ranked := pq.Rank(docs, int(n))
	for start := 0; start < len(ranked) && len(hits) < limit; {
		end := min(len(ranked), start+limit-len(hits)+2)
		var threads []string
		var seqs []int64
		for _, r := range ranked[start:end] {
			if c := &cands[r.Index]; c.text == nil {
				threads, seqs = append(threads, c.hit.Thread), append(seqs, c.hit.Seq)
			}
		}
		type stored struct{ ref, js string }
		texts := map[[2]string]stored{}
		if len(seqs) > 0 {
			rows, err := s.pool.Query(ctx, `SELECT e.thread, e.seq, e.ref, e.message FROM events e
				JOIN unnest($2::text[], $3::bigint[]) AS w(thread, seq) ON e.thread = w.thread AND e.seq = w.seq
				WHERE e.tenant = $1`, tenant, threads, seqs)
			if err != nil {
				return nil, dbErr("search", err)
			}
			for rows.Next() {
				var (
					h       store.Hit
					ref, js *string
				)
				if err := rows.Scan(&h.Thread, &h.Seq, &ref, &js); err != nil {
					rows.Close()
					return nil, dbErr("search", err)
				}
				texts[[2]string{h.Thread, strconv.FormatInt(h.Seq, 10)}] = stored{deref(ref), deref(js)}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, dbErr("search", err)
			}
		}
		for _, r := range ranked[start:end] {
			if len(hits) == limit {
				break
			}
			c := cands[r.Index]
			if c.text == nil {
				st, ok := texts[[2]string{c.hit.Thread, strconv.FormatInt(c.hit.Seq, 10)}]
				if !ok || st.ref != c.hit.Ref {
					continue
				}
				text, err := searchText(&st.js, c.hit)
				if err != nil {
					return nil, err
				}
				c.text = &text
			}
			if !pq.MatchesVerbatim(*c.text) {
				continue
			}
			c.hit.Snippet = fulltext.Snippet(*c.text, pq, 0)
			c.hit.Score = max(r.Score, minScore)
			hits = append(hits, c.hit)
		}
		start = end
	}
	return hits, nil
}

// lexemes spells a term's tokens as quoted lexemes joined by op.
func lexemes(t fulltext.SearchTerm, op string) string {
	parts := make([]string, len(t.Tokens))
	for i, tok := range t.Tokens {
		parts[i] = "'" + tok + "'"
	}
	return "(" + strings.Join(parts, op) + ")"
}

// searchText decodes a stored message and returns its fulltext.SearchText.
func searchText(js *string, h store.Hit) (string, error) {
	if js == nil {
		return "", fmt.Errorf("event %s/%d: no stored message", h.Thread, h.Seq)
	}
	var m message.Message
	if err := json.Unmarshal([]byte(*js), &m); err != nil {
		return "", fmt.Errorf("event %s/%d: stored message: %w", h.Thread, h.Seq, err)
	}
	return fulltext.SearchText(m, h.At), nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
