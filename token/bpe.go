package token

import (
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer/codec"
)

// ranks is one encoding's merge ranks: token bytes → token id (= rank), in
// an open-addressing hash table whose only pointer is its one string. It
// was a map[string]uint32: 200,000 strings, each its own allocation, which
// every garbage collection marked again (a forced GC took 20 ms with
// o200k's loaded, 2 ms without; in the proxy, every collection slowed the
// requests it overlapped by about as much). The collector skips
// pointer-free memory.
type ranks struct {
	data  string // every token's bytes, one after another
	slots []uint64
	mask  uint64
	seed  maphash.Seed
}

// A slot is 0 (empty) or tag<<52 | rank<<32 | offset<<8 | length: the
// token's bytes are data[offset:offset+length] (length >= 1), tag is the
// top 12 bits of its hash.
const (
	maxTokenLen  = 1<<8 - 1
	maxTokenData = 1<<24 - 1
	maxRank      = 1<<20 - 1
)

const noMerge = math.MaxUint32

// ranksOf reads the vocabulary tiktoken-go compiles in, through Decode: the
// library keeps it unexported, and it is the one copy of the ranks we trust.
func ranksOf(c *codec.Codec) *ranks {
	type tok struct {
		off, n int
		rank   uint32
	}
	var data strings.Builder
	var toks []tok
	misses := 0
	for id := uint(0); misses < 1024; id++ {
		// ErrorModeNone (a fresh codec's) returns a token's bytes as they are,
		// partial UTF-8 included. Special tokens are not in the vocabulary
		// and fail, as do the ids past its end.
		piece, err := c.Decode([]uint{id})
		if err != nil {
			misses++
			continue
		}
		misses = 0
		if len(piece) == 0 || len(piece) > maxTokenLen || id > maxRank {
			panic(fmt.Sprintf("token: %s: token %d (%d bytes) does not fit the rank table", c.GetName(), id, len(piece)))
		}
		toks = append(toks, tok{data.Len(), len(piece), uint32(id)})
		data.WriteString(piece)
	}
	if data.Len() > maxTokenData {
		panic(fmt.Sprintf("token: %s: %d bytes of tokens do not fit the rank table", c.GetName(), data.Len()))
	}
	size := 1
	for size < 2*len(toks) {
		size *= 2
	}
	r := &ranks{data: data.String(), slots: make([]uint64, size), mask: uint64(size - 1), seed: maphash.MakeSeed()}
	for _, t := range toks {
		piece := r.data[t.off : t.off+t.n]
		slot := uint64(t.rank)<<32 | uint64(t.off)<<8 | uint64(t.n)
		i, found := r.find(piece)
		if !found {
			slot |= maphash.String(r.seed, piece) >> 52 << 52
		} else {
			slot |= r.slots[i] >> 52 << 52 // bytes seen before: the later id wins, as in a map
		}
		r.slots[i] = slot
	}
	return r
}

// find returns the slot holding piece, or the empty slot where it would go.
func (r *ranks) find(piece string) (uint64, bool) {
	h := maphash.String(r.seed, piece)
	tag := h >> 52
	for i := h & r.mask; ; i = (i + 1) & r.mask {
		e := r.slots[i]
		if e == 0 {
			return i, false
		}
		if e>>52 == tag && int(e&0xff) == len(piece) {
			off := e >> 8 & 0xffffff
			if r.data[off:off+uint64(len(piece))] == piece {
				return i, true
			}
		}
	}
}

// lookup returns piece's token id, if piece is a token.
func (r *ranks) lookup(piece string) (uint32, bool) {
	if len(piece) == 0 || len(piece) > maxTokenLen {
		return 0, false
	}
	i, ok := r.find(piece)
	if !ok {
		return 0, false
	}
	return uint32(r.slots[i] >> 32 & maxRank), true
}

// count returns the number of tokens BPE encodes piece into: tiktoken's
// byte_pair_merge (merge the adjacent pair of lowest rank, leftmost first,
// until no pair is a token).
func (r *ranks) count(piece string) int {
	if _, ok := r.lookup(piece); ok {
		return 1
	}
	if len(piece) < 64 {
		return r.countScan(piece)
	}
	return r.countHeap(piece)
}

func (r *ranks) rank(s string) uint32 {
	if id, ok := r.lookup(s); ok {
		return id
	}
	return noMerge
}

// countScan is O(n²) with small constants: for the short pieces that are
// nearly all of them.
func (r *ranks) countScan(piece string) int {
	type part struct {
		start int
		rank  uint32 // of merging this part with the next
	}
	var buf [129]part
	parts := buf[:0]
	for i := 0; i <= len(piece); i++ {
		parts = append(parts, part{i, noMerge})
	}
	// rankAt: the rank of parts[i] merged with parts[i+1] (both ends given by
	// the starts of parts i and i+2).
	rankAt := func(i int) uint32 {
		if i+2 < len(parts) {
			return r.rank(piece[parts[i].start:parts[i+2].start])
		}
		return noMerge
	}
	for i := 0; i+2 < len(parts); i++ {
		parts[i].rank = rankAt(i)
	}
	for len(parts) > 1 {
		best, at := uint32(noMerge), -1
		for i := 0; i < len(parts)-1; i++ {
			if parts[i].rank < best {
				best, at = parts[i].rank, i
			}
		}
		if at < 0 {
			break
		}
		parts = append(parts[:at+1], parts[at+2:]...)
		parts[at].rank = rankAt(at)
		if at > 0 {
			parts[at-1].rank = rankAt(at - 1)
		}
	}
	return len(parts) - 1
}

// countHeap gives countScan's answer in O(n log n), for long pieces (a run
// of letters or symbols thousands of bytes long).
func (r *ranks) countHeap(piece string) int {
	n := int32(len(piece))
	// The live parts form a linked list by start offset: part i spans
	// [i, next[i]); prev links back.
	next := make([]int32, n)
	prev := make([]int32, n)
	for i := range n {
		next[i], prev[i] = i+1, i-1
	}
	h := make(mergeHeap, 0, n)
	pair := func(i int32) (mergeItem, bool) {
		j := next[i]
		if j >= n {
			return mergeItem{}, false
		}
		rk := r.rank(piece[i:next[j]])
		return mergeItem{rk, i, next[j]}, rk != noMerge
	}
	for i := int32(0); i+1 < n; i++ {
		if it, ok := pair(i); ok {
			h = append(h, it)
		}
	}
	h.init()
	count := int(n)
	for len(h) > 0 {
		it := h.pop()
		i := it.start
		// Stale: part i was merged away (prev[i] = -2) or grew since.
		if prev[i] == -2 || next[i] >= n || next[next[i]] != it.end {
			continue
		}
		j := next[i]
		prev[j] = -2
		next[i] = next[j]
		if next[i] < n {
			prev[next[i]] = i
		}
		count--
		if it, ok := pair(i); ok {
			h.push(it)
		}
		if p := prev[i]; p >= 0 {
			if it, ok := pair(p); ok {
				h.push(it)
			}
		}
	}
	return count
}

// mergeItem is a candidate merge of the part starting at start with the
// next one, ending at end; ordered by rank, then leftmost.
type mergeItem struct {
	rank       uint32
	start, end int32
}

func (x mergeItem) less(y mergeItem) bool {
	return x.rank < y.rank || x.rank == y.rank && x.start < y.start
}

// mergeHeap is a binary min-heap of merges (typed: container/heap's
// interface boxing would allocate per push).
type mergeHeap []mergeItem

func (h mergeHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *mergeHeap) push(it mergeItem) {
	*h = append(*h, it)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeItem {
	s := *h
	top := s[0]
	s[0] = s[len(s)-1]
	*h = s[:len(s)-1]
	h.down(0)
	return top
}

func (h mergeHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].less(h[l]) {
			m = r
		}
		if !h[m].less(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// validUTF8 replaces every maximal invalid subsequence of s with U+FFFD, as
// tiktoken's callers (Python's errors="replace", a JS string) see the text.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
			n = invalidPrefix(s)
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// invalidPrefix returns the length of the maximal subpart of the
// ill-formed sequence at the start of s (Unicode §3.9, the WHATWG decoder's
// rule): the longest prefix that is still the incomplete start of a valid
// encoding, or the one bad byte.
func invalidPrefix(s string) int {
	n := 1
	for n < len(s) && n < utf8.UTFMax && !utf8.FullRuneInString(s[:n+1]) {
		n++
	}
	if n == 1 || utf8.FullRuneInString(s[:n]) {
		return 1
	}
	return n
}
