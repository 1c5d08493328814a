package token

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/tiktoken-go/tokenizer/codec"
)

// Counter counts the tokens of a text under one tokenizer. Implementations
// are safe for concurrent use.
type Counter interface {
	// Name is the tokenizer's name, as given to Get ("o200k_base", "claude").
	Name() string
	// Count returns the number of tokens of text, never fewer than the
	// tokenizer it stands for would produce (exactly that number for the
	// BPE encodings).
	Count(text string) int
}

// ErrUnknownTokenizer is returned by Get for a name it does not know.
var ErrUnknownTokenizer = errors.New("token: unknown tokenizer")

// The exact encodings.
const (
	O200kBase  = "o200k_base"
	Cl100kBase = "cl100k_base"
)

// Get returns the counter named name: one of Names(). Counters are shared
// singletons; the BPE vocabularies are built on first use.
func Get(name string) (Counter, error) {
	switch name {
	case O200kBase:
		return o200k(), nil
	case Cl100kBase:
		return cl100k(), nil
	}
	if e, ok := estimators[name]; ok {
		return e, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownTokenizer, name)
}

// Names lists every tokenizer name Get accepts, sorted.
func Names() []string {
	names := []string{O200kBase, Cl100kBase}
	for n := range estimators {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// bpe counts exactly with one of tiktoken's encodings: a hand-written
// pre-tokenizer (pretok.go) splits the text as the encoding's regexp does,
// and each piece is one token or the result of the byte-pair merges.
type bpe struct {
	name  string
	next  func(s string, i int) int
	ranks *ranks
}

func (b *bpe) Name() string { return b.name }

func (b *bpe) Count(text string) int {
	if text == "" {
		return 0
	}
	// tiktoken replaces invalid UTF-8 with U+FFFD before encoding; so do we.
	text = validUTF8(text)
	n := 0
	for i := 0; i < len(text); {
		j := b.next(text, i)
		n += b.ranks.count(text[i:j])
		i = j
	}
	return n
}

var (
	o200k = sync.OnceValue(func() *bpe {
		return &bpe{name: O200kBase, next: o200kNext, ranks: ranksOf(codec.NewO200kBase())}
	})
	cl100k = sync.OnceValue(func() *bpe {
		return &bpe{name: Cl100kBase, next: cl100kNext, ranks: ranksOf(codec.NewCl100kBase())}
	})
)
