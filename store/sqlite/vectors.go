package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"

	_ "modernc.org/sqlite/vec" // registers sqlite-vec (vec0) on every connection
)

// Vectors live in sqlite-vec vec0 tables, one per dimension
// (events_vec_<dims>), created on first use rather than by a migration
// because the dimension is the embedder's choice. Each row's rowid is the
// events.id it embeds; tenant is the vec0 partition key, so a KNN search
// scans only the tenant's vectors (I8); thread and model are metadata
// columns the KNN filters on. A trigger deletes a vector with its event,
// so DeleteThread (in log.go) removes vectors without knowing of them.
//
// The distance is cosine (sqlite-vec's exact brute-force KNN); Score is
// 1 - distance.
//
// No statement that reaches a vec0 table is handed a context that can end
// while it runs (vecContext): the driver interrupts a statement whose
// context ends, and sqlite-vec, which prepares its own statements lazily
// inside the statement that first needs them, goes on after a prepare the
// interrupt failed with the statement it did not get, a nil dereference
// that ends the process (the recall indexer's PutVectors, interrupted as
// its engine closed, took down a test binary in CI;
// TestVectorsContextEnds). A call whose context has ended fails before it
// begins; one begun runs to its end. A delete of events reaches the vec0
// tables too, through the trigger ensureVecTable makes: deleteFromLog, the
// only one, runs under vecContext as well.

var _ store.Vectors = (*Store)(nil)

func vecTable(dims int) string { return fmt.Sprintf("events_vec_%d", dims) }

// ensureVecTable creates the vec0 table for dims and its delete trigger.
func ensureVecTable(ctx context.Context, tx *sql.Tx, dims int) error {
	t := vecTable(dims)
	_, err := tx.ExecContext(ctx, fmt.Sprintf(`CREATE VIRTUAL TABLE IF NOT EXISTS %[1]s USING vec0(
	tenant text partition key,
	thread text,
	model text,
	embedding float[%[2]d] distance_metric=cosine
);
CREATE TRIGGER IF NOT EXISTS %[1]s_delete AFTER DELETE ON events BEGIN
	DELETE FROM %[1]s WHERE rowid = old.id;
END;`, t, dims))
	return err
}

// vecBlob is sqlite-vec's float32 vector format: little-endian components.
func vecBlob(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// vecContext returns ctx without its end, for the statements that reach a
// vec0 table (see above), or ctx's error if it has ended already.
func vecContext(ctx context.Context) (context.Context, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return context.WithoutCancel(ctx), nil
}

// PutVectors implements store.Vectors.
func (s *Store) PutVectors(ctx context.Context, tenant string, vs []store.Vector) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	for _, v := range vs {
		if err := backend.CheckVector(v); err != nil {
			return err
		}
	}
	if len(vs) == 0 {
		return nil
	}
	ctx, err := vecContext(ctx)
	if err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		ready := map[int]bool{}
		for _, v := range vs {
			var (
				id     int64
				thread string
			)
			err := s.byRef(v.Ref, func(key string) error {
				return tx.QueryRowContext(ctx, `SELECT id, thread FROM events WHERE tenant = ? AND ref = ? AND kind = 'message'`,
					tenant, key).Scan(&id, &thread)
			})
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return fmt.Errorf("sqlite: put vectors: %w", err)
			}
			if !ready[len(v.V)] {
				if err := ensureVecTable(ctx, tx, len(v.V)); err != nil {
					return fmt.Errorf("sqlite: put vectors: %w", err)
				}
				ready[len(v.V)] = true
			}
			t := vecTable(len(v.V))
			// vec0 has no upsert: replace by delete and insert. An event
			// re-embedded at another dimension keeps both; searches only
			// ever read the table of the query's dimension and model.
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+t+` WHERE rowid = ?`, id); err != nil {
				return fmt.Errorf("sqlite: put vectors: %w", err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+t+` (rowid, tenant, thread, model, embedding) VALUES (?, ?, ?, ?, ?)`,
				id, tenant, thread, v.Model, vecBlob(v.V)); err != nil {
				return fmt.Errorf("sqlite: put vectors: %w", err)
			}
		}
		return nil
	})
}

// SearchVectors implements store.Vectors. The KNN runs inside the tenant's
// partition (and thread, model); filters on role, tool, seq and time are
// applied by joining the events, over a larger candidate set when any is
// given.
func (s *Store) SearchVectors(ctx context.Context, tenant string, q store.VectorQuery) ([]store.Hit, error) {
	if err := backend.CheckVectorQuery(tenant, q); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, store.MaxVectorLimit)
	ctx, err := vecContext(ctx)
	if err != nil {
		return nil, err
	}
	t := vecTable(len(q.V))
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, t).Scan(&n); err != nil {
		return nil, fmt.Errorf("sqlite: search vectors: %w", err)
	}
	if n == 0 {
		return nil, nil
	}

	knn := []string{"embedding MATCH ?", "k = ?", "tenant = ?", "model = ?"}
	k := limit
	var post []string
	var postArgs []any
	addPost := func(cond string, v any) {
		post = append(post, cond)
		postArgs = append(postArgs, v)
	}
	if q.Role != "" {
		addPost("e.role = ?", string(q.Role))
	}
	if q.Tool != "" {
		addPost("e.tool = ?", q.Tool)
	}
	if q.FromSeq > 0 {
		addPost("e.seq >= ?", q.FromSeq)
	}
	if q.ToSeq > 0 {
		addPost("e.seq <= ?", q.ToSeq)
	}
	if !q.Since.IsZero() {
		addPost("e.at >= ?", backend.Nanos(q.Since))
	}
	if !q.Until.IsZero() {
		addPost("e.at <= ?", backend.Nanos(q.Until))
	}
	if len(post) > 0 {
		k = min(4096, max(limit*8, 256)) // sqlite-vec caps k at 4096
	}
	args := []any{vecBlob(q.V), k, tenant, q.Model}
	if q.Thread != "" {
		knn = append(knn, "thread = ?")
		args = append(args, q.Thread)
	}
	where := "e.tenant = ?"
	args = append(args, tenant)
	if len(post) > 0 {
		where += " AND " + strings.Join(post, " AND ")
		args = append(args, postArgs...)
	}
	sqlText := `WITH knn AS (SELECT rowid, distance FROM ` + t + ` WHERE ` + strings.Join(knn, " AND ") + `)
		SELECT e.thread, COALESCE(e.made_ref, e.ref), e.seq, e.role, e.tool, e.at, knn.distance
		FROM knn JOIN events e ON e.id = knn.rowid
		WHERE ` + where + ` ORDER BY knn.distance, e.id LIMIT ?`
	args = append(args, limit)
	rows, err := s.r.QueryContext(ctx, sqlText, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: search vectors: %w", err)
	}
	defer rows.Close()
	var hits []store.Hit
	for rows.Next() {
		var (
			h         store.Hit
			ref, tool sql.NullString
			role      string
			at        int64
			dist      float64
		)
		if err := rows.Scan(&h.Thread, &ref, &h.Seq, &role, &tool, &at, &dist); err != nil {
			return nil, fmt.Errorf("sqlite: search vectors: %w", err)
		}
		h.Ref, h.Role, h.Tool, h.At, h.Score = ref.String, message.Role(role), tool.String, backend.FromNanos(at), 1-dist
		hits = append(hits, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: search vectors: %w", err)
	}
	return hits, nil
}
