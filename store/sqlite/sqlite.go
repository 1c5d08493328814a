// Package sqlite is the embedded store.Store: one SQLite file in WAL mode,
// FTS5 for archive and memory search, on the pure-Go modernc.org/sqlite
// driver (no cgo).
//
// Concurrency: all writes go through a pool of exactly one connection whose
// transactions begin IMMEDIATE, so in-process writers queue in Go instead of
// spinning on SQLITE_BUSY, and a writer in another process (a second mneme
// on the same file) is waited for by busy_timeout. Reads use a separate pool
// of query-only connections and never block the writer (WAL).
//
// Durability: synchronous=FULL, so a message is on disk when Append returns
// (invariant I1). Deletion: secure_delete=ON and FTS5's secure-delete option
// overwrite deleted content, and DeleteThread checkpoints the WAL, so a
// deleted thread's bytes do not linger in the files.
//
// The package imports the store and message packages and the driver; nothing
// above the store layer.
package sqlite

//go:generate go run ./internal/gentokens -o ../fulltext/tokenrunes.go

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"

	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/mnemehq/mneme/store"
)

// Store is a store.Store on one SQLite file.
type Store struct {
	w, r      *sql.DB
	now       func() time.Time
	group     appendGroup // group commit of Appends (log.go)
	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*Store)(nil)

// busyTimeout is how long a connection waits for another process's lock.
const busyTimeout = 10 * time.Second

// Open opens (creating if needed) the database at path and migrates its
// schema to the current version.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("%w: sqlite path %q is empty or contains ? or #", store.ErrInvalid, path)
	}
	common := url.Values{}
	common.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	common.Add("_pragma", "foreign_keys(1)")
	common.Add("_pragma", "secure_delete(1)")
	common.Add("_pragma", "synchronous(FULL)")

	wq := url.Values{}
	for k, v := range common {
		wq[k] = append([]string(nil), v...)
	}
	wq.Add("_pragma", "journal_mode(WAL)")
	wq.Set("_txlock", "immediate")
	w, err := sql.Open("sqlite", path+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}

	rq := common
	rq.Add("_pragma", "query_only(1)")
	r, err := sql.Open("sqlite", path+"?"+rq.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	n := max(2, min(runtime.GOMAXPROCS(0), 8))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	if err := r.PingContext(ctx); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return &Store{w: w, r: r, now: time.Now}, nil
}

// Close closes both connection pools; calling it again is harmless.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = errors.Join(s.r.Close(), s.w.Close())
	})
	return s.closeErr
}

func (s *Store) clock() time.Time { return s.now().UTC().Round(0) }

// writeTx runs fn in an IMMEDIATE transaction on the writer connection.
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	return nil
}

// isUniqueViolation reports whether err is a UNIQUE constraint failure.
func isUniqueViolation(err error) bool {
	var se *sqlitedrv.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}
