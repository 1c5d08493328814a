package inmem

import (
	"context"
	"sort"

	"github.com/mnemehq/mneme/store"
)

var _ store.TenantLister = (*Store)(nil)

// Tenants implements store.TenantLister: the tenants with a thread or a
// memory item.
func (s *Store) Tenants(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	var out []string
	for name, t := range s.tenants {
		if len(t.threads) > 0 || len(t.memories) > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}
