// Package embed turns text into vectors for the archive's and long-term
// memory's semantic search: an Embedder interface, a client for any
// OpenAI-compatible /v1/embeddings endpoint (net/http, no SDK), a
// deterministic hashing embedder for tests and offline use, and Fuse, the
// reciprocal rank fusion that merges full-text and vector rankings.
//
// It imports only the standard library: no store, no window, no HTTP
// server.
package embed

import (
	"context"
	"errors"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// Embedder turns texts into vectors, one per text, in order. Vectors of
// one Embedder are comparable with each other only: Model names the space
// they live in, and stores never compare vectors of different models.
type Embedder interface {
	// Model names the embedding space (e.g. "text-embedding-3-small",
	// "hashing-256").
	Model() string
	// Embed returns one vector per text. It fails as a whole: either every
	// text gets a vector or the error says why none did.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// ErrEmbed wraps every failure of an embedder, so callers can tell it from
// store errors (and degrade to full-text search).
var ErrEmbed = errors.New("embed: embedding failed")

// Hashing is the deterministic hashing embedder: each lowercased word (a
// run of letters and digits) adds ±1 at the position its FNV-1a hash picks,
// the sign taken from the hash's top bit, and the vector is scaled to unit
// length. Texts sharing words have a positive cosine similarity; the same
// text always gives the same vector. It is the algorithm of
// internal/fakellm's /v1/embeddings, so a remote client pointed at the fake
// server and a local Hashing of the same dimension agree.
type Hashing struct {
	// Dims is the vector size; <= 0 means DefaultHashingDims.
	Dims int
}

// DefaultHashingDims is Hashing's default vector size.
const DefaultHashingDims = 256

func (h Hashing) dims() int {
	if h.Dims <= 0 {
		return DefaultHashingDims
	}
	return h.Dims
}

// Model implements Embedder.
func (h Hashing) Model() string { return "hashing-" + strconv.Itoa(h.dims()) }

// Embed implements Embedder; it never fails.
func (h Hashing) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = hashVector(t, h.dims())
	}
	return out, nil
}

func hashVector(text string, dims int) []float32 {
	v := make([]float64, dims)
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	if len(words) == 0 {
		words = []string{text}
	}
	for _, w := range words {
		f := fnv.New64a()
		_, _ = f.Write([]byte(w))
		sum := f.Sum64()
		sign := 1.0
		if sum>>63 == 1 {
			sign = -1
		}
		v[sum%uint64(dims)] += sign
	}
	var norm float64
	for _, x := range v {
		norm += x * x
	}
	out := make([]float32, dims)
	if norm == 0 { // all words cancelled out: a unit basis vector
		out[0] = 1
		return out
	}
	norm = math.Sqrt(norm)
	for i, x := range v {
		out[i] = float32(x / norm)
	}
	return out
}
