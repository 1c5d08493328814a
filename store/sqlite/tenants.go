package sqlite

import (
	"context"
	"fmt"

	"github.com/mnemehq/mneme/store"
)

var _ store.TenantLister = (*Store)(nil)

// Tenants implements store.TenantLister.
func (s *Store) Tenants(ctx context.Context) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT tenant FROM threads UNION SELECT tenant FROM memories ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: tenants: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("sqlite: tenants: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: tenants: %w", err)
	}
	return out, nil
}
