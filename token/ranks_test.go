package token

import (
	"testing"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer/codec"
)

// TestRanksTable checks the rank table against tiktoken-go's codec: every
// token's bytes give its id, and a piece of the corpus (one piece of the
// pre-tokenizer) is found exactly when the codec encodes it as one token,
// with that token's id.
func TestRanksTable(t *testing.T) {
	texts := corpus(t)
	for _, enc := range []struct {
		b *bpe
		c *codec.Codec
	}{{o200k(), codec.NewO200kBase()}, {cl100k(), codec.NewCl100kBase()}} {
		r, n := enc.b.ranks, 0
		for id := uint(0); id < 1<<20; id++ {
			piece, err := enc.c.Decode([]uint{id})
			if err != nil {
				continue
			}
			n++
			if got, ok := r.lookup(piece); !ok || got != uint32(id) {
				t.Fatalf("%s: token %d (%q): lookup gives %d, %v", enc.b.name, id, piece, got, ok)
			}
		}
		if n < 100000 {
			t.Fatalf("%s: %d tokens", enc.b.name, n)
		}
		found, missed := 0, 0
		for _, text := range texts {
			text = validUTF8(text)
			for i := 0; i < len(text); {
				j := enc.b.next(text, i)
				for k := i + 1; k <= j && k <= i+24; k++ { // the piece's prefixes, some tokens, most not
					sub := text[i:k]
					if !utf8.ValidString(sub) || enc.b.next(sub, 0) != len(sub) {
						continue
					}
					ids, _, err := enc.c.Encode(sub)
					if err != nil {
						t.Fatal(err)
					}
					id, ok := r.lookup(sub)
					if want := len(ids) == 1; ok != want || ok && uint(id) != ids[0] {
						t.Fatalf("%s: %q: lookup gives %d, %v; the codec %v", enc.b.name, sub, id, ok, ids)
					}
					if ok {
						found++
					} else {
						missed++
					}
				}
				i = j
			}
		}
		if found == 0 || missed == 0 {
			t.Fatalf("%s: %d pieces found, %d not: the corpus tests one side only", enc.b.name, found, missed)
		}
	}
}
