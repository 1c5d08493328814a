package sqlite

import (
	"context"
	"fmt"
)

// Purge implements store.Purger: VACUUM rewrites the file from its live
// rows only (stale copies of deleted rows in pages' free space go), then a
// truncating checkpoint moves the result out of the WAL and empties it;
// the same for the archive index's file (archive.go).
func (s *Store) Purge(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, `VACUUM`); err != nil {
		return fmt.Errorf("sqlite: purge: %w", err)
	}
	s.checkpoint(ctx)
	x, err := s.index()
	if err != nil || x == nil || x.w == nil {
		return err
	}
	// Under the index's lock: a VACUUM waits for no transaction of its
	// own connection, and a move or a delete may be under way.
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, err := x.w.ExecContext(ctx, `VACUUM main`); err != nil {
		return fmt.Errorf("sqlite: purge: index: %w", err)
	}
	x.checkpoint(ctx)
	return nil
}
