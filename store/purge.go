package store

import "context"

// Purger is an optional interface of a Store whose deletions can leave
// stale copies of deleted bytes in its files (SQLite: secure_delete zeroes
// a deleted row, but a copy that a page rebalance left in a page's free
// space survives until the file is rewritten). Purge rewrites the storage
// so that nothing deleted remains readable in it. It may take as long as
// copying the database; callers run it off the request path.
type Purger interface {
	Purge(ctx context.Context) error
}

// Unwrapper is implemented by store wrappers (timing, counting) so that the
// optional interfaces of the store they wrap can be found.
type Unwrapper interface {
	Unwrap() Store
}

// As finds, through any chain of Unwrappers, a store that implements T.
func As[T any](st Store) (T, bool) {
	for st != nil {
		if t, ok := st.(T); ok {
			return t, true
		}
		u, ok := st.(Unwrapper)
		if !ok {
			break
		}
		st = u.Unwrap()
	}
	var zero T
	return zero, false
}
