package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

// Memories: namespaces are stored joined (backend.JoinNamespace) in a
// COLLATE "C" column, so a prefix search is the byte range [P, P') where P'
// is P with its final separator incremented; expired rows are filtered on
// every read and the tenant's are purged by its next write.

func purgeExpired(ctx context.Context, tx pgx.Tx, tenant string, now time.Time) error {
	if _, err := tx.Exec(ctx, `DELETE FROM memories WHERE tenant = $1 AND expires > 0 AND expires <= $2`, tenant, backend.Nanos(now)); err != nil {
		return dbErr("purge memories", err)
	}
	return nil
}

// PutMemory implements store.Memories: an upsert that keeps Created unless
// the previous item had expired (then it is a new item).
func (s *Store) PutMemory(ctx context.Context, tenant string, it store.Memory) (store.Memory, error) {
	if err := backend.CheckItem(tenant, it); err != nil {
		return store.Memory{}, err
	}
	if it.Value == nil {
		return store.Memory{}, fmt.Errorf("%w: memory value is empty", store.ErrInvalid)
	}
	now := s.clock()
	out := store.Memory{
		Namespace: append([]string(nil), it.Namespace...),
		Key:       it.Key,
		Value:     append(json.RawMessage(nil), it.Value...),
		Created:   now,
		Updated:   now,
	}
	if !it.Expires.IsZero() {
		out.Expires = it.Expires.UTC().Round(0)
	}
	err := s.inTx(ctx, "put memory", func(tx pgx.Tx) error {
		if err := purgeExpired(ctx, tx, tenant, now); err != nil {
			return err
		}
		var created int64
		if err := upsertMemory(ctx, tx, tenant, out).Scan(&created); err != nil {
			return dbErr("put memory", err)
		}
		out.Created = backend.FromNanos(created)
		return nil
	})
	if err != nil {
		return store.Memory{}, err
	}
	return out, nil
}

// upsertMemory writes it with its own Created and Updated (an existing,
// unexpired item keeps its Created) and returns the stored Created.
func upsertMemory(ctx context.Context, tx pgx.Tx, tenant string, it store.Memory) pgx.Row {
	terms, lossy := indexTerms(backend.MemoryText(it.Key, it.Value))
	return tx.QueryRow(ctx, `INSERT INTO memories (tenant, namespace, key, value, created, updated, expires, terms, lossy)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (tenant, namespace, key) DO UPDATE SET
			value = EXCLUDED.value, updated = EXCLUDED.updated, expires = EXCLUDED.expires,
			terms = EXCLUDED.terms, lossy = EXCLUDED.lossy,
			created = CASE WHEN memories.expires > 0 AND memories.expires <= EXCLUDED.updated
				THEN EXCLUDED.created ELSE memories.created END
		RETURNING created`,
		tenant, backend.JoinNamespace(it.Namespace), it.Key, string(it.Value),
		backend.Nanos(it.Created), backend.Nanos(it.Updated), backend.Nanos(it.Expires), terms, lossy)
}

const itemCols = `namespace, key, value, created, updated, expires`

func scanItem(sc pgx.Row, extra ...any) (store.Memory, error) {
	var (
		it                        store.Memory
		ns, value                 string
		created, updated, expires int64
	)
	err := sc.Scan(append([]any{&ns, &it.Key, &value, &created, &updated, &expires}, extra...)...)
	it.Namespace, it.Value = backend.SplitNamespace(ns), json.RawMessage(value)
	it.Created, it.Updated, it.Expires = backend.FromNanos(created), backend.FromNanos(updated), backend.FromNanos(expires)
	return it, err
}

// GetMemory implements store.Memories.
func (s *Store) GetMemory(ctx context.Context, tenant string, namespace []string, key string) (store.Memory, error) {
	if err := backend.CheckItemRef(tenant, namespace, key); err != nil {
		return store.Memory{}, err
	}
	it, err := scanItem(s.pool.QueryRow(ctx, `SELECT `+itemCols+` FROM memories
		WHERE tenant = $1 AND namespace = $2 AND key = $3 AND (expires = 0 OR expires > $4)`,
		tenant, backend.JoinNamespace(namespace), key, backend.Nanos(s.clock())))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Memory{}, store.ErrNotFound
	}
	if err != nil {
		return store.Memory{}, dbErr("get memory", err)
	}
	return it, nil
}

// DeleteMemory implements store.Memories.
func (s *Store) DeleteMemory(ctx context.Context, tenant string, namespace []string, key string) error {
	if err := backend.CheckItemRef(tenant, namespace, key); err != nil {
		return err
	}
	now := s.clock()
	return s.inTx(ctx, "delete memory", func(tx pgx.Tx) error {
		if err := purgeExpired(ctx, tx, tenant, now); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM memories WHERE tenant = $1 AND namespace = $2 AND key = $3`,
			tenant, backend.JoinNamespace(namespace), key)
		if err != nil {
			return dbErr("delete memory", err)
		}
		if tag.RowsAffected() == 0 {
			return store.ErrNotFound
		}
		return nil
	})
}

// SearchMemory implements store.Memories. Filters and verbatim terms apply
// in Go after the SQL scan, then Offset and Limit.
func (s *Store) SearchMemory(ctx context.Context, tenant string, q store.MemoryQuery) ([]store.Memory, error) {
	filter, err := backend.CheckMemoryQuery(tenant, q)
	if err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, maxLimit)

	args := []any{tenant, backend.Nanos(s.clock())}
	where := []string{"tenant = $1", "(expires = 0 OR expires > $2)"}
	if lo, hi := backend.NamespaceRange(q.Prefix); lo != "" {
		args = append(args, lo, hi)
		where = append(where, "namespace >= $3", "namespace < $4")
	}
	var (
		pq      fulltext.ParsedQuery
		sqlText string
	)
	if q.Text == "" {
		sqlText = `SELECT ` + itemCols + `, 0::real, 0::smallint FROM memories WHERE ` + strings.Join(where, " AND ") +
			` ORDER BY updated DESC, namespace, key`
	} else {
		if pq, err = fulltext.ParseQuery(q.Text); err != nil || pq.Empty() {
			return nil, err
		}
		n := len(args)
		args = append(args, tsQuery(pq, false), tsQuery(pq, true))
		where = append(where, fmt.Sprintf("(tsv @@ $%d::tsquery OR (lossy > 0 AND (lossy = 2 OR tsv @@ $%d::tsquery)))", n+1, n+2))
		sqlText = fmt.Sprintf(`SELECT `+itemCols+`, ts_rank_cd(tsv, $%d::tsquery) AS rank, lossy FROM memories WHERE `, n+1) +
			strings.Join(where, " AND ") + ` ORDER BY rank DESC, updated DESC, namespace, key`
	}
	rows, err := s.pool.Query(ctx, sqlText, args...)
	if err != nil {
		return nil, dbErr("search memory", err)
	}
	defer rows.Close()
	var out []store.Memory
	skip := q.Offset
	for rows.Next() && len(out) < limit {
		var (
			rank  float32
			lossy int16
		)
		it, err := scanItem(rows, &rank, &lossy)
		if err != nil {
			return nil, dbErr("search memory", err)
		}
		if !filter.Match(it.Value) || (q.Text != "" && !accept(pq, backend.MemoryText(it.Key, it.Value), lossy)) {
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		if q.Text != "" {
			it.Score = max(float64(rank), minScore)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("search memory", err)
	}
	return out, nil
}

// DeleteNamespace implements store.Memories. The prefix must not be empty.
func (s *Store) DeleteNamespace(ctx context.Context, tenant string, prefix []string) (int, error) {
	if err := checkTenant(tenant); err != nil {
		return 0, err
	}
	if err := backend.CheckNamespace(prefix, false); err != nil {
		return 0, err
	}
	lo, hi := backend.NamespaceRange(prefix)
	now := s.clock()
	var n int64
	err := s.inTx(ctx, "delete namespace", func(tx pgx.Tx) error {
		if err := purgeExpired(ctx, tx, tenant, now); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM memories WHERE tenant = $1 AND namespace >= $2 AND namespace < $3`, tenant, lo, hi)
		if err != nil {
			return dbErr("delete namespace", err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return int(n), err
}
