package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

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
	t := buildTerms(text, false)
	return t.lit, t.lossy
}

// builtTerms are a document's index terms as buildTerms writes them.
type builtTerms struct {
	lit   string // the tsvector literal
	lossy int16
	// bin is the tsvector's entries in binary form, as tsvectorrecv reads
	// them after their count: each lexeme, NUL-terminated, then its
	// positions' count and its positions (16 bits each, weightless).
	bin []byte
	// lexemes is the number of entries, bytes their lexemes' bytes.
	lexemes, bytes int
}

// buildTerms returns text's index terms: the tsvector literal, and with
// bin the tsvector's entries in binary form too (what an append sends, so
// that neither it nor the server parses the literal again). Every append
// runs it on each message: the lexemes are numbered in the order they
// first occur, their positions gathered in one slice, and the literal
// written into one buffer in the lexemes' order, all of them scratch
// reused from one call to the next (the literal, and bin, are the
// allocations).
func buildTerms(text string, bin bool) builtTerms {
	lossy := int16(exact)
	if len(text) > maxIndexText {
		text, lossy = text[:maxIndexText], partialLexs
		// The cut may split a token; its tail is lost with the rest.
	}
	// The terms as substrings of IndexBody's one string (IndexTerms joined
	// by spaces; terms hold none): IndexTerms made a string of each.
	body := fulltext.IndexBody(text)
	sc := termScratch.Get().(*indexScratch)
	defer sc.put()
	ids := sc.ids[:0] // each position's lexeme, -1 for none
	var bytes int
	for i := 0; body != ""; i++ {
		tok, rest, _ := strings.Cut(body, " ")
		body = rest
		id, ok := sc.byTok[tok]
		if !ok {
			if len(tok) > maxLexeme || bytes+len(tok) > maxLexemeBytes {
				lossy = partialLexs
				ids = append(ids, -1)
				continue
			}
			bytes += len(tok)
			id = int32(len(sc.lexs))
			sc.byTok[tok] = id
			sc.lexs, sc.counts = append(sc.lexs, tok), append(sc.counts, 0)
		}
		switch {
		case i+1 > maxPosition, sc.counts[id] == maxPositions:
			lossy = max(lossy, inexactPos)
			ids = append(ids, -1)
		default:
			sc.counts[id]++
			ids = append(ids, id)
		}
	}
	sc.ids = ids
	// Each lexeme's positions, in order, at starts[id]...
	starts := append(sc.starts[:0], 0)
	for id, c := range sc.counts {
		starts = append(starts, starts[id]+c)
	}
	next := append(sc.next[:0], starts[:len(sc.lexs)]...)
	pos := slices.Grow(sc.pos[:0], int(starts[len(sc.lexs)]))[:starts[len(sc.lexs)]]
	for i, id := range ids {
		if id >= 0 {
			pos[next[id]] = int32(i + 1)
			next[id]++
		}
	}
	sc.starts, sc.next, sc.pos = starts, next, pos
	// Lexemes are written in PostgreSQL's order (bytewise): tsvectorin
	// sorts them, which on a sorted literal is one pass.
	order := sc.order[:0]
	for id := range sc.lexs {
		order = append(order, int32(id))
	}
	slices.SortFunc(order, func(a, b int32) int { return strings.Compare(sc.lexs[a], sc.lexs[b]) })
	sc.order = order
	b := slices.Grow(sc.buf[:0], bytes+3*len(sc.lexs)+6*len(pos))
	var tb []byte
	if bin {
		tb = make([]byte, 0, bytes+3*len(sc.lexs)+2*len(pos))
	}
	for i, id := range order {
		tok := sc.lexs[id]
		if i > 0 {
			b = append(b, ' ')
		}
		// Tokens are runs of letters, digits and marks: never a quote or a
		// backslash, the only characters a quoted lexeme would escape.
		b = append(b, '\'')
		b = append(b, tok...)
		b = append(b, '\'')
		ps := pos[starts[id]:starts[id+1]]
		for j, p := range ps {
			if j == 0 {
				b = append(b, ':')
			} else {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(p), 10)
		}
		if bin {
			tb = append(append(tb, tok...), 0)
			tb = be.AppendUint16(tb, uint16(len(ps)))
			for _, p := range ps {
				tb = be.AppendUint16(tb, uint16(p))
			}
		}
	}
	sc.buf = b
	return builtTerms{lit: string(b), lossy: lossy, bin: tb, lexemes: len(order), bytes: bytes}
}

// indexScratch is indexTerms' working memory.
type indexScratch struct {
	byTok                    map[string]int32
	lexs                     []string
	ids, counts, starts, pos []int32
	next, order              []int32
	buf                      []byte
}

var termScratch = sync.Pool{New: func() any { return &indexScratch{byTok: map[string]int32{}} }}

// put returns sc to the pool, unless a large document grew it: that memory
// goes back to the heap.
func (sc *indexScratch) put() {
	if len(sc.ids) > 1<<14 || cap(sc.buf) > 1<<17 {
		return
	}
	clear(sc.byTok)
	clear(sc.lexs) // no strings kept alive
	sc.lexs, sc.counts = sc.lexs[:0], sc.counts[:0]
	termScratch.Put(sc)
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
	// First: '#' sorts before every term (indexTerms writes them sorted),
	// and the thread's '#h' before the tenant's '#t'.
	sc := "'" + threadLexeme(tenant, thread) + "' '" + tenantLexeme(tenant) + "'"
	if r.terms == "" {
		return sc
	}
	return sc + " " + r.terms
}

// docTerms rebuilds a document's index terms, in order, from the tsvector
// literal indexTerms wrote (exact documents only), without scope lexemes.
func docTerms(lit string) []string {
	var (
		seq []string
		lex string
	)
	eachLexeme([]byte(lit), func(tok []byte) { lex = string(tok) }, func(pos int) {
		for len(seq) < pos {
			seq = append(seq, "")
		}
		seq[pos-1] = lex
	})
	return seq
}

// docIDs fills ids with the fulltext.Tally token id at each position of a
// tsvector literal (-1 for a token no query holds) and returns it: a
// candidate's document as AddIDs takes it. Each lexeme is looked up once.
// (The text literal, not the tsvector: PostgreSQL sends the terms column
// as it is, while the binary form of tsv costs the server twice as much,
// and the client more bytes.)
func docIDs(lit []byte, tally *fulltext.Tally, ids []int32) []int32 {
	ids = ids[:0]
	var id int32
	eachLexeme(lit, func(tok []byte) { id = tally.TokenID(tok) }, func(pos int) {
		for len(ids) < pos {
			ids = append(ids, -1)
		}
		ids[pos-1] = id
	})
	return ids
}

// eachLexeme calls lexeme with every lexeme of a tsvector literal, as
// indexTerms writes it and the driver holds it, but for scope lexemes
// (which have no positions), then at with each of its positions: '#h…'
// '#t…' 'next':2 'tok':1,5 (or, written before schema 5's build, in
// another order). It runs on every candidate of a search, so it
// scans the literal once without splitting it or making strings.
func eachLexeme(lit []byte, lexeme func(tok []byte), at func(pos int)) {
	for i := 0; i < len(lit); {
		if lit[i] != '\'' {
			i++
			continue
		}
		end := bytes.IndexByte(lit[i+1:], '\'')
		if end < 0 {
			return
		}
		raw := lit[i+1 : i+1+end]
		i += end + 2
		if i >= len(lit) || lit[i] != ':' {
			continue
		}
		lexeme(raw)
		i++
		for i < len(lit) {
			p := 0
			for i < len(lit) && '0' <= lit[i] && lit[i] <= '9' {
				p = p*10 + int(lit[i]-'0')
				i++
			}
			if p >= 1 {
				at(p)
			}
			if i >= len(lit) || lit[i] != ',' {
				break
			}
			i++
		}
	}
}

// A thread's search reads the thread's rows without the GIN index when
// the thread is small: testing the tsquery on a row (detoasting its
// tsvector) costs several times what reading the row's terms does, and a
// natural-language query (auto-recall's) finds most of a thread. Past
// these sizes the index finds the documents that hold a term. The same
// limits as store/sqlite's.
const (
	scanMessages = 2_000
	scanTokens   = 100_000
)

// searchPath is how a thread's search finds its candidates.
type searchPath int

const (
	bySize       searchPath = iota // readThread when the thread is small, else useIndex
	useIndex                       // the GIN index
	readThread                     // every message of the thread
	cachedThread                   // the term cache, else as bySize
)

// Search implements store.Archive. The candidates are every document of
// the scope (the thread, or the tenant) containing any term: the GIN index
// finds them, or, in a small thread, every message of the thread is read
// and those without a term dropped; the scope's document count comes in
// the same statement (one snapshot). A fulltext.Tally reads each
// candidate's positions from its terms literal and ranks them by BM25 with
// the scope's statistics (never another tenant's), and each is checked in
// Go, best first (verbatim identifiers; everything for lossy documents)
// until Limit hits are found.
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

	tally := pq.Tally()
	if q.Thread != "" && s.terms != nil && (s.searchPath == bySize || s.searchPath == cachedThread) {
		n, cands, ok, err := s.cachedCandidates(ctx, tenant, q, pq, tally)
		if err != nil {
			return nil, err
		}
		if ok {
			return s.hits(ctx, tenant, pq, tally, n, cands, limit)
		}
	}

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
	var where []string
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if q.Thread != "" {
		add("e.thread = $%d", q.Thread)
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
	// The candidates carry their terms, not their text (bodies can be
	// megabytes), but for lossy documents, whose terms are incomplete.
	// Shaped so that the planner can OR the GIN index with the partial
	// index on lossy documents.
	const cols = `e.thread, e.seq, e.ref, e.at, e.lossy, e.terms, CASE WHEN e.lossy > 0 THEN e.message END`
	match := "(e.tsv @@ $1::tsquery OR (e.lossy > 0 AND (e.lossy = 2 OR e.tsv @@ $3::tsquery)))"
	filters := strings.Join(append([]string{"e.tenant = $2"}, where...), " AND ")
	var sqlText string
	if q.Thread == "" {
		sqlText = `SELECT (SELECT COALESCE(SUM(messages), 0)::bigint FROM threads WHERE tenant = $2), ` + cols + `
			FROM events e WHERE ` + filters + ` AND ` + match + ` ORDER BY e.thread, e.seq`
	} else {
		// One statement, two branches, of which the thread's size (a
		// one-time filter) runs one: all its messages, or the index's
		// candidates. Every message event is indexed: the thread's count
		// of messages is its count of documents.
		small := fmt.Sprintf("(SELECT messages <= %d AND tokens <= %d FROM scope)", scanMessages, scanTokens)
		switch s.searchPath {
		case useIndex:
			small = "false"
		case readThread:
			small = "true"
		}
		sqlText = `WITH scope AS MATERIALIZED (SELECT messages, tokens FROM threads WHERE tenant = $2 AND id = $4)
			SELECT (SELECT messages FROM scope), ` + cols + ` FROM events e
				WHERE ` + filters + ` AND e.message IS NOT NULL AND ` + small + `
			UNION ALL
			SELECT (SELECT messages FROM scope), ` + cols + ` FROM events e
				WHERE ` + filters + ` AND ` + match + ` AND NOT ` + small + `
			ORDER BY 3`
	}

	var (
		n     int64
		cands []cand
	)
	rows, err := s.pool.Query(ctx, sqlText, args...)
	if err != nil {
		return nil, dbErr("search", err)
	}
	var (
		c        cand
		thread   []byte // the thread's name, read in place
		lossy    int16
		lossyMsg *string
		ids      []int32 // a candidate's tokens (docIDs)
	)
	for rows.Next() {
		// thread and terms are read in place (RawValues: valid until the
		// next row), not copied: candidates come a thread at a time, and
		// only the query's tokens of terms count.
		if err := rows.Scan(&n, nil, &c.seq, &c.ref, &c.at, &lossy, nil, &lossyMsg); err != nil {
			rows.Close()
			return nil, dbErr("search", err)
		}
		if raw := rows.RawValues()[1]; c.thread == "" || !bytes.Equal(raw, thread) {
			c.thread, thread = string(raw), append(thread[:0], raw...)
		}
		c.text = nil
		if lossy != exact {
			text, err := searchText(lossyMsg, store.Hit{Thread: c.thread, Seq: c.seq, At: backend.FromNanos(c.at)})
			if err != nil {
				rows.Close()
				return nil, err
			}
			if !matchesFully(pq, text) {
				continue
			}
			c.text = &text
			tally.AddTerms(fulltext.IndexTerms(text))
		} else if ids = docIDs(rows.RawValues()[6], tally, ids); !tally.AddIDs(ids) {
			tally.RemoveLast() // no term: not a candidate (only reading a thread finds these)
			continue
		}
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, dbErr("search", err)
	}
	return s.hits(ctx, tenant, pq, tally, n, cands, limit)
}

// A candidate is kept small: a search may have thousands, and only a page
// of them become hits (hits reads their texts).
type cand struct {
	thread, ref string
	seq, at     int64
	text        *string // SearchText, once read
	// From the term cache: the message (where its text is kept once read)
	// and its entry.
	doc  *termDoc
	from *threadTerms
}

// hits ranks the candidates in tally (cands, of a scope holding n
// documents) and returns the best limit that hold q's verbatim terms.
func (s *Store) hits(ctx context.Context, tenant string, pq fulltext.ParsedQuery, tally *fulltext.Tally, n int64, cands []cand, limit int) ([]store.Hit, error) {
	// Texts are read a page of ranked candidates at a time, in one query
	// each: a round trip per hit would cost more than the search. They are
	// read after the candidates' snapshot, which is safe because an event
	// is never rewritten: a text is the candidate's if its ref is (a
	// thread deleted and written again meanwhile reuses seqs, not refs),
	// and a candidate whose event is gone is no hit.
	var hits []store.Hit
	ranked := tally.Rank(int(n))
	for start := 0; start < len(ranked) && len(hits) < limit; {
		end := min(len(ranked), start+limit-len(hits)+2)
		var threads []string
		var seqs []int64
		for _, r := range ranked[start:end] {
			c := &cands[r.Index]
			if c.doc != nil && c.doc.text.Load() != nil {
				continue // all known
			}
			threads, seqs = append(threads, c.thread), append(seqs, c.seq)
		}
		type key struct {
			thread string
			seq    int64
		}
		type stored struct {
			hit store.Hit
			js  *string
		}
		texts := map[key]stored{}
		if len(seqs) > 0 {
			rows, err := s.pool.Query(ctx, `SELECT e.thread, e.seq, e.ref, e.role, e.tool, e.at, CASE WHEN e.lossy = 0 THEN e.message END FROM events e
			JOIN unnest($2::text[], $3::bigint[]) AS w(thread, seq) ON e.thread = w.thread AND e.seq = w.seq
			WHERE e.tenant = $1`, tenant, threads, seqs)
			if err != nil {
				return nil, dbErr("search", err)
			}
			for rows.Next() {
				var (
					st        stored
					ref, tool *string
					role      string
					at        int64
				)
				if err := rows.Scan(&st.hit.Thread, &st.hit.Seq, &ref, &role, &tool, &at, &st.js); err != nil {
					rows.Close()
					return nil, dbErr("search", err)
				}
				st.hit.Ref, st.hit.Role, st.hit.Tool, st.hit.At = deref(ref), message.Role(role), deref(tool), backend.FromNanos(at)
				texts[key{st.hit.Thread, st.hit.Seq}] = st
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, dbErr("search", err)
			}
			// The cache keeps the texts read, of every candidate of the
			// page: the next search's page is mostly the same.
			for _, r := range ranked[start:end] {
				c := &cands[r.Index]
				st, ok := texts[key{c.thread, c.seq}]
				if c.doc == nil || !ok || st.hit.Ref != c.ref {
					continue
				}
				text, err := searchText(st.js, st.hit)
				if err != nil {
					return nil, err
				}
				if c.doc.text.CompareAndSwap(nil, &text) {
					c.from.memo.bytes.Add(int64(len(text)))
					s.terms.grew(c.from.key, c.from.memo, len(text))
				}
			}
		}
		for _, r := range ranked[start:end] {
			if len(hits) == limit {
				break
			}
			c := cands[r.Index]
			var h store.Hit
			if d := c.doc; d != nil && d.text.Load() != nil {
				h = store.Hit{Thread: c.thread, Ref: d.ref, Seq: d.seq, Role: message.Role(d.role), Tool: d.tool, At: backend.FromNanos(d.at)}
				c.text = d.text.Load()
			} else {
				st, ok := texts[key{c.thread, c.seq}]
				if !ok || st.hit.Ref != c.ref {
					continue
				}
				h = st.hit
				if c.text == nil {
					text, err := searchText(st.js, h)
					if err != nil {
						return nil, err
					}
					c.text = &text
				}
			}
			if !pq.MatchesVerbatim(*c.text) {
				continue
			}
			h.Snippet = fulltext.Snippet(*c.text, pq, 0)
			h.Score = max(r.Score, minScore)
			hits = append(hits, h)
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
	m, err := backend.DecodeMessage(*js)
	if err != nil {
		return "", fmt.Errorf("event %s/%d: stored message: %w", h.Thread, h.Seq, err)
	}
	return fulltext.SearchText(*m, h.At), nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
