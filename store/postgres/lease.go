package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mnemehq/mneme/store/backend"
)

// TryLease implements store.Leaser with one upsert on the leases table,
// timed by the database's clock (clock_timestamp), so replicas whose clocks
// disagree still agree on when a lease expires. The row is taken when it
// does not exist, when owner holds it (a renewal) or when it has expired (a
// takeover: the previous owner is presumed dead).
func (s *Store) TryLease(ctx context.Context, tenant, thread, name, owner string, ttl time.Duration) (bool, error) {
	if err := backend.CheckLease(tenant, thread, name, owner); err != nil {
		return false, err
	}
	if err := backend.CheckLeaseTTL(ttl); err != nil {
		return false, err
	}
	var got string
	err := s.pool.QueryRow(ctx, `INSERT INTO leases (tenant, thread, name, owner, expires)
		VALUES ($1, $2, $3, $4, clock_timestamp() + $5 * interval '1 microsecond')
		ON CONFLICT (tenant, thread, name) DO UPDATE SET owner = EXCLUDED.owner, expires = EXCLUDED.expires
			WHERE leases.owner = EXCLUDED.owner OR leases.expires <= clock_timestamp()
		RETURNING owner`, tenant, thread, name, owner, ttl.Microseconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, dbErr("try lease", err)
	}
	return got == owner, nil
}

// ReleaseLease implements store.Leaser.
func (s *Store) ReleaseLease(ctx context.Context, tenant, thread, name, owner string) error {
	if err := backend.CheckLease(tenant, thread, name, owner); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM leases WHERE tenant = $1 AND thread = $2 AND name = $3 AND owner = $4`,
		tenant, thread, name, owner)
	if err != nil {
		return dbErr("release lease", err)
	}
	return nil
}
