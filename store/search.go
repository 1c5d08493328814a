package store

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mnemehq/mneme/message"
)

// Query parsing shared by every backend, so that "what matches" is the same
// on memory, SQLite and PostgreSQL: backends only differ in how they find
// candidates and rank them.
//
// A query is split on whitespace into terms; a "double-quoted phrase" is one
// term. Each term is reduced to word tokens exactly as SQLite's FTS5
// unicode61 tokenizer sees them (runs of letters, digits and private-use
// characters, lowercased), so nothing a user types ever reaches a query
// language: FTS operators, stars, carets and parentheses are separators.
//
// Matching rules:
//   - identifier-like terms (containing - _ . / = : or mixing letters and
//     digits: INV-4401, trace_id=checkout-failure-2026-03-15, src/app/main.go)
//     are Verbatim and Required: the hit must contain the term itself,
//     case-insensitively, aligned on token boundaries. "INV 4402",
//     "4401 INV" or "INV 4401" do not match INV-4401;
//   - quoted phrases are Required and match their token sequence;
//   - plain words are optional: a hit needs at least one of them when the
//     query has no required term, otherwise they only raise the rank.

// Query limits: larger queries are ErrInvalid rather than slow.
const (
	MaxQueryBytes = 16 << 10
	MaxQueryTerms = 64
)

// SearchTerm is one term of a parsed query.
type SearchTerm struct {
	// Text is the term as typed, stripped of surrounding punctuation; for a
	// Verbatim term it is the exact string a hit must contain.
	Text string
	// Tokens are the term's lowercased word tokens, in order: an FTS phrase.
	Tokens []string
	// Required terms must all match; optional ones rank.
	Required bool
	// Verbatim terms must occur as typed (case-insensitively, on token
	// boundaries), not merely as a token sequence.
	Verbatim bool
}

// ParsedQuery is a user's search text parsed into terms.
type ParsedQuery struct {
	Terms []SearchTerm
}

// ParseQuery parses user search text. It never fails on content, only on
// size (ErrInvalid): any string yields a query, possibly an empty one.
func ParseQuery(s string) (ParsedQuery, error) {
	if len(s) > MaxQueryBytes {
		return ParsedQuery{}, fmt.Errorf("%w: query longer than %d bytes", ErrInvalid, MaxQueryBytes)
	}
	s = strings.ToValidUTF8(s, " ")
	var q ParsedQuery
	seen := map[string]bool{}
	add := func(t SearchTerm) {
		if len(t.Tokens) == 0 {
			return
		}
		k := fmt.Sprint(t.Required, t.Verbatim, strings.ToLower(t.Text), t.Tokens)
		if seen[k] {
			return
		}
		seen[k] = true
		q.Terms = append(q.Terms, t)
	}
	for len(s) > 0 {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			for _, w := range strings.Fields(s) {
				add(wordTerm(w))
			}
			break
		}
		for _, w := range strings.Fields(s[:i]) {
			add(wordTerm(w))
		}
		rest := s[i+1:]
		j := strings.IndexByte(rest, '"')
		if j < 0 { // unbalanced quote: the quote is just a separator
			s = rest
			continue
		}
		add(phraseTerm(rest[:j]))
		s = rest[j+1:]
	}
	if len(q.Terms) > MaxQueryTerms {
		return ParsedQuery{}, fmt.Errorf("%w: query has more than %d terms", ErrInvalid, MaxQueryTerms)
	}
	return q, nil
}

func wordTerm(w string) SearchTerm {
	w = strings.TrimFunc(w, func(r rune) bool { return !IsTokenRune(r) })
	t := SearchTerm{Text: w, Tokens: Tokenize(w)}
	if isIdentifier(w) {
		t.Required, t.Verbatim = true, true
	}
	return t
}

func phraseTerm(p string) SearchTerm {
	p = strings.TrimFunc(p, func(r rune) bool { return !IsTokenRune(r) })
	t := SearchTerm{Text: p, Tokens: Tokenize(p), Required: true}
	if !strings.ContainsFunc(p, unicode.IsSpace) && isIdentifier(p) {
		t.Verbatim = true
	}
	return t
}

// isIdentifier reports whether a whitespace-free word looks like an id, a
// path, a key=value pair or a code rather than a natural-language word.
func isIdentifier(w string) bool {
	if strings.ContainsAny(w, "-_./=:") && len(Tokenize(w)) > 0 {
		return true
	}
	var letter, digit bool
	for _, r := range w {
		letter = letter || unicode.IsLetter(r)
		digit = digit || unicode.IsDigit(r)
	}
	return letter && digit
}

// Empty reports whether the query has no searchable term; such a query
// returns no hits.
func (q ParsedQuery) Empty() bool { return len(q.Terms) == 0 }

// Required returns the terms every hit must match.
func (q ParsedQuery) Required() []SearchTerm { return q.filter(true) }

// Optional returns the terms that rank (and that, without required terms,
// a hit must match at least one of).
func (q ParsedQuery) Optional() []SearchTerm { return q.filter(false) }

func (q ParsedQuery) filter(req bool) []SearchTerm {
	var out []SearchTerm
	for _, t := range q.Terms {
		if t.Required == req {
			out = append(out, t)
		}
	}
	return out
}

// FTS5 returns the query as an SQLite FTS5 MATCH expression made only of
// quoted phrases, AND, OR and parentheses. It finds a superset of the hits:
// callers must still check Verbatim terms with MatchesVerbatim.
func (q ParsedQuery) FTS5() string {
	return q.Boolean(func(t SearchTerm) string { return ftsPhrase(t.Tokens) }, " AND ", " OR ")
}

// Boolean returns the query as a full-text index's boolean expression:
// the required terms AND-ed, and the optional terms OR-ed (alone, or with
// the first required term, since optional terms must appear in the
// expression to be ranked but must not be required). phrase spells one
// term in the index's syntax; and and or are its operators, spaces
// included. Backends build their MATCH or tsquery text with it.
func (q ParsedQuery) Boolean(phrase func(SearchTerm) string, and, or string) string {
	var reqs, opts []string
	for _, t := range q.Required() {
		reqs = append(reqs, phrase(t))
	}
	for _, t := range q.Optional() {
		opts = append(opts, phrase(t))
	}
	switch {
	case len(reqs) == 0:
		return strings.Join(opts, or)
	case len(opts) == 0:
		return strings.Join(reqs, and)
	default:
		return strings.Join(reqs, and) + and + "(" + reqs[0] + or + strings.Join(opts, or) + ")"
	}
}

func ftsPhrase(toks []string) string {
	return `"` + strings.ReplaceAll(strings.Join(toks, " "), `"`, `""`) + `"`
}

// MatchesVerbatim reports whether text contains every Verbatim term of the
// query as typed (case-insensitively, on token boundaries). Backends run it
// on the candidates their index returns.
func (q ParsedQuery) MatchesVerbatim(text string) bool {
	var lower string
	for _, t := range q.Terms {
		if !t.Verbatim {
			continue
		}
		if lower == "" {
			lower = strings.ToLower(text)
		}
		if !containsAligned(lower, strings.ToLower(t.Text)) {
			return false
		}
	}
	return true
}

// containsAligned reports whether sub occurs in s with no token character
// directly before or after it.
func containsAligned(s, sub string) bool {
	if sub == "" {
		return false
	}
	for off := 0; off <= len(s)-len(sub); {
		i := strings.Index(s[off:], sub)
		if i < 0 {
			return false
		}
		i += off
		before, _ := utf8.DecodeLastRuneInString(s[:i])
		after, _ := utf8.DecodeRuneInString(s[i+len(sub):])
		if (i == 0 || !IsTokenRune(before)) && (i+len(sub) == len(s) || !IsTokenRune(after)) {
			return true
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		off = i + w
	}
	return false
}

// IsTokenRune reports whether r is part of a word token, exactly as SQLite
// FTS5's unicode61 tokenizer decides (letters, digits, marks, private use
// and what its Unicode 6.1 tables do not know; tokenRanges is generated by
// probing SQLite, see store/sqlite/internal/gentokens).
func IsTokenRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	i := sort.Search(len(tokenRanges), func(i int) bool { return tokenRanges[i][1] >= r })
	return i < len(tokenRanges) && tokenRanges[i][0] <= r
}

// Tokenize splits s into lowercased word tokens.
func Tokenize(s string) []string {
	var out []string
	eachToken(s, func(start, end int) bool {
		out = append(out, strings.ToLower(s[start:end]))
		return true
	})
	return out
}

// eachToken calls fn with the byte span of every token of s, in order,
// until fn returns false.
func eachToken(s string, fn func(start, end int) bool) {
	start := -1
	for i, r := range s {
		if IsTokenRune(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			if !fn(start, i) {
				return
			}
			start = -1
		}
	}
	if start >= 0 {
		fn(start, len(s))
	}
}

// PhraseCount counts the occurrences of phrase in a token sequence.
func PhraseCount(doc, phrase []string) int {
	if len(phrase) == 0 {
		return 0
	}
	n := 0
	for i := 0; i+len(phrase) <= len(doc); i++ {
		if doc[i] != phrase[0] {
			continue
		}
		ok := true
		for j := 1; j < len(phrase); j++ {
			if doc[i+j] != phrase[j] {
				ok = false
				break
			}
		}
		if ok {
			n++
		}
	}
	return n
}

// BM25 parameters, the same as SQLite FTS5's bm25().
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// BM25 returns one phrase's contribution to a document's score, computed as
// FTS5's bm25() does: n documents of N contain the phrase, tf times in this
// one, whose length is dl tokens against an average of avgdl.
func BM25(tf, dl int, n, N int, avgdl float64) float64 {
	if tf == 0 {
		return 0
	}
	idf := math.Log((float64(N) - float64(n) + 0.5) / (float64(n) + 0.5))
	if idf <= 0 {
		idf = 1e-6
	}
	if avgdl <= 0 {
		avgdl = 1
	}
	f := float64(tf)
	return idf * f * (bm25K1 + 1) / (f + bm25K1*(1-bm25B+bm25B*float64(dl)/avgdl))
}

// SnippetRunes is the default snippet length, in characters.
const SnippetRunes = 200

// Snippet cuts from text a window of about width characters around the
// first match of the query, marks every match inside it with « », and
// collapses whitespace so the snippet is one line.
func Snippet(text string, q ParsedQuery, width int) string {
	if width <= 0 {
		width = SnippetRunes
	}
	maxLen := 0
	for _, t := range q.Terms {
		maxLen = max(maxLen, len(t.Tokens))
	}
	type span struct{ s, e int }
	var marks []span
	ring := make([]span, maxLen) // the last maxLen token spans
	n := 0
	winStart, winEnd := -1, -1
	eachToken(text, func(start, end int) bool {
		if winEnd >= 0 && start >= winEnd {
			return false
		}
		if maxLen == 0 {
			return false
		}
		ring[n%maxLen] = span{start, end}
		n++
		for _, t := range q.Terms {
			L := len(t.Tokens)
			if L > n {
				continue
			}
			ok := true
			for j := 0; j < L; j++ {
				sp := ring[(n-L+j)%maxLen]
				if !strings.EqualFold(text[sp.s:sp.e], t.Tokens[j]) {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
			m := span{ring[(n-L)%maxLen].s, end}
			if t.Verbatim && !strings.EqualFold(text[m.s:m.e], t.Text) {
				continue
			}
			marks = append(marks, m)
			if winStart < 0 {
				winStart = backRunes(text, m.s, width/4)
				winEnd = fwdRunes(text, winStart, width)
			}
		}
		return true
	})
	if winStart < 0 {
		winStart, winEnd = 0, fwdRunes(text, 0, width)
	}
	var b strings.Builder
	if winStart > 0 {
		b.WriteString("…")
	}
	pos := winStart
	for _, m := range marks {
		if m.s < pos || m.s >= winEnd { // overlapping or outside the window
			continue
		}
		e := min(m.e, winEnd)
		b.WriteString(text[pos:m.s])
		b.WriteString("«")
		b.WriteString(text[m.s:e])
		b.WriteString("»")
		pos = e
	}
	b.WriteString(text[pos:winEnd])
	if winEnd < len(text) {
		b.WriteString("…")
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

func backRunes(s string, i, n int) int {
	for ; n > 0 && i > 0; n-- {
		_, w := utf8.DecodeLastRuneInString(s[:i])
		i -= w
	}
	return i
}

func fwdRunes(s string, i, n int) int {
	for ; n > 0 && i < len(s); n-- {
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return i
}

// ToolOf returns the tool name of a tool-result message: the name it
// carries, or else the name of the call it answers as lookup finds it
// (lookup may be nil). "" for other messages.
func ToolOf(m message.Message, lookup func(callID string) string) string {
	if n := m.ToolName(); n != "" {
		return n
	}
	if lookup == nil || !m.IsToolResult() {
		return ""
	}
	for _, p := range m.ToolResults() {
		if p.ToolCallID != "" {
			if n := lookup(p.ToolCallID); n != "" {
				return n
			}
		}
	}
	return ""
}

// NeedsToolLookup reports whether ToolOf would consult its lookup for m.
func NeedsToolLookup(m message.Message) bool {
	return m.ToolName() == "" && m.IsToolResult() && len(m.ToolResults()) > 0
}
