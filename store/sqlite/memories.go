package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

// Memories: namespaces are stored joined (backend.JoinNamespace), so a prefix
// search is a range scan [P, P') where P' is P with its final separator
// incremented; expired rows are filtered on every read and purged by the
// next write.

// purgeExpired deletes expired memories of every tenant, index rows first.
func purgeExpired(ctx context.Context, tx *sql.Tx, now time.Time) error {
	for _, q := range []string{
		`DELETE FROM memories_fts WHERE rowid IN (SELECT id FROM memories WHERE expires > 0 AND expires <= ?)`,
		`DELETE FROM memories WHERE expires > 0 AND expires <= ?`,
	} {
		if _, err := tx.ExecContext(ctx, q, backend.Nanos(now)); err != nil {
			return fmt.Errorf("sqlite: purge memories: %w", err)
		}
	}
	return nil
}

// PutMemory implements store.Memories.
func (s *Store) PutMemory(ctx context.Context, tenant string, it store.Memory) (store.Memory, error) {
	if err := backend.CheckItem(tenant, it); err != nil {
		return store.Memory{}, err
	}
	if it.Value == nil {
		return store.Memory{}, fmt.Errorf("%w: memory value is empty", store.ErrInvalid)
	}
	now := s.clock()
	ns := backend.JoinNamespace(it.Namespace)
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
	body := fulltext.IndexBody(backend.MemoryText(it.Key, it.Value))
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := purgeExpired(ctx, tx, now); err != nil {
			return err
		}
		var id, created int64
		err := tx.QueryRowContext(ctx, `SELECT id, created FROM memories WHERE tenant = ? AND namespace = ? AND key = ?`,
			tenant, ns, it.Key).Scan(&id, &created)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			res, err := tx.ExecContext(ctx, `INSERT INTO memories (tenant, namespace, key, value, created, updated, expires)
				VALUES (?, ?, ?, ?, ?, ?, ?)`, tenant, ns, it.Key, string(it.Value), backend.Nanos(now), backend.Nanos(now), backend.Nanos(out.Expires))
			if err != nil {
				return fmt.Errorf("sqlite: put memory: %w", err)
			}
			if id, err = res.LastInsertId(); err != nil {
				return fmt.Errorf("sqlite: put memory: %w", err)
			}
		case err != nil:
			return fmt.Errorf("sqlite: put memory: %w", err)
		default:
			out.Created = backend.FromNanos(created)
			if _, err := tx.ExecContext(ctx, `UPDATE memories SET value = ?, updated = ?, expires = ? WHERE id = ?`,
				string(it.Value), backend.Nanos(now), backend.Nanos(out.Expires), id); err != nil {
				return fmt.Errorf("sqlite: put memory: %w", err)
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM memories_fts WHERE rowid = ?`, id); err != nil {
				return fmt.Errorf("sqlite: put memory: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO memories_fts (rowid, body) VALUES (?, ?)`, id, body); err != nil {
			return fmt.Errorf("sqlite: put memory: index: %w", err)
		}
		return nil
	})
	if err != nil {
		return store.Memory{}, err
	}
	return out, nil
}

const itemCols = `m.namespace, m.key, m.value, m.created, m.updated, m.expires`

func scanItem(sc interface{ Scan(...any) error }, extra ...any) (store.Memory, error) {
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
	it, err := scanItem(s.r.QueryRowContext(ctx, `SELECT `+itemCols+` FROM memories m
		WHERE m.tenant = ? AND m.namespace = ? AND m.key = ? AND (m.expires = 0 OR m.expires > ?)`,
		tenant, backend.JoinNamespace(namespace), key, backend.Nanos(s.clock())))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Memory{}, store.ErrNotFound
	}
	if err != nil {
		return store.Memory{}, fmt.Errorf("sqlite: get memory: %w", err)
	}
	return it, nil
}

// DeleteMemory implements store.Memories.
func (s *Store) DeleteMemory(ctx context.Context, tenant string, namespace []string, key string) error {
	if err := backend.CheckItemRef(tenant, namespace, key); err != nil {
		return err
	}
	now := s.clock()
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := purgeExpired(ctx, tx, now); err != nil {
			return err
		}
		var id int64
		err := tx.QueryRowContext(ctx, `SELECT id FROM memories WHERE tenant = ? AND namespace = ? AND key = ?`,
			tenant, backend.JoinNamespace(namespace), key).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("sqlite: delete memory: %w", err)
		}
		for _, q := range []string{`DELETE FROM memories_fts WHERE rowid = ?`, `DELETE FROM memories WHERE id = ?`} {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return fmt.Errorf("sqlite: delete memory: %w", err)
			}
		}
		return nil
	})
}

// SearchMemory implements store.Memories. Filters apply in Go after the
// SQL scan (JSON equality with numbers compared by value), then Offset and
// Limit.
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

	where := []string{"m.tenant = ?", "(m.expires = 0 OR m.expires > ?)"}
	args := []any{tenant, backend.Nanos(s.clock())}
	if lo, hi := backend.NamespaceRange(q.Prefix); lo != "" {
		where = append(where, "m.namespace >= ?", "m.namespace < ?")
		args = append(args, lo, hi)
	}
	var (
		pq      fulltext.ParsedQuery
		sqlText string
	)
	if q.Text == "" {
		sqlText = `SELECT ` + itemCols + `, 0.0, '' FROM memories m WHERE ` + strings.Join(where, " AND ") +
			` ORDER BY m.updated DESC, m.namespace, m.key`
	} else {
		if pq, err = fulltext.ParseQuery(q.Text); err != nil || pq.Empty() {
			return nil, err
		}
		args = append([]any{pq.FTS5()}, args...)
		sqlText = `SELECT ` + itemCols + `, f.rank, f.body FROM memories_fts f JOIN memories m ON m.id = f.rowid
			WHERE memories_fts MATCH ? AND ` + strings.Join(where, " AND ") + ` ORDER BY f.rank, m.updated DESC`
	}
	rows, err := s.r.QueryContext(ctx, sqlText, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: search memory: %w", err)
	}
	defer rows.Close()
	var out []store.Memory
	skip := q.Offset
	for rows.Next() && len(out) < limit {
		var (
			rank float64
			body string
		)
		it, err := scanItem(rows, &rank, &body)
		if err != nil {
			return nil, fmt.Errorf("sqlite: search memory: %w", err)
		}
		if !filter.Match(it.Value) || (q.Text != "" && !pq.MatchesVerbatim(backend.MemoryText(it.Key, it.Value))) {
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		it.Score = -rank
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: search memory: %w", err)
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
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := purgeExpired(ctx, tx, now); err != nil {
			return err
		}
		const match = `tenant = ? AND namespace >= ? AND namespace < ?`
		if _, err := tx.ExecContext(ctx, `DELETE FROM memories_fts WHERE rowid IN (SELECT id FROM memories WHERE `+match+`)`, tenant, lo, hi); err != nil {
			return fmt.Errorf("sqlite: delete namespace: %w", err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM memories WHERE `+match, tenant, lo, hi)
		if err != nil {
			return fmt.Errorf("sqlite: delete namespace: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	if err == nil && n > 0 {
		s.checkpoint(ctx) // erasure: the deleted bytes leave the WAL and the file
	}
	return int(n), err
}
