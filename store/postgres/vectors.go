package postgres

import (
	"context"
	"fmt"
	"math"

	"github.com/mnemehq/mneme/store"
)

// Vectors are message embeddings, one per event ref, stored as real[] with
// their norm. pgvector is not installed where this was built, so ranking is
// an exact cosine scan over the tenant's (or thread's) vectors of the
// query's dimension, computed in SQL so that vectors never cross the wire;
// where pgvector exists, a vector column and an ANN index can replace the
// scan behind the same two methods.

// MaxVectorDims bounds a vector's length.
const MaxVectorDims = 16000

// VectorHit is one result of SearchVectors, most similar first.
type VectorHit struct {
	Thread string  `json:"thread"`
	Ref    string  `json:"ref"`
	Seq    int64   `json:"seq"`
	Score  float64 `json:"score"` // cosine similarity, in [-1, 1]
}

// norm returns v's Euclidean norm, or an ErrInvalid error when v is empty,
// too long, not finite or zero.
func norm(v []float32) (float64, error) {
	if len(v) == 0 || len(v) > MaxVectorDims {
		return 0, fmt.Errorf("%w: vector of %d dimensions (want 1 to %d)", store.ErrInvalid, len(v), MaxVectorDims)
	}
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	n := math.Sqrt(sum)
	if n == 0 || math.IsInf(n, 0) || math.IsNaN(n) {
		return 0, fmt.Errorf("%w: vector is zero or not finite", store.ErrInvalid)
	}
	return n, nil
}

// PutVector stores (or replaces) the embedding of the message event ref of
// tenant. ErrNotFound if the tenant has no such event. DeleteThread deletes
// the thread's vectors with its events.
func (s *Store) PutVector(ctx context.Context, tenant, ref string, v []float32) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	n, err := norm(v)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO vectors (tenant, ref, thread, seq, dims, norm, v)
		SELECT tenant, ref, thread, seq, $3, $4, $5 FROM events WHERE tenant = $1 AND ref = $2
		ON CONFLICT (tenant, ref) DO UPDATE SET dims = EXCLUDED.dims, norm = EXCLUDED.norm, v = EXCLUDED.v`,
		tenant, ref, len(v), n, v)
	if err != nil {
		return dbErr("put vector", err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

// SearchVectors returns the k vectors of tenant most similar to q by
// cosine (thread "" searches all the tenant's threads). Only vectors of q's
// dimension are compared. k <= 0 means 10.
func (s *Store) SearchVectors(ctx context.Context, tenant, thread string, q []float32, k int) ([]VectorHit, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	qn, err := norm(q)
	if err != nil {
		return nil, err
	}
	if k <= 0 {
		k = 10
	}
	k = min(k, maxLimit)
	rows, err := s.pool.Query(ctx, `SELECT thread, ref, seq,
			(SELECT sum(a::float8 * b::float8) FROM unnest(v, $3::real[]) AS t(a, b)) / (norm * $4) AS score
		FROM vectors WHERE tenant = $1 AND ($2 = '' OR thread = $2) AND dims = $5
		ORDER BY score DESC, thread, seq LIMIT $6`, tenant, thread, q, qn, len(q), k)
	if err != nil {
		return nil, dbErr("search vectors", err)
	}
	defer rows.Close()
	var out []VectorHit
	for rows.Next() {
		var h VectorHit
		if err := rows.Scan(&h.Thread, &h.Ref, &h.Seq, &h.Score); err != nil {
			return nil, dbErr("search vectors", err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("search vectors", err)
	}
	return out, nil
}
