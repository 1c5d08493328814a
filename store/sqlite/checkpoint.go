package sqlite

import (
	"context"
	"database/sql"
	"net/url"
)

// Checkpoints. SQLite copies the WAL back into the database (a checkpoint)
// on the writer's connection, inside the commit that takes the WAL past
// wal_autocheckpoint pages: that commit, and every append waiting behind
// it, waited for about a thousand pages copied and the database file's
// fsync, a request's latency in the proxy's tail. Here a connection of the
// store's own checkpoints in the background instead (PASSIVE: it waits for
// no reader or writer, and no writer waits for it), once checkpointEvery
// commits have gone by since the last. The writer keeps its own
// auto-checkpoint at walBackstop pages, which bounds the WAL when writes
// never pause: SQLite starts the WAL over only at a write that begins with
// every frame copied, which a checkpoint beside continuous commits never
// leaves, and the writer's own then copies only what came after the
// background's last.
const checkpointEvery = 64

// walBackstop is the writer's wal_autocheckpoint, in pages (a variable for
// the tests, which use a smaller one).
var walBackstop = 4000

// openCheckpointer opens the connection the background checkpoints run on.
func openCheckpointer(path string, q url.Values) (*sql.DB, error) {
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	return db, nil
}

// committed counts a write transaction's commit and starts a background
// checkpoint once checkpointEvery have gone by since the last started.
func (s *Store) committed() {
	if s.ck == nil || s.commits.Add(1) < checkpointEvery {
		return
	}
	s.ckRun.Start(func() { s.commits.Store(0) }, func() {
		// The store's, not a caller's: Close waits for it. A failure
		// (the file gone, the disk full) leaves the frames to the next
		// checkpoint or to the writer's own.
		_, _ = s.ck.ExecContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`)
	})
}
