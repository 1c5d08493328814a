package token

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizers split text into the pieces BPE then encodes, exactly as
// tiktoken's split regexps do under their backtracking (leftmost-first,
// greedy) semantics. They are written by hand because a regexp engine is the
// slowest part of counting, and because one of them (tiktoken-go's
// regexp2 code) disagreed with tiktoken on whitespace runs: the
// `\s*[\r\n]+` alternative must end after the last line break of a
// whitespace run, the `\s+(?!\S)` one one character before a run that a
// non-space follows. Each function returns the end of the piece that starts
// at i (i < len(s), s valid UTF-8).
//
// o200k_base:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// cl100k_base:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//	| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+

// cls is a set of the character classes the split patterns use.
type cls uint8

const (
	clUpper cls = 1 << iota // Lu, Lt
	clLower                 // Ll
	clOther                 // Lm, Lo: letters of both o200k case sets
	clMark                  // M
	clNum                   // N
	clSpace                 // White_Space (\s)
	clNL                    // \r, \n

	clLetter = clUpper | clLower | clOther
	// o200k's two case sets.
	clUp = clUpper | clOther | clMark
	clLo = clLower | clOther | clMark
)

var asciiCls = func() (t [utf8.RuneSelf]cls) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = slowCls(r)
	}
	return t
}()

func slowCls(r rune) cls {
	var c cls
	switch {
	case unicode.In(r, unicode.Lu, unicode.Lt):
		c = clUpper
	case unicode.Is(unicode.Ll, r):
		c = clLower
	case unicode.In(r, unicode.Lm, unicode.Lo):
		c = clOther
	case unicode.Is(unicode.M, r):
		c = clMark
	case unicode.Is(unicode.N, r):
		c = clNum
	}
	// unicode.IsSpace is exactly the White_Space property Rust's \s uses.
	if unicode.IsSpace(r) {
		c |= clSpace
	}
	if r == '\r' || r == '\n' {
		c |= clNL
	}
	return c
}

// at returns the class and byte size of the rune at i (0, 0 at the end).
func at(s string, i int) (cls, int) {
	if i >= len(s) {
		return 0, 0
	}
	if b := s[i]; b < utf8.RuneSelf {
		return asciiCls[b], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return slowCls(r), n
}

// isP: [^\r\n\p{L}\p{N}]; isQ: [^\s\p{L}\p{N}].
func isP(c cls, n int) bool { return n > 0 && c&(clNL|clLetter|clNum) == 0 }
func isQ(c cls, n int) bool { return n > 0 && c&(clSpace|clLetter|clNum) == 0 }

// run returns the end of the longest run from i of runes whose class
// meets want.
func run(s string, i int, want cls) int {
	for {
		c, n := at(s, i)
		if n == 0 || c&want == 0 {
			return i
		}
		i += n
	}
}

// contraction returns the end of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or i.
func contraction(s string, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return i
	}
	switch s[i+1] | 0x20 {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && s[i+2]|0x20 == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && s[i+2]|0x20 == 'l' {
			return i + 3
		}
	}
	// Unicode case folding makes (?i)s match U+017F LATIN SMALL LETTER LONG S.
	if len(s) >= i+3 && s[i+1:i+3] == "\u017f" {
		return i + 3
	}
	return i
}

// spaceRun handles the three whitespace alternatives shared by both patterns:
// \s*[\r\n]+ | \s+(?!\S) | \s+, at i where a space starts.
func spaceRun(s string, i int) int {
	end, lastNL, last := i, -1, i
	for {
		c, n := at(s, end)
		if n == 0 || c&clSpace == 0 {
			break
		}
		if c&clNL != 0 {
			lastNL = end
		}
		last = end
		end += n
	}
	if lastNL >= 0 {
		return lastNL + 1 // \s*[\r\n]+: backtracks to the last line break
	}
	if end == len(s) || last == i {
		return end // \s+(?!\S) at the end of text, or \s+ of one rune
	}
	return last // \s+(?!\S): leaves the last space to the next piece
}

// o200kWord matches U*L+C? (lower) or U+L*C? (!lower) at i, -1 if it does not.
func o200kWord(s string, i int, lower bool) int {
	end, lastLo := i, -1
	for {
		c, n := at(s, end)
		if n == 0 || c&clUp == 0 {
			break
		}
		end += n
		if c&clLo != 0 {
			lastLo = end
		}
	}
	if !lower && end == i {
		return -1 // U+ needs one
	}
	if c, n := at(s, end); n > 0 && c&clLo != 0 {
		end = run(s, end, clLo)
	} else if lower {
		if lastLo < 0 {
			return -1
		}
		end = lastLo // U* gives back runes until L+ takes the last lowercase one
	}
	return contraction(s, end)
}

func o200kNext(s string, i int) int {
	c, n := at(s, i)
	p := isP(c, n)
	for _, lower := range [2]bool{true, false} {
		if p {
			if e := o200kWord(s, i+n, lower); e >= 0 {
				return e
			}
		}
		if c&(clUp|clLo) != 0 {
			if e := o200kWord(s, i, lower); e >= 0 {
				return e
			}
		}
	}
	return common(s, i, c, n, true)
}

func cl100kNext(s string, i int) int {
	if e := contraction(s, i); e > i {
		return e
	}
	c, n := at(s, i)
	if isP(c, n) {
		if c2, n2 := at(s, i+n); n2 > 0 && c2&clLetter != 0 {
			return run(s, i+n, clLetter)
		}
	}
	if c&clLetter != 0 {
		return run(s, i, clLetter)
	}
	return common(s, i, c, n, false)
}

// common: \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n]* (o200k: [\r\n/]*) |
// whitespace, for the rune of class c and size n at i.
func common(s string, i int, c cls, n int, slash bool) int {
	switch {
	case c&clNum != 0:
		end := i + n
		for k := 0; k < 2; k++ {
			c, n := at(s, end)
			if n == 0 || c&clNum == 0 {
				break
			}
			end += n
		}
		return end
	case s[i] == ' ' && isQ(at(s, i+1)):
		i++
		fallthrough
	case isQ(c, n):
		end := i
		for {
			c, n := at(s, end)
			if !isQ(c, n) {
				break
			}
			end += n
		}
		for end < len(s) && (s[end] == '\r' || s[end] == '\n' || slash && s[end] == '/') {
			end++
		}
		return end
	case c&clSpace != 0:
		return spaceRun(s, i)
	}
	return i + n // unreachable: every rune is a letter, mark, number, space or other
}
