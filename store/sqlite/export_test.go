package sqlite

import "context"

// IndexBatch is indexBatch, for the tests of the archive index's queue.
var IndexBatch = indexBatch

// CatchUpIndex moves the archive index's queue into the index now, as a
// search of a long queue does first.
func (s *Store) CatchUpIndex(ctx context.Context) error { return s.catchUpIndex(ctx) }
