// Package postgres is the store.Store for more than one machine: any number
// of stateless `mneme serve` replicas share one PostgreSQL database, on
// github.com/jackc/pgx/v5 (a connection pool; statements are prepared and
// cached per connection by pgx's default exec mode; COPY for bulk import).
//
// Concurrency: Append locks the thread's row (SELECT ... FOR UPDATE, or
// inserts it) and checks its last seq, so two replicas appending to one
// thread serialise and the loser gets store.ErrConflict; the events' primary
// key (tenant, thread, seq) backs this up. Leases (store.Leaser) use the
// database's clock, one clock for every replica.
//
// Archive search: the same query semantics as store/sqlite, from the shared
// parser in package fulltext. Each message's text is reduced to terms in Go
// as on SQLite (fulltext.IndexTerms) and stored as a tsvector literal
// (terms) and the same tsvector in binary (tsv, written beside it); a GIN
// index on tsv finds candidates (a tsquery of
// quoted lexemes: no text search parser, no stemming, no stop words), or a
// small thread's messages are all read; candidates are ranked in Go by
// BM25 with the scope's statistics (fulltext.Tally), and verbatim
// identifier terms are checked in Go, as on SQLite (search.go).
//
// The index's pending list (PostgreSQL's fastupdate) is merged by a
// cleaner beside the appends rather than by the append that fills it
// (gincleaner.go).
//
// A replica keeps the terms of the small threads it searched lately
// (termcache.go, up to 32 MB), so that a thread's next search reads
// only what was appended since.
//
// Vectors: real[] with exact cosine ranking computed in SQL. pgvector is not
// installed on the machines this was built on; when it is, an ANN index can
// replace the exact scan behind the same methods.
//
// The package imports the store and message packages and pgx; nothing above
// the store layer.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
)

// Store is a store.Store on one PostgreSQL database (or one schema of it:
// the DSN's search_path parameter chooses it).
type Store struct {
	pool      *pgxpool.Pool
	now       func() time.Time
	group     backend.GroupCommit[*appendReq] // group commit of Appends (log.go)
	calls     backend.CallCache               // the tool calls appended last, by thread (log.go, findCall)
	closeOnce sync.Once
	// searchPath, when set, makes every thread's search take that path
	// (search.go), for the tests that run the conformance suite on each.
	searchPath searchPath
	terms      *termCache  // small threads' terms (termcache.go)
	cleaner    *ginCleaner // empties the events' GIN pending list (gincleaner.go)
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.Leaser       = (*Store)(nil)
	_ store.TenantLister = (*Store)(nil)
)

// Open connects to the database the DSN names (postgres://... or
// postgresql://..., any parameter pgx takes: sslmode, pool_max_conns,
// search_path, ...) and migrates its schema to the current version. Several
// processes may open one database at once: migrations run under an
// advisory lock.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors quote the DSN, password included: do not wrap.
		return nil, fmt.Errorf("%w: postgres DSN does not parse", store.ErrInvalid)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	s := &Store{pool: pool, now: time.Now, terms: newTermCache(termCacheBytes)}
	// The cleaner starts at nine tenths of the pending list's limit (in
	// kB) by its estimate, which is 0.87 to 1.14 times the list's pages
	// (pendingBytes): most often before an append reaches the limit, and
	// not much earlier (the more merges, the more of the index's keys
	// they visit).
	var limit int64
	if err := pool.QueryRow(ctx, `SELECT setting::bigint FROM pg_settings WHERE name = 'gin_pending_list_limit'`).Scan(&limit); err != nil {
		limit = 0 // no cleaner: the inserts merge the list
	}
	s.cleaner = newGINCleaner(limit * 1024 * 9 / 10)
	// Two group transactions in flight: while one waits for its WAL flush,
	// the next runs its statements.
	s.group.Leaders = 2
	return s, nil
}

// Close ends a cleaning of the GIN index's pending list under way
// (gincleaner.go), then closes the pool, waiting for connections in use
// to be returned; calling it again is harmless.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.cleaner.close()
		s.pool.Close()
	})
	return nil
}

// Pool returns the connection pool, for tests and tools that inspect the
// tables directly.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

func (s *Store) clock() time.Time { return s.now().UTC().Round(0) }

// inTx runs fn in a read-committed transaction.
func (s *Store) inTx(ctx context.Context, op string, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return dbErr(op, err)
	}
	defer tx.Rollback(ctx)
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return dbErr(op, err)
	}
	return nil
}

// Constraint names the error mapping looks for (see schema.go).
const (
	eventsPKey   = "events_pkey"
	eventsRefKey = "events_tenant_ref_key"
)

// dbErr wraps a database error for op, mapping what the caller caused to
// store's sentinels: bytes PostgreSQL text cannot hold (NUL, invalid
// UTF-8) and other data exceptions are store.ErrInvalid, a duplicate seq is
// store.ErrConflict.
func dbErr(op string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505" && pe.ConstraintName == eventsPKey:
			return fmt.Errorf("%w: postgres: %s: seq already taken", store.ErrConflict, op)
		case pe.Code == "23505" && pe.ConstraintName == eventsRefKey:
			return fmt.Errorf("%w: postgres: %s: ref already used", store.ErrInvalid, op)
		case len(pe.Code) == 5 && pe.Code[:2] == "22":
			return fmt.Errorf("%w: postgres: %s: %s", store.ErrInvalid, op, pe.Message)
		case transientClass(pe.Code):
			return fmt.Errorf("%w: postgres: %s: %w", store.ErrUnavailable, op, err)
		}
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("postgres: %s: %w", op, err) // the caller's deadline, not the server's fault
	}
	// Not an answer of the server: the connection failed or was lost.
	var ne net.Error
	var ce *pgconn.ConnectError
	if errors.As(err, &ne) || errors.As(err, &ce) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || pgconn.SafeToRetry(err) {
		return fmt.Errorf("%w: postgres: %s: %w", store.ErrUnavailable, op, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// transientClass reports SQLSTATEs that say the server cannot do the work
// now rather than that the call was wrong: connection exceptions (08),
// insufficient resources such as a full disk (53), operator intervention
// such as a shutdown (57P), serialization failures and deadlocks (40).
func transientClass(code string) bool {
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "08", "53", "40":
		return true
	}
	return code[:3] == "57P"
}

var _ store.HealthChecker = (*Store)(nil)

// Health reports whether the database answers.
func (s *Store) Health(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return dbErr("ping", err)
	}
	return nil
}

func checkTenant(tenant string) error { return backend.CheckScope(tenant, "-") }
