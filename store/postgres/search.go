package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// Indexing. PostgreSQL's own text search parser splits words differently
// from SQLite FTS5 (hyphenated words, file paths, numbers, non-Latin
// scripts), so it is not used at all: the text is tokenized in Go by
// store.Tokenize and written as a tsvector literal ('tok':1,5 'next':2),
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
	toks := store.Tokenize(text)
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
// store.ParsedQuery.Boolean as FTS5's MATCH text is. A term's tokens are a
// phrase (<->), or with loose set, merely all present (&): the candidate
// test for documents whose positions are not exact.
func tsQuery(q store.ParsedQuery, loose bool) string {
	term := func(t store.SearchTerm) string {
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
func matchesFully(q store.ParsedQuery, text string) bool {
	toks := store.Tokenize(text)
	req := q.Required()
	for _, t := range req {
		if store.PhraseCount(toks, t.Tokens) == 0 {
			return false
		}
	}
	if len(req) == 0 {
		found := false
		for _, t := range q.Optional() {
			if store.PhraseCount(toks, t.Tokens) > 0 {
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
func accept(q store.ParsedQuery, text string, lossy int16) bool {
	if lossy == exact {
		return q.MatchesVerbatim(text)
	}
	return matchesFully(q, text)
}

// minScore is the score of a hit the index could not rank (a lossy
// document matching past its indexed part): last, but positive.
const minScore = 1e-9

const maxLimit = 1000

// Search implements store.Archive. Candidates come from the GIN index, best
// ts_rank_cd first, in pages, inside one read-only snapshot; each is
// checked in Go (verbatim identifiers; everything for lossy documents)
// until Limit hits are found.
func (s *Store) Search(ctx context.Context, tenant string, q store.SearchQuery) ([]store.Hit, error) {
	if err := store.CheckSearch(tenant, q); err != nil {
		return nil, err
	}
	pq, err := store.ParseQuery(q.Text)
	if err != nil || pq.Empty() {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, maxLimit)

	args := []any{tsQuery(pq, false), tenant, tsQuery(pq, true)}
	// Shaped so that the planner can OR the GIN index with the partial
	// index on lossy documents.
	where := []string{"e.tenant = $2", "(e.tsv @@ $1::tsquery OR (e.lossy > 0 AND (e.lossy = 2 OR e.tsv @@ $3::tsquery)))"}
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
		add("e.at >= $%d", store.Nanos(q.Since))
	}
	if !q.Until.IsZero() {
		add("e.at <= $%d", store.Nanos(q.Until))
	}
	page := max(2*limit, 32)
	sqlText := `SELECT e.thread, e.seq, e.ref, e.role, e.tool, e.at, e.lossy, e.message, ts_rank_cd(e.tsv, $1::tsquery) AS rank
		FROM events e WHERE ` + strings.Join(where, " AND ") +
		fmt.Sprintf(` ORDER BY rank DESC, e.thread, e.seq LIMIT %d OFFSET $%d`, page, len(args)+1)

	var hits []store.Hit
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		for offset := 0; len(hits) < limit; offset += page {
			rows, err := tx.Query(ctx, sqlText, append(args, offset)...)
			if err != nil {
				return err
			}
			n := 0
			for rows.Next() {
				n++
				var (
					h         store.Hit
					ref, tool *string
					role, msg string
					at        int64
					lossy     int16
					rank      float32
				)
				if err := rows.Scan(&h.Thread, &h.Seq, &ref, &role, &tool, &at, &lossy, &msg, &rank); err != nil {
					rows.Close()
					return err
				}
				if len(hits) == limit {
					continue
				}
				var m message.Message
				if err := json.Unmarshal([]byte(msg), &m); err != nil {
					rows.Close()
					return fmt.Errorf("event %s/%d: stored message: %w", h.Thread, h.Seq, err)
				}
				text := m.PlainText()
				if !accept(pq, text, lossy) {
					continue
				}
				h.Ref, h.Role, h.At = deref(ref), message.Role(role), store.FromNanos(at)
				h.Tool, h.Score = deref(tool), max(float64(rank), minScore)
				h.Snippet = store.Snippet(text, pq, 0)
				hits = append(hits, h)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if n < page {
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, dbErr("search", err)
	}
	return hits, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
