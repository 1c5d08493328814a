package fulltext

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/kljensen/snowball/english"
)

// indexBodySamples are texts whose terms take each of IndexBody's ways:
// ASCII words stemmed or not, codes, possessives, other scripts, long
// tokens, invalid UTF-8, separators at either end.
var indexBodySamples = []string{
	"",
	" ",
	"Refund POLICY for INV-4401, please",
	"Caroline's painting and Caroline’s paints; it's S's",
	"s S 's ’s x's",
	"trace_id=checkout-failure-2026-03-15 src/shop/checkout.go 0x1f E1234",
	"讨论预算 🚀 Ünïcödé ÉCOLE straße İstanbul ΣΊΣΥΦΟΣ",
	"\xff\xfeabc \xc3 def\xe2\x80",
	strings.Repeat("a", 63) + " " + strings.Repeat("b", 64) + " " + strings.Repeat("Running", 10),
	"running RUNNING Running runs ran 8th 1990s U.S e.g self-portrait",
	"  leading and trailing  ",
	"tail-token",
}

// TestIndexBodyIsJoinedTerms: IndexBody, built in one pass, is the
// IndexTerms of its text joined by spaces, as every backend indexes it.
func TestIndexBodyIsJoinedTerms(t *testing.T) {
	for _, s := range indexBodySamples {
		if got, want := IndexBody(s), strings.Join(IndexTerms(s), " "); got != want {
			t.Errorf("IndexBody(%q) = %q, want %q", s, got, want)
		}
	}
	// Random texts over an alphabet of the cases above.
	alphabet := []rune("aAsSzZ019 -_'’.,/éÉßİΣ讨🚀\u0301\ufffd\u00a0")
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		r := make([]rune, rng.IntN(40))
		for i := range r {
			r[i] = alphabet[rng.IntN(len(alphabet))]
		}
		s := string(r)
		if got, want := IndexBody(s), strings.Join(IndexTerms(s), " "); got != want {
			t.Fatalf("IndexBody(%q) = %q, want %q", s, got, want)
		}
	}
}

func FuzzIndexBody(f *testing.F) {
	for _, s := range indexBodySamples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := IndexBody(s), strings.Join(IndexTerms(s), " "); got != want {
			t.Errorf("IndexBody(%q) = %q, want %q", s, got, want)
		}
	})
}

// BenchmarkIndexBody: the index terms of a 60-word English message, what
// each appended message costs the writer.
func BenchmarkIndexBody(b *testing.B) {
	text := "The customer's refund for invoice INV-4401 was approved on Monday after the " +
		"billing team reviewed the charges; Running totals were recalculated and the " +
		"payment processor confirmed the reversal. Next steps: notify accounts, update " +
		"src/billing/refunds.go and close ticket 8812 before the quarterly reporting deadline " +
		"so that finance can reconcile everything by Friday.\n2026-03-15 Sunday 15 March"
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		IndexBody(text)
	}
}

// TestStemCache: the stem cache gives the stemmer's answer for every word,
// for more words than it has slots (so that words share slots and replace
// one another), from goroutines at once, on first sight and again; and a
// word looked up again comes from the cache.
func TestStemCache(t *testing.T) {
	words := make([]string, 2*stemSlots)
	for i := range words {
		w := []byte("s")
		for n := i; n > 0; n /= 26 {
			w = append(w, byte('a'+n%26))
		}
		words[i] = string(w) + []string{"ing", "ed", "ies", "ational", "ness", "s"}[i%6]
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pass := range 2 {
				for i := g; i < len(words); i += 2 {
					w := words[i]
					if got, want := stemWord([]byte(w)), english.Stem(w, true); got != want {
						t.Errorf("pass %d: stemWord(%q) = %q, want %q", pass, w, got, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, w := range words[:100] {
		first := stemWord([]byte(w))
		if again := stemWord([]byte(w)); unsafe.StringData(again) != unsafe.StringData(first) {
			t.Fatalf("stemWord(%q) was stemmed again, not read from the cache", w)
		}
	}
}
