package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCache holds a pool's fixed statements, each prepared once, on first
// use, and then on each connection as database/sql needs it: a query run
// by its text is parsed again at every call (Load's parse was a third of
// loading a short tail, and the proxy loads a thread's tail at every
// request).
type stmtCache struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// get returns the statement of query on db, preparing it on first use.
func (c *stmtCache) get(db *sql.DB, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st, nil
	}
	st, err := db.PrepareContext(context.Background(), query) // shared: no caller's cancellation
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = st
	return st, nil
}

// queryRow runs a fixed single-row query on the readers with its cached
// statement.
func (s *Store) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := s.reads.get(s.r, query)
	if err != nil {
		// Let the error surface through Scan, as QueryRowContext's does.
		return s.r.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// query runs a fixed query on the readers with its cached statement.
func (s *Store) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.reads.get(s.r, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}
