package token

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

// FuzzCount checks what holds for any text: the pieces tile it, each is
// non-empty, a piece never costs more tokens than bytes, and the two merge
// algorithms agree.
func FuzzCount(f *testing.F) {
	for _, s := range []string{"", "x\n \ny", "  a", "don't", "A\u0301b'S", "1234567", "\r\n\r\n  ", "é中😀", "\xe2\x82A", strings.Repeat("ab", 100), "a\f\u2029 b", "x\u200b \u180ey", "\u3000\u205f\n"} {
		f.Add(s)
	}
	o, c := o200k(), cl100k()
	f.Fuzz(func(t *testing.T, text string) {
		text = validUTF8(text)
		if !utf8.ValidString(text) {
			t.Fatalf("validUTF8 left invalid text %q", text)
		}
		for _, b := range []*bpe{o, c} {
			for i := 0; i < len(text); {
				j := b.next(text, i)
				if j <= i || j > len(text) {
					t.Fatalf("%s: piece at %d of %q ends at %d", b.name, i, text, j)
				}
				piece := text[i:j]
				n := b.ranks.count(piece)
				if n < 1 || n > len(piece) {
					t.Fatalf("%s: piece %q: %d tokens", b.name, piece, n)
				}
				if s, h := b.ranks.countScan(piece), b.ranks.countHeap(piece); len(piece) < 128 && s != h {
					t.Fatalf("%s: piece %q: scan %d, heap %d", b.name, piece, s, h)
				}
				i = j
			}
		}
	})
}

// BenchmarkPretokenizer counts the corpus with Mneme's counter and with
// tiktoken-go's (regexp split), side by side; "speedup" is theirs/ours.
func BenchmarkPretokenizer(b *testing.B) {
	texts := corpus(b)
	var all strings.Builder
	for _, s := range texts {
		all.WriteString(s)
		all.WriteByte('\n')
	}
	text := all.String()
	for _, enc := range []tokenizer.Encoding{tokenizer.O200kBase, tokenizer.Cl100kBase} {
		b.Run(string(enc), func(b *testing.B) {
			ours, _ := Get(string(enc))
			theirs, err := tokenizer.Get(enc)
			if err != nil {
				b.Fatal(err)
			}
			tokens := ours.Count(text)
			var tOurs, tTheirs float64
			for b.Loop() {
				t0 := nowNanos()
				ours.Count(text)
				t1 := nowNanos()
				theirs.Count(text)
				tOurs += float64(t1 - t0)
				tTheirs += float64(nowNanos() - t1)
			}
			b.ReportMetric(float64(tokens)*float64(b.N)/tOurs*1e9, "tokens/s")
			b.ReportMetric(float64(tokens)*float64(b.N)/tTheirs*1e9, "tiktoken-go-tokens/s")
			b.ReportMetric(tTheirs/tOurs, "speedup")
		})
	}
}

func nowNanos() int64 { return time.Now().UnixNano() }
