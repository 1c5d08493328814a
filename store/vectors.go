package store

import (
	"context"
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
