package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
)

// Vectors are message embeddings, one per event ref, stored as real[] with
// their model, dimension and norm. pgvector is not installed on the machines
// this was built on, so ranking is an exact cosine scan over the tenant's
// vectors of the query's model and dimension (index vectors_by_model),
// computed in SQL so that vectors never cross the wire; where the pgvector
// extension exists, a vector column and an ANN index can replace the scan
// behind the same two methods.
//
// A vector references its event (ON DELETE CASCADE, and DeleteThread
// deletes the thread's vectors first), so it never outlives its thread.

var _ store.Vectors = (*Store)(nil)

// putVector stores one vector if ref names a message event of the tenant:
// the SELECT finds no row otherwise, and nothing is written.
const putVector = `INSERT INTO vectors (tenant, ref, thread, seq, model, dims, norm, v)
	SELECT tenant, ref, thread, seq, $3, $4, $5, $6 FROM events
	WHERE tenant = $1 AND ref = $2 AND kind = 'message'
	ON CONFLICT (tenant, ref) DO UPDATE SET
		model = EXCLUDED.model, dims = EXCLUDED.dims, norm = EXCLUDED.norm, v = EXCLUDED.v`

// PutVectors implements store.Vectors. The vectors are written in one
// batch (one round trip, one transaction). A re-embedded event's vector is
// replaced, whatever its former model.
func (s *Store) PutVectors(ctx context.Context, tenant string, vs []store.Vector) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	for _, v := range vs {
		if err := backend.CheckVector(v); err != nil {
			return err
		}
		if !storable(v.Model) {
			return fmt.Errorf("%w: vector model has a NUL byte or is not UTF-8", store.ErrInvalid)
		}
	}
	batch := func() *pgx.Batch {
		b := &pgx.Batch{}
		for _, v := range vs {
			if storable(v.Ref) { // otherwise no event's ref is v.Ref
				b.Queue(putVector, tenant, v.Ref, v.Model, len(v.V), norm(v.V), v.V)
			}
		}
		return b
	}
	// A thread deleted between the SELECT and the foreign key check fails
	// the batch; run it again, and the deleted events are simply skipped.
	for attempt := 0; ; attempt++ {
		b := batch()
		if b.Len() == 0 {
			return nil
		}
		err := s.pool.SendBatch(ctx, b).Close()
		var pe *pgconn.PgError
		if err != nil && attempt < 3 && errors.As(err, &pe) && pe.Code == "23503" {
			continue
		}
		if err != nil {
			return dbErr("put vectors", err)
		}
		return nil
	}
}

// SearchVectors implements store.Vectors: an exact cosine scan of the
// tenant's vectors of the query's model and dimension, joined with their
// events for the filters and the hit's fields.
func (s *Store) SearchVectors(ctx context.Context, tenant string, q store.VectorQuery) ([]store.Hit, error) {
	if err := backend.CheckVectorQuery(tenant, q); err != nil {
		return nil, err
	}
	if !storable(q.Model) {
		return nil, nil // no stored vector has this model
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, store.MaxVectorLimit)

	args := []any{tenant, q.Model, len(q.V), q.V, norm(q.V)}
	where := []string{"v.tenant = $1", "v.model = $2", "v.dims = $3"}
	add := func(cond string, x any) {
		args = append(args, x)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if q.Thread != "" {
		add("v.thread = $%d", q.Thread)
	}
	if q.Role != "" {
		add("e.role = $%d", string(q.Role))
	}
	if q.Tool != "" {
		add("e.tool = $%d", q.Tool)
	}
	if q.FromSeq > 0 {
		add("v.seq >= $%d", q.FromSeq)
	}
	if q.ToSeq > 0 {
		add("v.seq <= $%d", q.ToSeq)
	}
	if !q.Since.IsZero() {
		add("e.at >= $%d", backend.Nanos(q.Since))
	}
	if !q.Until.IsZero() {
		add("e.at <= $%d", backend.Nanos(q.Until))
	}
	args = append(args, limit)
	sqlText := `SELECT v.thread, v.ref, v.seq, e.role, e.tool, e.at,
			(SELECT sum(a::float8 * b::float8) FROM unnest(v.v, $4::real[]) AS t(a, b)) / (v.norm * $5) AS score
		FROM vectors v JOIN events e ON e.tenant = v.tenant AND e.ref = v.ref
		WHERE ` + strings.Join(where, " AND ") + fmt.Sprintf(`
		ORDER BY score DESC, v.thread, v.seq LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, sqlText, args...)
	if err != nil {
		return nil, dbErr("search vectors", err)
	}
	defer rows.Close()
	var hits []store.Hit
	for rows.Next() {
		var (
			h          store.Hit
			role, tool *string
			at         int64
		)
		if err := rows.Scan(&h.Thread, &h.Ref, &h.Seq, &role, &tool, &at, &h.Score); err != nil {
			return nil, dbErr("search vectors", err)
		}
		h.Role, h.Tool, h.At = message.Role(deref(role)), deref(tool), backend.FromNanos(at)
		h.Score = max(-1, min(1, h.Score)) // rounding may step just past ±1
		hits = append(hits, h)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("search vectors", err)
	}
	return hits, nil
}

// norm is v's Euclidean norm, in float64 as the SQL sum is; CheckVector
// has made sure that v is finite and not zero.
func norm(v []float32) float64 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	return math.Sqrt(sum)
}

// storable reports whether PostgreSQL text can hold s.
func storable(s string) bool {
	return utf8.ValidString(s) && !strings.Contains(s, "\x00")
}
