package store

import "context"

// Snapshots is an optional interface of a Store (find it with As): one
// snapshot per thread of its materialised window, kept beside the log, so
// that a cold start reads the snapshot and the events after it instead of
// the whole log. A snapshot is derived data, never the record: the engine
// verifies it against the log and rebuilds from the log when it is missing,
// stale or of another version (I7). DeleteThread removes it with the log.
type Snapshots interface {
	// PutSnapshot stores data as the thread's snapshot taken at seq,
	// replacing an older one; a snapshot at or below the stored one's seq is
	// ignored (a slow writer never takes a newer snapshot back). The thread
	// must exist with at least seq events, else ErrNotFound / ErrInvalid.
	PutSnapshot(ctx context.Context, tenant, thread string, seq int64, data []byte) error
	// GetSnapshot returns the thread's snapshot and the seq it was taken
	// at, or ErrNotFound.
	GetSnapshot(ctx context.Context, tenant, thread string) (seq int64, data []byte, err error)
}
