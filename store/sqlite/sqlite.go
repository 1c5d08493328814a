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
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
)

// Store is a store.Store on one SQLite file.
type Store struct {
	w, r      *sql.DB
	now       func() time.Time
	group     backend.GroupCommit[*appendReq] // group commit of Appends (log.go)
	calls     backend.CallCache               // the tool calls appended last, by thread (log.go, findCall)
	raw       rawConn                         // the writer's driver connection and its statements, for group commits (rawtx.go)
	queued    atomic.Int64                    // messages queued for the archive index, as this process counts them (log.go)
	closeOnce sync.Once
	closeErr  error

	// path and file identify the database file as opened: a write checks
	// that the file at path is still that one (see checkFile).
	path string
	file os.FileInfo
	// readOnly is set when the file was not writable at open: SQLite then
	// opens it read-only without a word and every write fails, so the
	// health check must say so.
	readOnly bool
	// searchPath, when set, makes every thread's search take that path
	// (search.go), for the tests that run the conformance suite on each.
	searchPath searchPath
	search     searchStmts        // Search's statements, prepared on first use (search.go)
	reads      stmtCache          // the fixed reads' statements on r (stmts.go)
	ahead      backend.Background // the archive index's queue moved in the background (log.go)
	// The archive index's file (archive.go), opened in the background
	// from Open (index): ix is nil when read-only and there is none.
	ixReady chan struct{}
	ix      *archiveIndex
	ixErr   error
	ck      *sql.DB            // the background checkpoints' connection (checkpoint.go); nil if read-only
	ckRun   backend.Background // the background checkpoint under way
	commits atomic.Int64       // commits since the last background checkpoint started
	// The refs this store makes (refs.go): opener seals and opens them;
	// refs gives their locators, nil when read-only.
	opener refCipher
	refs   *refSource
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
	// Every connection's pragmas, and each kind's own: the writer's, the
	// readers', the background checkpoints' (checkpoint.go).
	dsn := func(more ...string) url.Values {
		return url.Values{"_pragma": append([]string{fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()),
			"foreign_keys(1)", "secure_delete(1)", "synchronous(FULL)"}, more...)}
	}
	wq := dsn("journal_mode(WAL)", fmt.Sprintf("wal_autocheckpoint(%d)", walBackstop))
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
		return nil, fmt.Errorf("sqlite: open %s: %w%s", path, err, whyNotWritable(path))
	}
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: migrate %s: %w%s", path, err, whyNotWritable(path))
	}

	r, err := sql.Open("sqlite", path+"?"+dsn("query_only(1)").Encode())
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
	st := &Store{w: w, r: r, now: time.Now, path: path}
	if fi, err := os.Stat(path); err == nil { // not for special names such as :memory:
		st.file = fi
		st.readOnly = !writable(path)
	}
	if err := st.openRefs(ctx); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if !st.readOnly {
		if st.ck, err = openCheckpointer(path, dsn()); err != nil {
			w.Close()
			r.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
	}
	// The index's file opens beside the caller's first steps: a restart's
	// first window does not wait for it (BenchmarkColdStart).
	st.ixReady = make(chan struct{})
	go func() {
		defer close(st.ixReady)
		if err := st.openIndex(context.Background(), dsn); err != nil {
			st.ixErr = fmt.Errorf("%w: sqlite: open %s: index: %w", store.ErrUnavailable, path, err)
		}
	}()
	return st, nil
}

// index returns the archive index's file once it is open, nil when there
// is none to use (read-only), or why it could not be opened.
func (s *Store) index() (*archiveIndex, error) {
	<-s.ixReady
	return s.ix, s.ixErr
}

// openIndex opens the archive index's file (archive.go), finishes the
// deletes a crash interrupted and counts the queue (all of the log when
// the file is new).
func (s *Store) openIndex(ctx context.Context, dsn func(...string) url.Values) error {
	var key string
	if err := s.r.QueryRowContext(ctx, `SELECT key FROM archive_state`).Scan(&key); err != nil {
		return err
	}
	high := func() (n int64, err error) {
		err = s.r.QueryRowContext(ctx, highestID).Scan(&n)
		return n, err
	}
	x, err := openIndex(ctx, s.path, key, high, s.readOnly, dsn)
	if err != nil || x == nil {
		return err
	}
	s.ix = x
	if x.w == nil {
		return nil
	}
	if err := x.recover(ctx); err != nil {
		return err
	}
	var queued int64
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM events_terms WHERE id > ?`, x.mark(ctx)).Scan(&queued); err != nil {
		return err
	}
	// Moved by the next append or search, not now: a restart's first
	// window must not share the machine with it. Added: appends made
	// meanwhile counted themselves (a count too high only moves early).
	s.queued.Add(queued)
	return nil
}

// whyNotWritable names the reason a database cannot be opened for writing
// when it is the file system's (SQLite says only "unable to open database
// file"): "" when the file and its directory are writable.
func whyNotWritable(path string) string {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err == nil {
		f.Close()
		f, err = os.CreateTemp(filepath.Dir(path), ".mneme-probe-*")
		if err == nil {
			f.Close()
			os.Remove(f.Name())
			return ""
		}
	}
	switch {
	case errors.Is(err, syscall.EROFS):
		return " (the file system is read-only)"
	case errors.Is(err, fs.ErrPermission):
		return " (the file or its directory is not writable)"
	}
	return " (" + err.Error() + ")"
}

var _ store.HealthChecker = (*Store)(nil)

// Health reports whether the store can take writes: the database file is
// still the one opened, it was writable when opened, and the writer
// answers.
func (s *Store) Health(ctx context.Context) error {
	if err := s.checkFile(); err != nil {
		return err
	}
	if s.readOnly {
		return fmt.Errorf("%w: sqlite: the database file %s is read-only (it was not writable when opened)", store.ErrUnavailable, s.path)
	}
	if err := s.w.PingContext(ctx); err != nil {
		return classify("ping", err)
	}
	return nil
}

// checkFile returns store.ErrUnavailable when the file at the store's path
// is gone or is another file than the one opened. SQLite keeps writing to
// the open descriptor of a deleted or replaced file, so such writes would
// succeed and vanish at the next open: they must not be acknowledged.
func (s *Store) checkFile() error {
	if s.file == nil {
		return nil
	}
	fi, err := os.Stat(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: sqlite: the database file %s was removed while open", store.ErrUnavailable, s.path)
	case err != nil:
		return fmt.Errorf("%w: sqlite: stat %s: %w", store.ErrUnavailable, s.path, err)
	case !os.SameFile(fi, s.file):
		return fmt.Errorf("%w: sqlite: the database file %s was replaced while open", store.ErrUnavailable, s.path)
	}
	return nil
}

// classify wraps a driver error for op; faults of the machine rather than
// of the call (disk full, I/O error, a read-only or unopenable file, a lock
// held past busy_timeout, no memory) become store.ErrUnavailable, so that
// the caller answers "retry later" and not "internal error".
func classify(op string, err error) error {
	var se *sqlitedrv.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary result code
		case sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN,
			sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL:
			return fmt.Errorf("%w: sqlite: %s: %w", store.ErrUnavailable, op, err)
		}
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// Close closes both connection pools; calling it again is harmless.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.ahead.Stop()
		s.ckRun.Stop()
		s.closeRaw()
		var ckErr, ixErr error
		if s.ck != nil {
			ckErr = s.ck.Close()
		}
		if s.ixReady != nil {
			if x, _ := s.index(); x != nil {
				ixErr = x.close()
			}
		}
		s.closeErr = errors.Join(s.r.Close(), s.w.Close(), ckErr, ixErr)
	})
	return s.closeErr
}

func (s *Store) clock() time.Time { return s.now().UTC().Round(0) }

// writeTx runs fn in an IMMEDIATE transaction on the writer connection. It
// reports a commit as failed when the database file is gone or replaced
// (checkFile): the check is made once, after the commit, since what was
// written to a file gone before it went nowhere a reader will look, and
// each check is a stat (two were 4% of a lone writer's CPU).
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return classify("begin", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		var se *sqlitedrv.Error
		if errors.As(err, &se) && !errors.Is(err, store.ErrUnavailable) {
			return classify("write", err)
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		if ctx.Err() != nil {
			// database/sql rolled the transaction back as the context
			// ended: say so, not "transaction already rolled back".
			return fmt.Errorf("sqlite: commit: %w", ctx.Err())
		}
		return classify("commit", err)
	}
	s.committed()
	return s.checkFile()
}

// isUniqueViolation reports whether err is a UNIQUE constraint failure.
func isUniqueViolation(err error) bool {
	if err == nil {
		return false // without an allocation: every insert of an append asks
	}
	var se *sqlitedrv.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}
