package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
)

var _ store.Snapshots = (*Store)(nil)

// PutSnapshot implements store.Snapshots: one row per thread, replaced
// only by a snapshot of a later seq. The thread's row is read under a
// share lock, so that a concurrent DeleteThread cannot leave a snapshot
// behind.
func (s *Store) PutSnapshot(ctx context.Context, tenant, thread string, seq int64, data []byte) error {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return err
	}
	return s.inTx(ctx, "put snapshot", func(tx pgx.Tx) error {
		var last int64
		err := tx.QueryRow(ctx, `SELECT last_seq FROM threads WHERE tenant = $1 AND id = $2 FOR SHARE`, tenant, thread).Scan(&last)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return store.ErrNotFound
		case err != nil:
			return dbErr("put snapshot", err)
		case seq <= 0 || seq > last:
			return fmt.Errorf("%w: snapshot at seq %d of a thread of %d events", store.ErrInvalid, seq, last)
		}
		_, err = tx.Exec(ctx, `INSERT INTO snapshots (tenant, thread, seq, data) VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant, thread) DO UPDATE SET seq = excluded.seq, data = excluded.data
			WHERE excluded.seq > snapshots.seq`, tenant, thread, seq, data)
		if err != nil {
			return dbErr("put snapshot", err)
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
	err := s.pool.QueryRow(ctx, `SELECT seq, data FROM snapshots WHERE tenant = $1 AND thread = $2`, tenant, thread).Scan(&seq, &data)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, store.ErrNotFound
	}
	if err != nil {
		return 0, nil, dbErr("get snapshot", err)
	}
	return seq, data, nil
}
