package recall

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mnemehq/mneme/embed"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

// Recall searches a tenant's archive. Store is required; with an Embedder
// and a vector index (Vectors, or the Store itself when it implements
// store.Vectors) search is hybrid, otherwise BM25 alone. Embedding or vector
// failures never fail a search: they are logged and the search degrades to
// BM25.
type Recall struct {
	Store store.Store
	// Vectors is the vector index; nil means Store's when it has one.
	Vectors store.Vectors
	// Embedder embeds queries (and, through an Indexer, messages); nil
	// means BM25 alone.
	Embedder embed.Embedder
	// Logger receives degradation warnings; nil means slog.Default().
	Logger *slog.Logger
	// QueryTimeout bounds embedding one query (default 2 s).
	QueryTimeout time.Duration
	// MinSimilarity is the cosine similarity a vector hit needs to count
	// at all: below it, it neither re-ranks a full-text hit nor adds one of
	// its own (nearest neighbours always exist, related or not). 0 means
	// DefaultMinSimilarity; a negative value, no minimum.
	MinSimilarity float64
	// VectorWeight is the vector ranking's weight in the fusion, the text
	// ranking's being 1 (0 means DefaultVectorWeight).
	VectorWeight float64
}

// Fusion defaults (embed.FuseScores), chosen so that a weak embedder
// (embed.Hashing) never ranks worse than BM25 alone, which recall's LoCoMo
// test holds them to: a vector hit counts from a cosine of 0.3, and a
// perfect one lifts a hit by 0.3 of the best full-text score.
const (
	DefaultMinSimilarity = 0.3
	DefaultVectorWeight  = 0.3
)

func (r *Recall) minSimilarity() float64 {
	switch {
	case r.MinSimilarity < 0:
		return -2 // below any cosine
	case r.MinSimilarity == 0:
		return DefaultMinSimilarity
	}
	return r.MinSimilarity
}

func (r *Recall) vectorWeight() float64 {
	if r.VectorWeight <= 0 {
		return DefaultVectorWeight
	}
	return r.VectorWeight
}

// RRFK is the reciprocal-rank-fusion constant: a hit ranked r in a list
// adds 1/(RRFK+r) to its score (Cormack et al., 2009).
const RRFK = embed.RRFK

// Search limits.
const (
	DefaultLimit = 10
	MaxLimit     = 100
)

func (r *Recall) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

func (r *Recall) vectors() store.Vectors {
	if r.Vectors != nil {
		return r.Vectors
	}
	if v, ok := store.As[store.Vectors](r.Store); ok {
		return v
	}
	return nil
}

// Hybrid reports whether searches fuse vector similarity with BM25.
func (r *Recall) Hybrid() bool { return r.Embedder != nil && r.vectors() != nil }

// Search runs q over the tenant's archive (q.Thread "" = every thread of
// the tenant), best first. Identifier-like terms match exactly (see
// fulltext.ParseQuery); when the query has such a term or a quoted phrase,
// vectors only re-rank full-text hits and never add hits of their own, so
// exactness holds in hybrid mode too. An empty query gives no hits; an
// oversized one store.ErrInvalid.
func (r *Recall) Search(ctx context.Context, tenant string, q store.SearchQuery) ([]store.Hit, error) {
	if err := backend.CheckSearch(tenant, q); err != nil {
		return nil, err
	}
	pq, err := fulltext.ParseQuery(q.Text)
	if err != nil {
		return nil, err
	}
	if pq.Empty() {
		return nil, nil
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	hybrid := r.Hybrid()
	depth := limit
	if hybrid {
		depth = min(max(3*limit, 30), store.MaxVectorLimit)
	}
	bq := q
	bq.Limit = depth
	text, err := r.Store.Search(ctx, tenant, bq)
	if err != nil {
		return nil, err
	}
	if !hybrid {
		return cut(text, limit), nil
	}
	near, err := r.nearest(ctx, tenant, q, depth)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.logger().Warn("recall: vector search failed, using full-text ranking", "tenant", tenant, "err", err)
		return cut(text, limit), nil
	}
	return r.fuse(ctx, tenant, pq, text, near, len(pq.Required()) > 0, limit)
}

func cut(hits []store.Hit, n int) []store.Hit {
	if len(hits) > n {
		return hits[:n]
	}
	return hits
}

// nearest embeds the query and searches the vector index.
func (r *Recall) nearest(ctx context.Context, tenant string, q store.SearchQuery, depth int) ([]store.Hit, error) {
	timeout := r.QueryTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ectx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	vs, err := r.Embedder.Embed(ectx, []string{q.Text})
	if err == nil && len(vs) != 1 {
		err = fmt.Errorf("%w: %d vectors for one query", embed.ErrEmbed, len(vs))
	}
	if err != nil {
		return nil, err
	}
	return r.vectors().SearchVectors(ctx, tenant, store.VectorQuery{
		Model: r.Embedder.Model(), V: vs[0], Thread: q.Thread, Role: q.Role, Tool: q.Tool,
		FromSeq: q.FromSeq, ToSeq: q.ToSeq, Since: q.Since, Until: q.Until, Limit: depth,
	})
}

// fuse merges the two rankings by their scores (embed.FuseScores): vector
// hits under the minimum similarity count for nothing. With textOnly,
// only full-text hits are eligible. Vector-only hits get a snippet from
// their message's text.
func (r *Recall) fuse(ctx context.Context, tenant string, pq fulltext.ParsedQuery, text, near []store.Hit, textOnly bool, limit int) ([]store.Hit, error) {
	all := embed.FuseScores(text, near, func(h store.Hit) string { return h.Ref }, func(h store.Hit) float64 { return h.Score },
		r.minSimilarity(), r.vectorWeight())
	var out []store.Hit
	for _, f := range all {
		if len(out) == limit {
			break
		}
		h := f.Item
		if f.TextRank == 0 && textOnly {
			continue // found by vectors alone, and not eligible
		}
		h.Score = f.Score
		if f.TextRank == 0 {
			_, ev, err := r.Store.EventByRef(ctx, tenant, h.Ref)
			if errors.Is(err, store.ErrNotFound) || (err == nil && ev.Message == nil) {
				continue // deleted since it was embedded
			}
			if err != nil {
				return nil, err
			}
			h.Snippet = fulltext.Snippet(ev.Message.PlainText(), pq, 0)
		}
		out = append(out, h)
	}
	return out, nil
}
