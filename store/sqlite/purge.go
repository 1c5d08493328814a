package sqlite

import (
	"context"
	"fmt"
)

// Purge implements store.Purger: VACUUM rewrites the file from its live
// rows only (stale copies of deleted rows in pages' free space go), then a
// truncating checkpoint moves the result out of the WAL and empties it.
func (s *Store) Purge(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, `VACUUM`); err != nil {
		return fmt.Errorf("sqlite: purge: %w", err)
	}
	s.checkpoint(ctx)
	return nil
}
