package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	sqlitedrv "modernc.org/sqlite"
)

// The archive index (FTS5) lives in a file of its own beside the log, the
// log's path + "-index", written by a connection of its own: SQLite has one
// writer per file, and indexing in the log's file put FTS5's work
// (tokenizing, flushing segments, merging them) in the same critical section
// as every durable append, two fifths of the writer's time with 32 threads
// appending (BenchmarkDurableAppend/sqlite/32). In a file of its own the
// index moves on the other core while the log commits.
//
// The index is derived data. The log's file holds every message's index
// terms (events_terms, written in the append's transaction, as durable as
// the message); the index file holds the FTS5 index of the rows up to its
// mark (meta.upto), and the rows past it are the queue, moved in batches by
// the index's own writer (moveIndex). A search reads the index and the
// thread's queued rows beside it, or moves a long queue first (search.go).
// The index file is bound to its log (meta.log = the log's key): a missing
// file, another log's, one from a newer build, or one that claims rows the
// log never held (its mark past the log's highest id) is made again, empty,
// and the queue (every message) moves into it.
//
// Two files have no common transaction, so the rules that keep them
// consistent are these:
//   - An id is never used twice in a log (its highest id is kept in
//     archive_state.hw, which a delete raises before it deletes): an index
//     row can only ever name the message it was made from, so a row the
//     index kept of a deleted message matches nothing in the log (every
//     search joins the log's rows by id) and can never stand for another
//     tenant's message (I8).
//   - Rows are added in id order with the mark in the same transaction.
//     Since the log's ids are assigned by its one writer in commit order, a
//     snapshot of the log holds exactly the ids up to some n, and the rows
//     past the index's mark in it are exactly the ones the index lacks.
//   - DeleteThread removes the thread's indexed rows (with their terms,
//     which the log still holds, so that secure-delete takes them out of
//     the index's pages) and records the delete in the index file, in one
//     index transaction; then deletes from the log; then clears the record.
//     While the record is there, no move (of any process on the file)
//     indexes the thread's queued rows. A crash between the two leaves the
//     record: once it is stale (staleDelete), the next open or move puts
//     back the rows the log still holds (the delete did not happen), and a
//     finished delete has nothing to put back.

// indexVersion is the index file's schema version; a file at another is
// made again.
//
// Version 2 keeps, for each term of a row, the columns it is in and not its
// positions (detail=column): a search uses the index only to find its
// candidates (rows holding any of its terms, all of a phrase's words,
// search.go's ftsTerm) and counts their terms itself, phrases included, from
// the log. The postings FTS5 writes, flushes and merges lost their position
// lists: the index's writer moved the queue with a fifth less CPU
// (BenchmarkDurableAppend/sqlite/32, 40,000 messages, profiled twice each
// way), on the second core the log's writer shares.
//
// Version 3 keeps no columns either (detail=none): a row is one column, its
// scope's two tokens (indexScope) ahead of its terms, and the postings are
// rowids alone. The scope's tokens begin with "_", which FTS5 takes as a
// token character here (tokenchars) and which no term holds (IndexBody
// writes letters and digits only), so that no message's words can ever
// stand for a scope: a thread's search trusts the index for its scope
// (search.go). The index's writer moved the queue with a fifth less CPU
// (BenchmarkIndexMove, alternated with version 2).
//
// Its tokenizer is FTS5's ascii (indexTokenizer): a row's text is already
// IndexBody's terms, lowercased and split, and the ascii tokenizer splits
// it at the spaces only (it takes every byte past ASCII as a token's, and
// the terms hold no other ASCII than letters and digits), where unicode61
// looked up every character's class again: 13.8–16.2 against 14.6–17.1 µs
// of CPU a message moved (BenchmarkIndexMove, six alternated pairs, five
// of them ahead). The queries' terms come
// from the same IndexTerms, so they match byte for byte
// (FuzzIndexTokenizer checks the split).
const indexVersion = 3

// indexTokenizer is the index's FTS5 tokenizer (see indexVersion).
const indexTokenizer = `ascii tokenchars '_'`

const indexSchema = `
CREATE TABLE meta (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	version INTEGER NOT NULL,
	log     TEXT    NOT NULL,
	upto    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS lock (id INTEGER PRIMARY KEY);
CREATE TABLE deleting (
	tenant TEXT    NOT NULL,
	thread TEXT    NOT NULL,
	began  INTEGER NOT NULL,
	PRIMARY KEY (tenant, thread)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE events_fts USING fts5 (body, content = '', columnsize = 0, detail = none,
	tokenize = "` + indexTokenizer + `");
INSERT INTO events_fts (events_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO events_fts (events_fts, rank) VALUES ('automerge', 8);
`

// archiveIndex is the index file's connections.
type archiveIndex struct {
	path string
	w    *sql.DB // the index's writer (one connection); nil when the log is read-only
	r    *sql.DB // its readers
	// mu makes this process's index writes (moves, deletes) take turns, so
	// that no move indexes a thread's queued rows while a delete of that
	// thread is between its two files.
	mu sync.Mutex
}

// moveChunk is how many ids, and so at most how many queued rows, one
// index transaction moves.
var moveChunk int64 = 4096 // a variable for the tests

// openIndex opens the index file of the log at path (made again when it is
// not this log's, see above). logKey is the log's key, logHigh reads its
// highest id. With the log read-only, the index is only read, and nil when
// there is none to read.
func openIndex(ctx context.Context, path string, logKey string, logHigh func() (int64, error), readOnly bool, dsn func(...string) url.Values) (*archiveIndex, error) {
	x := &archiveIndex{path: path + "-index"}
	if readOnly {
		// Only read, if there is one to read and it is this log's: else
		// (or if it cannot be read) searches read the log.
		if _, err := os.Stat(x.path); err != nil {
			return nil, nil
		}
		r, err := sql.Open("sqlite", x.path+"?"+dsn("query_only(1)").Encode())
		if err != nil {
			return nil, nil
		}
		if ok, err := x.valid(ctx, r, logKey, logHigh); err != nil || !ok {
			r.Close()
			return nil, nil
		}
		x.r = r
		return x, nil
	}
	wdsn := x.path + "?" + dsn("journal_mode(WAL)").Encode()
	// The file made this log's first, on a connection without the log
	// attached: its IMMEDIATE transaction (prepare) would lock every
	// attached file, the log too.
	plain, err := sql.Open("sqlite", wdsn)
	if err != nil {
		return nil, err
	}
	plain.SetMaxOpenConns(1)
	err = x.prepare(ctx, plain, logKey, logHigh)
	plain.Close()
	if err != nil {
		return nil, err
	}
	// Then the writer, with the log attached read-only to each of its
	// connections (logAttached): the index reads its rows in SQL. Its
	// transactions are DEFERRED, each taking the index's lock by a first
	// write (begin), for the same reason.
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	c, err := sqlitedrv.NewConnector(wdsn)
	if err != nil {
		return nil, err
	}
	// A URI (file:///C:/... on Windows), for its mode.
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	w := sql.OpenDB(logAttached{Connector: c, log: (&url.URL{Scheme: "file", Path: p, RawQuery: "mode=ro"}).String()})
	w.SetMaxOpenConns(1) // the one connection, with the log attached
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, err
	}
	x.w = w
	r, err := sql.Open("sqlite", x.path+"?"+dsn("query_only(1)").Encode())
	if err != nil {
		w.Close()
		return nil, err
	}
	x.r = r
	return x, nil
}

// valid reports whether db holds this log's index at this build's version.
func (x *archiveIndex) valid(ctx context.Context, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, logKey string, logHigh func() (int64, error)) (bool, error) {
	var (
		version int
		key     string
		upto    int64
	)
	err := db.QueryRowContext(ctx, `SELECT version, log, upto FROM meta`).Scan(&version, &key, &upto)
	if err != nil {
		var n int
		if err2 := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'meta'`).Scan(&n); err2 == nil && n == 0 {
			return false, nil // a new file
		}
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return false, err
	}
	if version != indexVersion || key != logKey {
		return false, nil
	}
	// The log's highest id read after the index's mark: it only grows,
	// so a mark past it is one this log never reached.
	high, err := logHigh()
	if err != nil {
		return false, err
	}
	return upto <= high, nil
}

// logAttached opens the index writer's connections, each with the log
// attached read-only as "log" (at URI log). database/sql replaces a
// connection it drops (one whose statement a caller's context interrupted):
// attached once, the log went with it, and every later move failed.
type logAttached struct {
	driver.Connector
	log string
}

func (a logAttached) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := a.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := c.(driver.ExecerContext)
	if !ok {
		c.Close()
		return nil, errors.New("sqlite: index: the driver's connection cannot execute")
	}
	if _, err := ex.ExecContext(ctx, `ATTACH DATABASE ? AS log`, []driver.NamedValue{{Ordinal: 1, Value: a.log}}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// prepare makes the index file this log's, at this build's version, on db
// (a connection of the file without the log attached).
func (x *archiveIndex) prepare(ctx context.Context, db *sql.DB, logKey string, logHigh func() (int64, error)) error {
	// Every open but the first finds it so, with a read: no write, no
	// fsync on the way to a restarted thread's first window. A read that
	// fails (another process making the file) asks under the lock.
	if ok, err := x.valid(ctx, db, logKey, logHigh); err == nil && ok {
		return nil
	}
	// Under the file's lock from BEGIN IMMEDIATE, so that what it reads
	// is the latest: two processes opening a new file take turns, and the
	// second finds the first's index.
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = conn.ExecContext(context.Background(), `ROLLBACK`)
		}
	}()
	ok, err := x.valid(ctx, conn, logKey, logHigh)
	if err != nil {
		return err
	}
	if !ok {
		// Another log's, another version's, or new: made again, empty.
		for _, q := range []string{`DROP TABLE IF EXISTS events_fts`, `DROP TABLE IF EXISTS deleting`, `DROP TABLE IF EXISTS meta`, indexSchema} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO meta (id, version, log, upto) VALUES (1, ?, ?, 0)`, indexVersion, logKey); err != nil {
			return err
		}
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		return err
	}
	committed = true
	return nil
}

// mark returns the index's mark, 0 when it cannot be read (everything is
// then queued).
func (x *archiveIndex) mark(ctx context.Context) int64 {
	var n int64
	_ = x.r.QueryRowContext(ctx, `SELECT upto FROM meta`).Scan(&n)
	return n
}

// begin starts a write transaction of the index's writer, holding the
// index file's lock from its first statement (a write of a row that says
// nothing): a transaction that read first could not write after another
// process's commit (SQLITE_BUSY_SNAPSHOT), where one that waits for the
// lock first reads what that commit wrote.
func (x *archiveIndex) begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := x.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `REPLACE INTO lock (id) VALUES (1)`); err != nil {
		tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// upto returns the index's mark in tx.
func upto(ctx context.Context, tx *sql.Tx) (int64, error) {
	var n int64
	err := tx.QueryRowContext(ctx, `SELECT upto FROM meta`).Scan(&n)
	return n, err
}

// insertFTS adds a row to the log's own archive index, in the migrations
// before the index had a file of its own (schema.go).
const insertFTS = `INSERT INTO events_fts (rowid, scope, body) VALUES (?, ?, ?)`

// The log's rows as the index takes them, read in SQL from the log
// attached to the index's writer: moved past the mark (in id order) and
// put back, or taken out (a contentless FTS5 table is given a row's
// values to remove, and secure-delete overwrites them), a thread's up to
// a mark.
const (
	indexSource = `SELECT t.id, mneme_index_scope(e.tenant, e.thread) || t.terms
		FROM log.events_terms t JOIN log.events e ON e.id = t.id`
	moveRows = `INSERT INTO events_fts (rowid, body) ` + indexSource + `
		WHERE t.id > ? AND t.id <= ?
		AND NOT EXISTS (SELECT 1 FROM deleting d WHERE d.tenant = e.tenant AND d.thread = e.thread)
		ORDER BY t.id`
	threadSource = `SELECT t.id, mneme_index_scope(e.tenant, e.thread) || t.terms
		FROM log.events e JOIN log.events_terms t ON t.id = e.id
		WHERE e.tenant = ? AND e.thread = ? AND e.id <= ? ORDER BY e.id`
	putBack   = `INSERT INTO events_fts (rowid, body) ` + threadSource
	takeOut   = `INSERT INTO events_fts (events_fts, rowid, body) SELECT 'delete', * FROM (` + threadSource + `)`
	queueHigh = `SELECT COALESCE(max(id), 0) FROM log.events_terms`
)

// move moves the queue into the index, a chunk per transaction, and
// returns how many messages it moved.
func (x *archiveIndex) move(ctx context.Context) (int64, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.recoverLocked(ctx); err != nil {
		return 0, err
	}
	var moved int64
	for {
		n, more, err := x.moveChunk(ctx)
		moved += n
		if err != nil || !more {
			return moved, err
		}
	}
}

// moveChunk moves the queued rows of ids up to moveChunk past the mark,
// and reports whether more are queued past them. A chunk is a range of
// ids, not a count of rows, so that its end is one seek to the queue's
// last row: counting the chunk's rows read every page of the queue
// before the move read them again (a seventh of the move's CPU). Ids are
// given in commit order, so no row below the last one the transaction
// sees is committed after it.
func (x *archiveIndex) moveChunk(ctx context.Context) (moved int64, more bool, err error) {
	tx, err := x.begin(ctx)
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback()
	from, err := upto(ctx, tx)
	if err != nil {
		return 0, false, err
	}
	// The queue's end, in the transaction's snapshot of the log (which
	// its statements share).
	var high int64
	if err := tx.QueryRowContext(ctx, queueHigh).Scan(&high); err != nil || high <= from {
		return 0, false, err
	}
	to := min(high, from+moveChunk)
	res, err := tx.ExecContext(ctx, moveRows, from, to)
	if err != nil {
		return 0, false, err
	}
	moved, err = res.RowsAffected()
	if err != nil {
		return 0, false, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET upto = ?`, to); err != nil {
		return 0, false, err
	}
	return moved, to < high, tx.Commit()
}

// beginDelete takes the thread's indexed rows out of the index and records
// the delete under way; the caller deletes the thread from the log, then
// calls the returned end with the outcome. Between the two, this process
// writes nothing else to the index.
func (x *archiveIndex) beginDelete(ctx context.Context, tenant, thread string) (end func(deleted bool) error, err error) {
	x.mu.Lock()
	unlock := true
	defer func() {
		if unlock {
			x.mu.Unlock()
		}
	}()
	tx, err := x.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	mark, err := upto(ctx, tx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, takeOut, tenant, thread, mark); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO deleting (tenant, thread, began) VALUES (?, ?, ?)`, tenant, thread, time.Now().UnixNano()); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	unlock = false
	return func(deleted bool) error {
		defer x.mu.Unlock()
		// The store's, not the caller's: a canceled caller must not leave
		// the index without rows the log still holds.
		return x.endDelete(context.Background(), tenant, thread, deleted)
	}, nil
}

// endDelete clears a delete's record; when the log still holds the
// thread's rows (the delete failed, or a crash interrupted it), it first
// puts back the ones beginDelete took out.
func (x *archiveIndex) endDelete(ctx context.Context, tenant, thread string, deleted bool) error {
	tx, err := x.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM deleting WHERE tenant = ? AND thread = ?`, tenant, thread).Scan(&n); err != nil || n == 0 {
		return err
	}
	mark, err := upto(ctx, tx)
	if err != nil {
		return err
	}
	if !deleted {
		// Up to the index's mark now: the rows beginDelete took out, and
		// those a move (of any process) passed over while the delete was
		// recorded.
		if _, err := tx.ExecContext(ctx, putBack, tenant, thread, mark); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM deleting WHERE tenant = ? AND thread = ?`, tenant, thread); err != nil {
		return err
	}
	return tx.Commit()
}

// staleDelete is how old a recorded delete must be for a move or an open
// to take it for one a crash interrupted: one under way in another
// process on the file (a few milliseconds between its two transactions)
// must be left to finish.
var staleDelete = time.Minute

// recover finishes the deletes a crash interrupted: the rows the log still
// holds go back into the index (see above).
func (x *archiveIndex) recover(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.recoverLocked(ctx)
}

func (x *archiveIndex) recoverLocked(ctx context.Context) error {
	rows, err := x.w.QueryContext(ctx, `SELECT tenant, thread FROM deleting WHERE began <= ?`, time.Now().Add(-staleDelete).UnixNano())
	if err != nil {
		return err
	}
	var pending [][2]string
	for rows.Next() {
		var p [2]string
		if err := rows.Scan(&p[0], &p[1]); err != nil {
			rows.Close()
			return err
		}
		pending = append(pending, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, p := range pending {
		// What the log still holds of the thread was not deleted.
		if err := x.endDelete(ctx, p[0], p[1], false); err != nil {
			return err
		}
	}
	return nil
}

// match returns the ids of the index's rows that match expr, as a JSON
// array, and the mark up to which it holds the log's rows, both read in one
// snapshot of the index; check, given the mark, may refuse the index
// before the match runs.
func (x *archiveIndex) match(ctx context.Context, expr string, check func(mark int64) error) ([]byte, int64, error) {
	tx, err := x.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, 0, err
	}
	defer tx.Rollback()
	mark, err := upto(ctx, tx)
	if err != nil {
		return nil, 0, err
	}
	if err := check(mark); err != nil {
		return nil, 0, err
	}
	// A row past the mark (a move of another process's, not finished in
	// this snapshot, cannot be one; a row kept of a deleted message can)
	// is read from the queue instead.
	rows, err := tx.QueryContext(ctx, `SELECT rowid FROM events_fts WHERE events_fts MATCH ? AND rowid <= ? ORDER BY rowid`, expr, mark)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	out := append(make([]byte, 0, 256), '[')
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, 0, err
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = strconv.AppendInt(out, id, 10)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	return append(out, ']'), mark, nil
}

// checkpoint copies the index's WAL into its file and truncates it, as the
// log's checkpoint does after a delete.
func (x *archiveIndex) checkpoint(ctx context.Context) {
	if x.w != nil {
		_, _ = x.w.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	}
}

func (x *archiveIndex) close() error {
	var errs []error
	if x.r != nil {
		errs = append(errs, x.r.Close())
	}
	if x.w != nil {
		errs = append(errs, x.w.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqlite: index: %w", err)
	}
	return nil
}
