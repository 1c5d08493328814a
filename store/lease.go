package store

import (
	"context"
	"time"
)

// Leaser is an optional interface of a Store shared by several processes
// (several `mneme serve` replicas on one PostgreSQL): it grants named,
// expiring leases on a thread, so that work which must run at most once per
// thread across all replicas (compaction, background buffering) runs on
// exactly one of them.
//
// A lease is a row (tenant, thread, name) → (owner, expiry). It belongs to
// one owner until it expires; an expired lease is free, so the lease of a
// replica that died passes to the next replica that asks, at most ttl
// later. The holder renews it by calling TryLease again before it expires
// and must not assume it still holds it once ttl has passed since its last
// successful TryLease: a long job renews as it goes, or checks the log's
// last seq before it writes (Append's optimistic concurrency is the final
// guard against a writer whose lease ran out).
//
// A backend used by one process only need not implement it: the engine
// then coordinates in process.
type Leaser interface {
	// TryLease takes or renews the lease name on the thread for owner,
	// valid for ttl from now (the backend's clock, one clock for all
	// replicas where the backend has one). It reports whether owner holds
	// the lease now: false, with no error, while another owner's lease is
	// unexpired. ErrInvalid for an empty tenant, thread, name or owner or a
	// ttl <= 0.
	TryLease(ctx context.Context, tenant, thread, name, owner string, ttl time.Duration) (bool, error)
	// ReleaseLease gives the lease up if owner holds it, so another owner
	// need not wait for it to expire. Releasing a lease one does not hold
	// (never taken, expired, taken over) is not an error and changes
	// nothing.
	ReleaseLease(ctx context.Context, tenant, thread, name, owner string) error
}
