package store

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/mnemehq/mneme/message"
)

// Vectors are optional: a backend that can keep embeddings of message
// events and search them by cosine similarity implements this interface
// (store/inmem, store/sqlite with sqlite-vec, store/postgres with real[]
// and an exact cosine scan). Callers type-assert for it and fall back to BM25 alone when
// it is missing.
//
// Vectors of different models (embedders) never meet: every vector carries
// its Model and a search compares only vectors of the query's Model and
// dimension. Vectors are tied to their event: DeleteThread removes them.
type Vectors interface {
	// PutVectors stores (or replaces) the embedding of each message event
	// named by Ref. A ref that does not name a message event of the tenant
	// (another tenant's, a deleted thread's) is skipped silently: embedding
	// runs in the background and may lag behind deletions.
	PutVectors(ctx context.Context, tenant string, vs []Vector) error
	// SearchVectors returns the tenant's message events nearest to q.V
	// (cosine similarity, best first, Score in [-1, 1]), narrowed by the
	// same filters as Search. Snippet is left empty. No vector of the
	// query's model and dimension: no hits, no error.
	SearchVectors(ctx context.Context, tenant string, q VectorQuery) ([]Hit, error)
}

// Vector is the embedding of one message event.
type Vector struct {
	Ref   string    `json:"ref"`
	Model string    `json:"model"`
	V     []float32 `json:"v"`
}

// VectorQuery is a nearest-neighbour search; the filters mean what they
// mean in SearchQuery.
type VectorQuery struct {
	Model   string
	V       []float32
	Thread  string // "" = all the tenant's threads
	Role    message.Role
	Tool    string
	FromSeq int64
	ToSeq   int64
	Since   time.Time
	Until   time.Time
	Limit   int // <= 0: 10; at most MaxVectorLimit
}

// Vector limits, the same on every backend.
const (
	MaxVectorDims  = 8192
	MaxVectorLimit = 1000
	maxModelBytes  = 256
)

// CheckVector validates one vector: a ref and a model name of sane size,
// 1 to MaxVectorDims finite components, not all zero (cosine needs a norm).
func CheckVector(v Vector) error {
	if v.Ref == "" || len(v.Ref) > 256 {
		return fmt.Errorf("%w: vector ref empty or longer than 256 bytes", ErrInvalid)
	}
	return checkVec(v.Model, v.V)
}

// CheckVectorQuery validates a vector search's tenant, model, vector and
// filters.
func CheckVectorQuery(tenant string, q VectorQuery) error {
	if err := CheckSearch(tenant, SearchQuery{Thread: q.Thread, Role: q.Role, Tool: q.Tool, FromSeq: q.FromSeq, ToSeq: q.ToSeq}); err != nil {
		return err
	}
	return checkVec(q.Model, q.V)
}

func checkVec(model string, v []float32) error {
	if model == "" || len(model) > maxModelBytes {
		return fmt.Errorf("%w: vector model empty or longer than %d bytes", ErrInvalid, maxModelBytes)
	}
	if len(v) == 0 || len(v) > MaxVectorDims {
		return fmt.Errorf("%w: vector has %d dimensions, want 1 to %d", ErrInvalid, len(v), MaxVectorDims)
	}
	var norm float64
	for _, x := range v {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%w: vector has a non-finite component", ErrInvalid)
		}
		norm += f * f
	}
	if norm == 0 {
		return fmt.Errorf("%w: zero vector", ErrInvalid)
	}
	return nil
}

// Cosine returns the cosine similarity of a and b (0 when either is zero
// or their lengths differ). Backends that compute it in Go share this one.
func Cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}
