package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Tenants implements store.TenantLister.
func (s *Store) Tenants(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant FROM threads UNION SELECT tenant FROM memories ORDER BY 1`)
	if err != nil {
		return nil, dbErr("tenants", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, dbErr("tenants", err)
	}
	return out, nil
}
