package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
)

var _ store.Snapshots = (*Store)(nil)

// PutSnapshot implements store.Snapshots: one row per thread, replaced
// only by a snapshot of a later seq.
func (s *Store) PutSnapshot(ctx context.Context, tenant, thread string, seq int64, data []byte) error {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		last, err := lastSeqIn(ctx, tx, tenant, thread)
		if err != nil {
			return err
		}
		switch {
		case last == 0:
			return store.ErrNotFound
		case seq <= 0 || seq > last:
			return fmt.Errorf("%w: snapshot at seq %d of a thread of %d events", store.ErrInvalid, seq, last)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO snapshots (tenant, thread, seq, data) VALUES (?, ?, ?, ?)
			ON CONFLICT (tenant, thread) DO UPDATE SET seq = excluded.seq, data = excluded.data
			WHERE excluded.seq > snapshots.seq`, tenant, thread, seq, data); err != nil {
			return fmt.Errorf("sqlite: put snapshot: %w", err)
		}
		return nil
	})
}

// GetSnapshot implements store.Snapshots.
func (s *Store) GetSnapshot(ctx context.Context, tenant, thread string) (int64, []byte, error) {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return 0, nil, err
	}
	var seq int64
	var data []byte
	err := s.queryRow(ctx, `SELECT seq, data FROM snapshots WHERE tenant = ? AND thread = ?`, tenant, thread).Scan(&seq, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, store.ErrNotFound
	}
	if err != nil {
		return 0, nil, fmt.Errorf("sqlite: get snapshot: %w", err)
	}
	return seq, data, nil
}
