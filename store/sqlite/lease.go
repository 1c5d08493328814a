package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
)

var _ store.Leaser = (*Store)(nil)

// Leases coordinate several processes on one file (the writer lock makes
// each call atomic; processes on one machine share its clock). The table is
// created on first use rather than by a schema migration, so that a file
// that never needs a lease is not changed; a later migration that adds it
// must use this shape with CREATE TABLE IF NOT EXISTS.
const createLeases = `CREATE TABLE IF NOT EXISTS leases (
	tenant  TEXT    NOT NULL,
	thread  TEXT    NOT NULL,
	name    TEXT    NOT NULL,
	owner   TEXT    NOT NULL,
	expires INTEGER NOT NULL,
	PRIMARY KEY (tenant, thread, name)
) WITHOUT ROWID`

// TryLease implements store.Leaser: one upsert that takes the lease when it
// is free, held by owner (a renewal) or expired (a takeover).
func (s *Store) TryLease(ctx context.Context, tenant, thread, name, owner string, ttl time.Duration) (bool, error) {
	if err := backend.CheckLease(tenant, thread, name, owner); err != nil {
		return false, err
	}
	if err := backend.CheckLeaseTTL(ttl); err != nil {
		return false, err
	}
	now := s.clock()
	var got bool
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, createLeases); err != nil {
			return fmt.Errorf("sqlite: try lease: %w", err)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO leases (tenant, thread, name, owner, expires) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (tenant, thread, name) DO UPDATE SET owner = excluded.owner, expires = excluded.expires
			WHERE leases.owner = excluded.owner OR leases.expires <= ?`,
			tenant, thread, name, owner, backend.Nanos(now.Add(ttl)), backend.Nanos(now))
		if err != nil {
			return fmt.Errorf("sqlite: try lease: %w", err)
		}
		n, err := res.RowsAffected()
		got = n > 0
		return err
	})
	return got, err
}

// ReleaseLease implements store.Leaser.
func (s *Store) ReleaseLease(ctx context.Context, tenant, thread, name, owner string) error {
	if err := backend.CheckLease(tenant, thread, name, owner); err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, createLeases); err != nil {
			return fmt.Errorf("sqlite: release lease: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM leases WHERE tenant = ? AND thread = ? AND name = ? AND owner = ?`,
			tenant, thread, name, owner); err != nil {
			return fmt.Errorf("sqlite: release lease: %w", err)
		}
		return nil
	})
}
