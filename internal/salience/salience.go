// Package salience scores text by the information it carries, so that the
// extractive observer, the reflector and the catalogue keep what matters
// (names, numbers, rare terms, decisions, findings) rather than what is
// newest. The score is deterministic: the same texts give the same scores.
//
// A text's score is the sum, over its distinct terms, of their inverse
// document frequency in a corpus (the texts being chosen from): a term every
// line shares (a tool's name, "src", "line") is worth little, a term only one
// line has is worth much. Pure numbers count, but less than words (a counter
// or a line number is rarely the point); a capitalised word inside a
// sentence (a name) and a cue of a finding or a decision ("root cause",
// "decided", "because") add a bonus.
package salience

import (
	"math"
	"strings"
	"unicode"
)

// Corpus holds the document frequencies of terms over a set of texts.
type Corpus struct {
	df map[string]int
	n  int
}

// NewCorpus counts each text as one document.
func NewCorpus(texts []string) *Corpus {
	c := &Corpus{df: map[string]int{}}
	for _, t := range texts {
		c.Add(t)
	}
	return c
}

// Add counts one more document.
func (c *Corpus) Add(text string) {
	c.n++
	seen := map[string]bool{}
	for _, t := range Terms(text) {
		if !seen[t] {
			seen[t] = true
			c.df[t]++
		}
	}
}

// idf is the inverse document frequency of a term; a term the corpus has
// not seen counts as seen once.
func (c *Corpus) idf(t string) float64 {
	df := c.df[t]
	if df == 0 {
		df = 1
	}
	return math.Log(1 + float64(c.n+1)/float64(df))
}

// Score is the information text carries against the corpus.
func (c *Corpus) Score(text string) float64 {
	s := 0.0
	seen := map[string]bool{}
	for _, t := range Terms(text) {
		if seen[t] {
			continue
		}
		seen[t] = true
		w := c.idf(t)
		if isNumber(t) {
			w = min(w, 1.5)
		}
		s += w
	}
	return s + Bonus(text)
}

// Bonus is what a text's form adds whatever the corpus: names inside a
// sentence and cues of findings, decisions and commitments.
func Bonus(text string) float64 {
	b := 0.0
	names := 0
	words := strings.Fields(text)
	for i, w := range words {
		if i == 0 || strings.HasSuffix(words[i-1], ".") || strings.HasSuffix(words[i-1], ":") {
			continue
		}
		r := []rune(strings.Trim(w, `"'(),.;:!?`))
		if len(r) > 1 && unicode.IsUpper(r[0]) && unicode.IsLower(r[len(r)-1]) {
			names++
		}
	}
	b += 0.5 * float64(min(names, 6))
	lt := strings.ToLower(text)
	for _, cue := range cues {
		if strings.Contains(lt, cue) {
			b += 2
		}
	}
	return b
}

// cues mark findings, decisions, commitments and preferences.
var cues = []string{
	"root cause", "because", "caused by", "the cause", "the fix", "fixed", "found",
	"decided", "decision", "we will", "we'll", "i will", "i'll", "must", "never",
	"always", "prefer", "instead", "remember", "deadline", "error", "failed", "fails",
}

// Terms splits text into lowercase terms: runs of letters or of digits
// (identifiers split at their punctuation, so file_12.go gives file, 12,
// go), stopwords and one-letter terms dropped.
func Terms(text string) []string {
	var out []string
	var b strings.Builder
	kind := 0 // 1 letters, 2 digits
	flush := func() {
		if b.Len() > 1 || (kind == 2 && b.Len() > 0) {
			t := b.String()
			if !stop[t] {
				out = append(out, t)
			}
		}
		b.Reset()
		kind = 0
	}
	for _, r := range text {
		k := 0
		switch {
		case unicode.IsLetter(r):
			k = 1
		case unicode.IsDigit(r):
			k = 2
		}
		if k != kind {
			flush()
		}
		if k != 0 {
			kind = k
			b.WriteRune(unicode.ToLower(r))
		}
	}
	flush()
	return out
}

func isNumber(t string) bool {
	for _, r := range t {
		if !unicode.IsDigit(r) {
			return false
		}
	}
	return t != ""
}

var stop = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an the and or but if then else of to in on at by for with from into onto
	about as is are was were be been being am do does did done have has had having it its it's this that these
	those there here i me my mine we us our you your yours he him his she her they them their what which who whom
	whose when where why how all any both each few more most other some such no nor not only own same so than too
	very can could will would shall should may might just also now up down out over under again further once s t
	don let ok okay yes yeah oh wow really like get got go going just well im ive id youre thats its lets
	sure happy help glad thanks thank great nice awesome cool hey hi hello welcome sounds good amazing`) {
		stop[w] = true
	}
}
