// Package fulltext is the archive's and the memories' search semantics,
// shared by every backend so that what matches and how it ranks is the same
// on each: query parsing (identifiers, phrases, stopwords), the terms text
// is indexed by (tokens as SQLite FTS5's unicode61 sees them, possessives,
// stems), BM25 ranking over a scope's candidates, and snippets.
package fulltext

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/kljensen/snowball/english"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// Query parsing shared by every backend, so that "what matches" is the same
// on memory, SQLite and PostgreSQL: backends only differ in how they find
// candidates.
//
// Text, indexed or searched, is reduced to terms (IndexTerms): word tokens
// exactly as SQLite's FTS5 unicode61 tokenizer sees them (runs of letters,
// digits and private-use characters, lowercased), the "s" of a possessive
// dropped (Caroline's → caroline) and English words stemmed (painting,
// paints → paint). Nothing a user types ever reaches a query language: FTS
// operators, stars, carets and parentheses are separators.
//
// A query is split on whitespace into words; a "double-quoted phrase" is one
// unit. Matching rules:
//   - identifiers (ids, paths, codes, key=value pairs: INV-4401,
//     src/shop/checkout.go, 0x1f, E1234, trace_id=checkout-failure-2026-03-15)
//     are Verbatim and Required: the hit must contain the word itself,
//     case-insensitively, aligned on token boundaries. "INV 4402", "4401 INV"
//     or "INV 4401" do not match INV-4401. Ordinals and units (8th, 1990s,
//     5km), hyphenated words (self-portrait), abbreviations (U.S, e.g) and
//     slashed words (artists/bands) are not identifiers: they are words;
//   - a query made only of quoted phrases (and identifiers) requires them, as
//     token sequences; a phrase inside a longer query is a title ("Becoming
//     Nicole"): its words count as words, and the phrase ranks above them;
//   - other words are optional: a hit needs at least one of them when the
//     query has no required term, otherwise they only rank. English
//     stopwords (the, what, did, ...) are dropped unless the query has
//     nothing else.

// Query limits: larger queries are store.ErrInvalid rather than slow.
const (
	MaxQueryBytes = 16 << 10
	MaxQueryTerms = 64
)

// SearchTerm is one term of a parsed query.
type SearchTerm struct {
	// Text is the term as typed, stripped of surrounding punctuation; for a
	// Verbatim term it is the exact string a hit must contain.
	Text string
	// Tokens are the term's index terms (IndexTerms), in order: a phrase.
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
// size (store.ErrInvalid): any string yields a query, possibly an empty one.
func ParseQuery(s string) (ParsedQuery, error) {
	if len(s) > MaxQueryBytes {
		return ParsedQuery{}, fmt.Errorf("%w: query longer than %d bytes", store.ErrInvalid, MaxQueryBytes)
	}
	s = strings.ToValidUTF8(s, " ")
	var words, phrases []string
	for len(s) > 0 {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			words = append(words, strings.Fields(s)...)
			break
		}
		words = append(words, strings.Fields(s[:i])...)
		rest := s[i+1:]
		j := strings.IndexByte(rest, '"')
		if j < 0 { // unbalanced quote: the quote is just a separator
			s = rest
			continue
		}
		phrases = append(phrases, rest[:j])
		s = rest[j+1:]
	}

	var q ParsedQuery
	seen := map[string]bool{}
	add := func(t SearchTerm) {
		if len(t.Tokens) == 0 {
			return
		}
		k := fmt.Sprint(t.Required, t.Verbatim, t.Tokens)
		if t.Verbatim {
			k += "\x00" + strings.ToLower(t.Text)
		}
		if seen[k] {
			return
		}
		seen[k] = true
		q.Terms = append(q.Terms, t)
	}
	var plain []SearchTerm // optional one-term words, stopwords included
	addWord := func(w string) {
		w = trimWord(w)
		if isIdentifier(w) {
			add(SearchTerm{Text: w, Tokens: IndexTerms(w), Required: true, Verbatim: true})
			return
		}
		var whole []string
		eachTerm(w, func(start, end int, term string) bool {
			plain = append(plain, SearchTerm{Text: w[start:end], Tokens: []string{term}})
			whole = append(whole, term)
			return true
		})
		if len(whole) > 1 && strings.ContainsAny(w, "-/") { // self-portrait: the phrase ranks above its words
			add(SearchTerm{Text: w, Tokens: whole})
		}
	}
	natural := false // a word outside quotes: the query is a sentence
	for _, w := range words {
		natural = natural || len(Tokenize(w)) > 0
		addWord(w)
	}
	for _, p := range phrases {
		p = trimWord(p)
		switch {
		case !strings.ContainsFunc(p, unicode.IsSpace) && isIdentifier(p):
			add(SearchTerm{Text: p, Tokens: IndexTerms(p), Required: true, Verbatim: true})
		case !natural:
			add(SearchTerm{Text: p, Tokens: IndexTerms(p), Required: true})
		default: // a title inside a sentence
			if toks := IndexTerms(p); len(toks) > 1 {
				add(SearchTerm{Text: p, Tokens: toks})
			}
			for _, w := range strings.Fields(p) {
				addWord(w)
			}
		}
	}
	// Stopwords go, unless nothing else would be left to search.
	keepStop := true
	for _, t := range plain {
		if !IsStopword(strings.ToLower(t.Text)) {
			keepStop = false
			break
		}
	}
	keepStop = keepStop && len(q.Terms) == 0
	for _, t := range plain {
		if keepStop || !IsStopword(strings.ToLower(t.Text)) {
			add(t)
		}
	}
	if len(q.Terms) > MaxQueryTerms {
		return ParsedQuery{}, fmt.Errorf("%w: query has more than %d terms", store.ErrInvalid, MaxQueryTerms)
	}
	return q, nil
}

func trimWord(w string) string {
	return strings.TrimFunc(w, func(r rune) bool { return !IsTokenRune(r) })
}

// isIdentifier reports whether a whitespace-free word, trimmed of
// surrounding punctuation, is an id, a path, a key=value pair or a code
// rather than a natural-language word (see ParseQuery).
func isIdentifier(w string) bool {
	toks := Tokenize(w)
	if len(toks) == 0 {
		return false
	}
	if strings.ContainsAny(w, "_=:") { // snake_case, key=value, scheme://, ns:key
		return true
	}
	hasDigit := false
	for _, t := range toks {
		if isCode(t) {
			return true // E1234, 0x1f, v2, sha256
		}
		hasDigit = hasDigit || strings.ContainsFunc(t, unicode.IsDigit)
	}
	if strings.ContainsRune(w, '/') {
		// A path, not "artists/bands" or "and/or": rooted, relative, with
		// an extension or a number, or three segments deep.
		return strings.HasPrefix(w, "/") || strings.HasPrefix(w, "~") || strings.HasPrefix(w, ".") ||
			strings.ContainsRune(w, '.') || hasDigit || strings.Count(w, "/") >= 2
	}
	if strings.ContainsRune(w, '.') {
		// A file name, a host, a version, a decimal, not an abbreviation
		// (U.S, e.g, a.m): some token longer than two letters, or a digit.
		if hasDigit {
			return true
		}
		for _, t := range toks {
			if utf8.RuneCountInString(t) > 2 {
				return true
			}
		}
		return false
	}
	// INV-4401, 2023-05-08, gpt-4, not self-portrait or 8th-grade.
	return strings.ContainsRune(w, '-') && hasDigit && !isOrdinal(toks)
}

// isCode reports whether one token mixes letters and digits as a code does
// (E1234, 0x1f, v2), not as an ordinal or a quantity does (8th, 1990s, 5km).
func isCode(tok string) bool {
	var letter, digit bool
	for _, r := range tok {
		letter = letter || unicode.IsLetter(r)
		digit = digit || unicode.IsDigit(r)
	}
	if !letter || !digit {
		return false
	}
	i := strings.IndexFunc(tok, func(r rune) bool { return !unicode.IsDigit(r) })
	if i > 0 && unitSuffix[tok[i:]] {
		return false
	}
	return true
}

// isOrdinal reports whether hyphenated tokens read as a quantity with
// words (8th-grade, 3-day, 10-year-old): a leading number or ordinal and
// words only after it.
func isOrdinal(toks []string) bool {
	if len(toks) < 2 {
		return false
	}
	if isCode(toks[0]) {
		return false
	}
	if strings.IndexFunc(toks[0], func(r rune) bool { return !unicode.IsDigit(r) }) == 0 {
		return false // does not start with a number
	}
	for _, t := range toks[1:] {
		if strings.ContainsFunc(t, unicode.IsDigit) {
			return false
		}
	}
	return true
}

// unitSuffix: what follows a number in an ordinal, a decade, a time or a
// quantity rather than in a code.
var unitSuffix = map[string]bool{
	"st": true, "nd": true, "rd": true, "th": true, "s": true, "am": true, "pm": true,
	"k": true, "m": true, "km": true, "kg": true, "g": true, "lb": true, "lbs": true, "mi": true,
	"h": true, "hr": true, "hrs": true, "min": true, "mins": true, "ms": true, "x": true,
	"mb": true, "gb": true, "kb": true, "tb": true, "yo": true, "ft": true, "cm": true, "mm": true,
	"ish": true, "d": true, "y": true, "yr": true, "yrs": true, "w": true, "wk": true, "wks": true,
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

// Union returns the query as a full-text index's expression matching every
// document that contains any of its terms: the candidates that Rank scores
// (it needs them all to count each term's documents). phrase spells one term
// in the index's syntax, or its operator, spaces included.
func (q ParsedQuery) Union(phrase func(SearchTerm) string, or string) string {
	parts := make([]string, len(q.Terms))
	for i, t := range q.Terms {
		parts[i] = phrase(t)
	}
	return strings.Join(parts, or)
}

// FTS5Phrase spells a term as an SQLite FTS5 phrase.
func FTS5Phrase(t SearchTerm) string { return ftsPhrase(t.Tokens) }

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

// SearchText returns what the archive indexes for a message appended at
// at: its text (PlainText), then its name and its date (2023-05-08 Monday 8
// May), so that who said it and when are searchable too. Backends index
// its IndexTerms and check Verbatim terms and cut snippets on it.
func SearchText(m message.Message, at time.Time) string {
	var b strings.Builder
	b.WriteString(m.PlainText())
	if m.Name != "" {
		b.WriteByte('\n')
		b.WriteString(m.Name)
	}
	if !at.IsZero() {
		b.WriteByte('\n')
		b.WriteString(at.UTC().Format("2006-01-02 Monday 2 January"))
	}
	return b.String()
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

// IndexTerms returns the terms the archive indexes for s, in order (see
// ParseQuery): its lowercased word tokens, the "s" of possessives dropped,
// English words stemmed. A backend indexes exactly these, so that matching
// is the same everywhere.
func IndexTerms(s string) []string {
	var out []string
	eachTerm(s, func(_, _ int, term string) bool {
		out = append(out, term)
		return true
	})
	return out
}

// IndexBody returns the IndexTerms of s joined by spaces: text that a
// full-text index tokenizing as FTS5's unicode61 does (every backend's
// tokens are its tokens) splits into exactly those terms.
//
// It is what every appended message costs in the writer's path, so it
// builds the text in one pass without the terms slice: ASCII tokens are
// lowercased in a buffer and their stems looked up without a string of
// their own; anything else takes eachTerm's way.
func IndexBody(s string) string {
	var low [maxStemLen]byte
	out := appendIndexBody(make([]byte, 0, len(s)), s, &low)
	return unsafe.String(unsafe.SliceData(out), len(out))
}

// IndexMessage is IndexBody(SearchText(m, at)), without SearchText's
// string: each piece SearchText joins (a part's text, a call's name and
// arguments, the name, the date) is indexed into one buffer. The pieces
// are joined by characters no token holds, so no token spans two of them,
// and one beginning a piece follows no apostrophe either way.
func IndexMessage(m message.Message, at time.Time) string {
	var low [maxStemLen]byte
	out := make([]byte, 0, plainLen(m.Parts)+len(m.Name)+32)
	out = appendIndexParts(out, m.Parts, &low)
	out = appendIndexBody(out, m.Name, &low)
	if !at.IsZero() {
		out = appendIndexBody(out, at.UTC().Format("2006-01-02 Monday 2 January"), &low)
	}
	return unsafe.String(unsafe.SliceData(out), len(out))
}

// appendIndexParts indexes the pieces of parts that PlainText writes.
func appendIndexParts(out []byte, parts []message.Part, low *[maxStemLen]byte) []byte {
	for _, p := range parts {
		switch p.Type {
		case message.Text, message.Reasoning:
			out = appendIndexBody(out, p.Text, low)
		case message.ToolCall:
			out = appendIndexBody(out, p.ToolName, low)
			out = appendIndexBody(out, p.Arguments, low)
		case message.ToolResult:
			out = appendIndexParts(out, p.Content, low)
		case message.Image:
			out = appendIndexBody(out, "[image]", low)
		case message.Opaque:
			out = appendIndexBody(out, string(p.Raw), low)
		}
	}
	return out
}

// plainLen is about the length of parts' PlainText: the index's text is
// no longer.
func plainLen(parts []message.Part) int {
	n := 0
	for _, p := range parts {
		switch p.Type {
		case message.Text, message.Reasoning:
			n += len(p.Text) + 1
		case message.ToolCall:
			n += len(p.ToolName) + len(p.Arguments) + 1
		case message.ToolResult:
			n += plainLen(p.Content)
		case message.Image:
			n += len("[image]") + 1
		case message.Opaque:
			n += len(p.Raw) + 1
		}
	}
	return n
}

// appendIndexBody appends IndexBody(s) to out, after a space unless out is
// empty or s holds no term.
func appendIndexBody(out []byte, s string, low *[maxStemLen]byte) []byte {
	start := -1
	for i := 0; i <= len(s); {
		var (
			tokenRune bool
			w         = 1
		)
		if i < len(s) {
			if c := s[i]; c < utf8.RuneSelf {
				tokenRune = asciiToken[c]
			} else {
				var r rune
				r, w = utf8.DecodeRuneInString(s[i:])
				tokenRune = IsTokenRune(r)
			}
		}
		if tokenRune {
			if start < 0 {
				start = i
			}
			i += w
			continue
		}
		if start >= 0 {
			out = appendTerm(out, s, start, i, low)
			start = -1
		}
		i += w
	}
	return out
}

// appendTerm appends the index term of the token s[start:end] to out,
// after a space unless out is empty; a possessive's "s" appends nothing.
func appendTerm(out []byte, s string, start, end int, low *[maxStemLen]byte) []byte {
	tok := s[start:end]
	if len(tok) == 1 && (tok[0] == 's' || tok[0] == 'S') && possessive(s, start) {
		return out
	}
	if len(out) > 0 {
		out = append(out, ' ')
	}
	if len(tok) > len(low) {
		return append(out, Stem(strings.ToLower(tok))...)
	}
	letters := len(tok) >= 3
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c >= utf8.RuneSelf {
			return append(out, Stem(strings.ToLower(tok))...)
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		low[i] = c
		letters = letters && 'a' <= c && c <= 'z'
	}
	if !letters {
		return append(out, low[:len(tok)]...)
	}
	return append(out, stemWord(low[:len(tok)])...)
}

// asciiToken[c] is IsTokenRune(rune(c)) for the ASCII bytes.
var asciiToken = func() (t [utf8.RuneSelf]bool) {
	for c := range t {
		t[c] = IsTokenRune(rune(c))
	}
	return t
}()

// eachTerm calls fn with the byte span and the index term of every token
// of s that IndexTerms keeps, in order, until fn returns false.
func eachTerm(s string, fn func(start, end int, term string) bool) {
	eachToken(s, func(start, end int) bool {
		if end-start == 1 && (s[start] == 's' || s[start] == 'S') && possessive(s, start) {
			return true
		}
		return fn(start, end, Stem(strings.ToLower(s[start:end])))
	})
}

// possessive reports whether the token at i follows a word and an
// apostrophe (Caroline's, Caroline’s).
func possessive(s string, i int) bool {
	r, w := utf8.DecodeLastRuneInString(s[:i])
	if r != '\'' && r != '’' {
		return false
	}
	prev, _ := utf8.DecodeLastRuneInString(s[:i-w])
	return i-w > 0 && IsTokenRune(prev)
}

// Stem returns the index form of one lowercased token: English words of
// three letters or more are reduced to their Snowball (Porter2) stem;
// numbers, codes and other scripts stay as they are.
func Stem(tok string) string {
	if len(tok) < 3 || len(tok) > maxStemLen {
		return tok
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c < 'a' || c > 'z' {
			return tok
		}
	}
	return stemWord([]byte(tok))
}

// maxStemLen is the longest word Stem stems.
const maxStemLen = 64

// stemWord returns the stem of word, 3 to maxStemLen letters a-z, from
// the cache when it holds it: a vocabulary is small and every indexed and
// searched word is stemmed.
//
// The cache is stemSlots entries, each word's in one of two slots chosen
// by its hash (the other slot taken when the first holds another word), an
// entry replaced whole by an atomic store: a lookup takes no lock and
// writes nothing shared. The sharded maps under read locks it replaces
// spent most of a parallel IndexBody's time on the locks' reader counts,
// which every core's lookups wrote to (BenchmarkIndexBodyParallel). A
// vocabulary past the slots keeps its most recent words rather than its
// first.
func stemWord(word []byte) string {
	h := uint64(14695981039346656037) // FNV-1a
	for _, c := range word {
		h = (h ^ uint64(c)) * 1099511628211
	}
	a := &stemCache[h%stemSlots]
	if e := a.Load(); e != nil && e.word == string(word) {
		return e.stem
	}
	b := &stemCache[(h>>32)%stemSlots]
	if e := b.Load(); e != nil && e.word == string(word) {
		return e.stem
	}
	w := string(word)
	e := &stemEntry{word: w, stem: english.Stem(w, true)}
	switch {
	case a.Load() == nil:
		a.Store(e)
	case b.Load() == nil:
		b.Store(e)
	case h&(1<<40) == 0: // both taken: a slot the word's hash picks
		a.Store(e)
	default:
		b.Store(e)
	}
	return e.stem
}

// stemEntry is a word and its stem, never changed once stored.
type stemEntry struct{ word, stem string }

// stemSlots is the cache's entries: 8 bytes each, and the entries held.
const stemSlots = 1 << 17

var stemCache [stemSlots]atomic.Pointer[stemEntry]

// IsStopword reports whether a lowercased token is an English function word
// that says nothing about what a message is about (the, what, did, ...).
func IsStopword(tok string) bool { return stopwords[tok] }

var stopwords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a about above after again against all am an and any are as at be
		because been before being below between both but by can could did do does doing don down during
		each few for from further had has have having he her here hers herself him himself his how i if in
		into is it its itself just me more most my myself no nor not now of off on once only or other our
		ours ourselves out over own s same she should so some such t than that the their theirs them
		themselves then there these they this those through to too under until up very was we were what
		when where which while who whom whose why will with would you your yours yourself yourselves
		ve ll re d m also ever get got been anything something thing things kind type`) {
		m[w] = true
	}
	return m
}()

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
// BM25 parameters: FTS5's k1, and less length normalisation than its 0.75
// (b): conversation turns are short and alike in length, and on LoCoMo 0.5
// ranks evidence turns better (hit@10 +0.01).
const (
	bm25K1 = 1.2
	bm25B  = 0.5
)

// BM25 returns one phrase's contribution to a document's score, computed as
// FTS5's bm25() does: n documents of N contain the phrase, tf times in this
// one, whose length is dl tokens against an average of avgdl.
func BM25(tf, dl int, n, N int, avgdl float64) float64 {
	return bm25(tf, dl, idf(n, N), avgdl)
}

// idf is BM25's inverse document frequency of a phrase that n documents
// of N contain.
func idf(n, N int) float64 {
	v := math.Log((float64(N) - float64(n) + 0.5) / (float64(n) + 0.5))
	if v <= 0 {
		v = 1e-6
	}
	return v
}

func bm25(tf, dl int, idf float64, avgdl float64) float64 {
	if tf == 0 {
		return 0
	}
	if avgdl <= 0 {
		avgdl = 1
	}
	f := float64(tf)
	return idf * f * (bm25K1 + 1) / (f + bm25K1*(1-bm25B+bm25B*float64(dl)/avgdl))
}

// Scored is one candidate document ranked by Rank.
type Scored struct {
	// Index is the candidate's position in the slice given to Rank.
	Index int
	// Score is its BM25 score, higher is better.
	Score float64
}

// Rank scores candidate documents for q by BM25 and returns those that
// match (every required term; without required terms, at least one
// optional term), best first, ties in candidate order. docs are the
// candidates' index terms (IndexTerms), n the number of documents in the
// searched scope (a thread or a tenant: statistics never span tenants).
// The candidates must be every document of the scope containing any term
// (what Union finds): document frequencies and the average length are
// counted over them. The caller checks Verbatim terms on the survivors.
// It is a Tally of docs.
func (q ParsedQuery) Rank(docs [][]string, n int) []Scored {
	t := q.Tally()
	for _, d := range docs {
		t.AddTerms(d)
	}
	return t.Rank(n)
}

// A Tally counts, in each candidate document of a search, what BM25 asks
// of it: its length and how often each query term occurs in it. It reads
// a document once, token by token, and keeps nothing of it but those
// counts, so that a backend can feed it a stored body (IndexBody) as the
// driver holds it, without splitting it into strings. A search reads
// every token of its candidates, most of which are no query token: a
// filter on a token's first byte and length rules most of those out, and
// the rest are looked up by hash in a small open-addressed table of the
// query's tokens, with no map and no string.
type Tally struct {
	q       ParsedQuery
	slots   []slot      // the query's tokens by hash; len is a power of two
	maybe   [256]uint64 // by first byte, the lengths of query tokens under 64 bytes (longer ones are always looked up)
	phrases [][]int32   // each term's tokens, as ids (slot ids)
	last    []int32     // the ids of the document's last tokens, a ring (-1: no query token)
	lens    []int       // each document's length in tokens
	tf      []int32     // each document's count of each term: len(q.Terms) per document
}

type slot struct {
	tok  string // "" for an empty slot (tokens are never empty)
	hash uint32
	id   int32
}

// Tally returns an empty Tally for q.
func (q ParsedQuery) Tally() *Tally {
	n := 8
	for _, term := range q.Terms {
		n += 2 * len(term.Tokens)
	}
	size := 16
	for size < n {
		size *= 2
	}
	t := &Tally{q: q, slots: make([]slot, size), phrases: make([][]int32, len(q.Terms))}
	ids := int32(0)
	longest := 1
	for j, term := range q.Terms {
		ph := make([]int32, len(term.Tokens))
		for i, tok := range term.Tokens {
			h := hashToken(tok)
			k := t.find(tok, h)
			if t.slots[k].tok == "" {
				t.slots[k] = slot{tok, h, ids}
				ids++
				t.maybe[tok[0]] |= 1 << min(len(tok), 64) // 1<<64 is 0: long tokens skip the filter
			}
			ph[i] = t.slots[k].id
		}
		t.phrases[j] = ph
		longest = max(longest, len(ph))
	}
	t.last = make([]int32, longest)
	return t
}

// hashToken is FNV-1a, as AddBody computes it while scanning a token.
func hashToken[S string | []byte](tok S) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(tok); i++ {
		h = (h ^ uint32(tok[i])) * 16777619
	}
	return h
}

// find returns the slot of tok, or the empty slot where it would go.
func (t *Tally) find(tok string, h uint32) int {
	mask := len(t.slots) - 1
	for k := int(h) & mask; ; k = (k + 1) & mask {
		if s := &t.slots[k]; s.tok == "" || s.hash == h && s.tok == tok {
			return k
		}
	}
}

// id returns the id of a token of hash h, -1 if it is no query token.
func (t *Tally) id(tok []byte, h uint32) int32 {
	mask := len(t.slots) - 1
	for k := int(h) & mask; ; k = (k + 1) & mask {
		s := &t.slots[k]
		if s.tok == "" {
			return -1
		}
		if s.hash == h && s.tok == string(tok) { // no string is made for a comparison
			return s.id
		}
	}
}

// Len returns the number of documents added.
func (t *Tally) Len() int { return len(t.lens) }

// AddTerms adds a document given as its index terms (IndexTerms), and
// reports whether it holds any term of the query.
func (t *Tally) AddTerms(terms []string) bool {
	t.begin()
	n := 0
	for _, tok := range terms {
		n++
		id := int32(-1)
		// Most tokens are no query token: the length filter (TokenID's)
		// tells without hashing them.
		if l := len(tok); l > 0 && (l >= 64 || t.maybe[tok[0]]&(1<<l) != 0) {
			id = t.id([]byte(tok), hashToken(tok))
		}
		if id >= 0 || len(t.last) > 1 {
			t.token(n, id)
		}
	}
	t.lens[len(t.lens)-1] = n
	return t.holdsAny()
}

// AddBody adds a document given as its IndexBody, index terms separated
// by spaces, and reports whether it holds any term of the query.
func (t *Tally) AddBody(body []byte) bool {
	t.begin()
	n := 0
	for i := 0; i < len(body); {
		if body[i] == ' ' {
			i++
			continue
		}
		j := i + 1
		for j < len(body) && body[j] != ' ' {
			j++
		}
		n++
		id := int32(-1)
		if l := j - i; l >= 64 || t.maybe[body[i]]&(1<<l) != 0 {
			id = t.id(body[i:j], hashToken(body[i:j]))
		}
		// A token that is no query token matters only to phrases.
		if id >= 0 || len(t.last) > 1 {
			t.token(n, id)
		}
		i = j
	}
	t.lens[len(t.lens)-1] = n
	return t.holdsAny()
}

// TokenID returns the id of tok among the query's tokens, -1 if it is
// none of them: what AddIDs takes. A backend whose index stores each
// token once with its positions looks it up once, not at each position.
func (t *Tally) TokenID(tok []byte) int32 {
	if l := len(tok); l == 0 || l < 64 && t.maybe[tok[0]]&(1<<l) == 0 {
		return -1
	}
	return t.id(tok, hashToken(tok))
}

// AddIDs adds a document given as the TokenID of each of its tokens, in
// order, and reports whether it holds any term of the query.
func (t *Tally) AddIDs(ids []int32) bool {
	t.begin()
	for i, id := range ids {
		if id >= 0 || len(t.last) > 1 {
			t.token(i+1, id)
		}
	}
	t.lens[len(t.lens)-1] = len(ids)
	return t.holdsAny()
}

// holdsAny reports whether the last document added holds any term.
func (t *Tally) holdsAny() bool {
	for _, c := range t.tf[len(t.tf)-len(t.phrases):] {
		if c > 0 {
			return true
		}
	}
	return false
}

// RemoveLast removes the last document added: a reader of every document
// of a scope drops those that hold no term, which are not candidates.
func (t *Tally) RemoveLast() {
	if len(t.lens) > 0 {
		t.lens = t.lens[:len(t.lens)-1]
		t.tf = t.tf[:len(t.tf)-len(t.phrases)]
	}
}

func (t *Tally) begin() {
	t.lens = append(t.lens, 0)
	for range t.phrases {
		t.tf = append(t.tf, 0)
	}
}

// token counts the current document's pos-th token (from 1), of the given
// id: every term whose phrase ends with it, as PhraseCount does
// (overlapping occurrences count).
func (t *Tally) token(pos int, id int32) {
	L := len(t.last)
	t.last[pos%L] = id
	if id < 0 {
		return
	}
	tf := t.tf[len(t.tf)-len(t.phrases):]
	for j, ph := range t.phrases {
		if len(ph) > pos || ph[len(ph)-1] != id {
			continue
		}
		ok := true
		for k := 0; k < len(ph)-1; k++ {
			if t.last[(pos-len(ph)+1+k)%L] != ph[k] {
				ok = false
				break
			}
		}
		if ok {
			tf[j]++
		}
	}
}

// Rank scores the documents added, as ParsedQuery.Rank does: those that
// match, best first, ties in the order they were added; n is the number
// of documents in the searched scope.
func (t *Tally) Rank(n int) []Scored {
	out := t.score(n)
	slices.SortFunc(out, func(a, b Scored) int { // ties in order: a total order, so stable
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.Index, b.Index)
	})
	return out
}

// score returns the documents added that match, with their scores, in the
// order they were added.
func (t *Tally) score(n int) []Scored {
	docs, terms := len(t.lens), len(t.phrases)
	if docs == 0 || terms == 0 {
		return nil
	}
	n = max(n, docs)
	df := make([]int, terms)
	total := 0
	for i, l := range t.lens {
		total += l
		for j, c := range t.tf[i*terms : (i+1)*terms] {
			if c > 0 {
				df[j]++
			}
		}
	}
	avgdl := float64(total) / float64(docs)
	idfs := make([]float64, terms)
	for j := range idfs {
		idfs[j] = idf(df[j], n)
	}
	hasReq := false
	for _, term := range t.q.Terms {
		hasReq = hasReq || term.Required
	}
	var out []Scored
	for i, l := range t.lens {
		ok, any := true, false
		var score float64
		for j, c := range t.tf[i*terms : (i+1)*terms] {
			if c == 0 {
				ok = ok && !t.q.Terms[j].Required
				continue
			}
			any = true
			score += bm25(int(c), l, idfs[j], avgdl)
		}
		if ok && (hasReq || any) {
			out = append(out, Scored{i, score})
		}
	}
	return out
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
	terms := make([]string, maxLen) // their terms
	eachTerm(text, func(start, end int, term string) bool {
		if winEnd >= 0 && start >= winEnd {
			return false
		}
		if maxLen == 0 {
			return false
		}
		ring[n%maxLen] = span{start, end}
		terms[n%maxLen] = term
		n++
		for _, t := range q.Terms {
			L := len(t.Tokens)
			if L > n {
				continue
			}
			ok := true
			for j := 0; j < L; j++ {
				if terms[(n-L+j)%maxLen] != t.Tokens[j] {
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
	return collapseSpace(b.String())
}

// collapseSpace returns strings.Join(strings.Fields(s), " ") without the
// slice of fields: runs of white space become one space, none at the ends.
func collapseSpace(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false // a space is due before the next field
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if asciiSpace[c] {
				space = b.Len() > 0
			} else {
				if space {
					b.WriteByte(' ')
					space = false
				}
				b.WriteByte(c)
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) {
			space = b.Len() > 0
		} else {
			if space {
				b.WriteByte(' ')
				space = false
			}
			b.WriteString(s[i : i+w])
		}
		i += w
	}
	return b.String()
}

// asciiSpace: the ASCII bytes unicode.IsSpace reports.
var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

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
