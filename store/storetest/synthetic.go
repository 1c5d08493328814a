package storetest

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// Synthetic returns n deterministic messages of 30 to 80 words drawn from a
// 2,000-word vocabulary (Word), low ranks the most frequent, one in ten
// mentioning an invoice id: the backends' benchmarks' messages.
func Synthetic(n int) []store.Event {
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := make([]string, 2000)
	for i := range vocab {
		vocab[i] = Word(i)
	}
	evs := make([]store.Event, n)
	for i := range evs {
		var b strings.Builder
		for range 30 + rng.IntN(50) {
			b.WriteString(vocab[int(float64(len(vocab))*rng.Float64()*rng.Float64())])
			b.WriteByte(' ')
		}
		if i%10 == 0 {
			fmt.Fprintf(&b, "invoice INV-%04d", i/10)
		}
		role := message.User
		if i%2 == 1 {
			role = message.Assistant
		}
		m := message.NewText(role, b.String())
		evs[i] = store.Event{Kind: store.KindMessage, Message: &m, Tokens: 60}
	}
	return evs
}

// Word is the vocabulary's i-th word: letters only, so a plain word and
// not an identifier.
func Word(i int) string {
	w := []byte("w")
	for ; i > 0; i /= 26 {
		w = append(w, byte('a'+i%26))
	}
	return string(w) + "o"
}
