package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

// migrations are the schema versions, applied in order at Open, each in its
// own transaction and recorded in schema_migrations. Never edit a released
// migration: append a new one.
//
// Notes on the shape:
//   - events has an INTEGER PRIMARY KEY (a rowid alias) so that the FTS5
//     rowid that joins events_fts to it survives VACUUM; (tenant, thread,
//     seq) is the UNIQUE key the log is read by.
//   - refs are unique per tenant, not globally, so that a client-chosen ref
//     colliding with another tenant's tells it nothing (I8).
//   - times are UTC Unix nanoseconds; 0 is "never" for memories.expires.
//   - FTS5 secure-delete makes deleted rows' tokens leave the index pages
//     instead of lingering until the next merge.
//
// Migration 3 gives the archive index its scope column (tenant and thread
// tokens: search narrows inside the index) and indexes the archive and the
// memories by their terms (fulltext.IndexTerms: stems, possessives, names and
// dates); reindex, run in the same transaction, rebuilds both indexes from
// the rows.
//
// Migration 4 adds events_fts_pending, the queue of index terms an Append
// writes instead of events_fts (see log.go): rowid = events.id.
//
// Migration 5 makes the archive index contentless: a search reads each
// candidate's terms, and FTS5 read them from its own content table, one
// seek per candidate that cost as much as the match itself. Terms now live
// in events_terms (id = events.id), read directly, and written when a
// message is queued (a trigger on events_fts_pending, so that a small
// thread's search, which reads events_terms and not the index, sees every
// acknowledged message without waiting for the queue to move); events_fts
// keeps only the index (contentless_delete: rows are deleted by rowid). A
// trigger deletes the terms with their event. reindexTerms, in the same
// transaction, rebuilds both from the rows.
//
// Migration 6 gives events_fts its content back (the terms, as version 4
// had them), events_terms staying what searches read: a contentless
// FTS5 table deletes a row by marking its rowid, and the deleted thread's
// terms stayed in the index's pages until segments merged, while with its
// content FTS5 knows which entries to remove, and secure-delete overwrites
// them at once (DeleteThread leaves nothing behind). fillIndex, in the
// same transaction, indexes what events_terms holds but the queue.
//
// Migration 9 makes the archive index an external-content FTS5 table:
// it reads a row's terms from events_terms (through the view
// events_fts_src, which adds the scope) instead of keeping a third copy of
// every message's text beside the message and its terms; 10,000 agent
// messages took 40 MB instead of 57. Deleting a row from the index reads
// its terms from the view, so DeleteThread removes a thread's rows from
// the index before their terms, and only the rows up to the mark (a queued
// row was never added); secure-delete still overwrites them. columnsize=0
// drops the per-row column sizes, which only FTS5's own ranking (bm25)
// reads: searches count terms themselves (search.go). The migration
// indexes again every row up to the mark.
//
// Migration 10 counts deleted threads (events_fts_mark.deletes, in the
// row DeleteThread already writes): a search's cache of a thread's terms
// (search.go, postingsCache) keeps the count it was read under, and
// another count means the thread may have been deleted and made again,
// which its rows alone cannot always tell (under a stopped clock, with its
// last message's seq, reused id, caller-chosen ref and terms all equal).
//
// Migration 11 has FTS5 merge the archive index's segments 8 at a time
// (automerge, 4 by default): every merge rewrites the postings it merges,
// so with 8 a posting is rewritten log8 rather than log4 times as the index
// grows. Merging was a third of the index moves' CPU, in the writer's
// critical section (BenchmarkDurableAppend/sqlite/32, 20,000 messages:
// 0.15-0.17 s of merging at 4, 0.08-0.11 s at 8), and searches read up to
// seven segments a level instead of three without getting slower
// (BenchmarkSearch, BenchmarkScopedSearch side by side).
//
// Migration 13 lets the store make refs whose entries in the unique
// (tenant, ref) index go at its end (refs.go): a ref it made is a locator
// under a keyed permutation (archive_state.refkey; locators reserved in
// blocks, archive_state.locs); its ref column holds the locator's key, its
// made_ref column the ref. Refs it did not make stay in ref as they are.
// Rows written before keep theirs.
//
// Migration 12 moves the archive index into a file of its own beside the
// log (archive.go), made at the next open and filled from events_terms:
// the log keeps events_terms and, in archive_state (events_fts_mark
// renamed, without its mark, which the index file keeps), the count of
// deleted threads, the highest id it ever held (hw: ids are never given
// twice) and the key that binds an index file to this log.
//
// Migration 8 lists threads by active, updated truncated to the minute
// (activeBucket), instead of by updated: an append moved every thread's
// entry in threads_by_updated, a b-tree page more in every commit's WAL
// frames, where active moves at most once a minute (bumpThread leaves it
// out of its SET while the minute holds, and SQLite then leaves the index
// alone). Threads sorts each minute's few threads by updated.
//
// Migration 7 replaces the queue table by a mark (log.go): the queue is the
// events_terms rows past events_fts_mark.upto, and an Append writes the
// terms once, to events_terms, rather than to the queue and, by a trigger,
// to events_terms. The mark starts just below the first queued id: every
// row below it was indexed, since a queued row's id is larger than any
// indexed row's still in the table.
var migrations = []string{
	1: `
CREATE TABLE threads (
	tenant   TEXT    NOT NULL,
	id       TEXT    NOT NULL,
	created  INTEGER NOT NULL,
	updated  INTEGER NOT NULL,
	last_seq INTEGER NOT NULL,
	messages INTEGER NOT NULL DEFAULT 0,
	tokens   INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (tenant, id)
) WITHOUT ROWID;
CREATE INDEX threads_by_updated ON threads (tenant, updated DESC, id);

CREATE TABLE events (
	id      INTEGER PRIMARY KEY,
	tenant  TEXT    NOT NULL,
	thread  TEXT    NOT NULL,
	seq     INTEGER NOT NULL,
	kind    TEXT    NOT NULL,
	at      INTEGER NOT NULL,
	ref     TEXT,
	role    TEXT,
	tool    TEXT,
	tokens  INTEGER NOT NULL DEFAULT 0,
	message TEXT,
	data    TEXT,
	UNIQUE (tenant, thread, seq),
	UNIQUE (tenant, ref),
	FOREIGN KEY (tenant, thread) REFERENCES threads (tenant, id)
);

CREATE VIRTUAL TABLE events_fts USING fts5 (body, tokenize = 'unicode61 remove_diacritics 0');
INSERT INTO events_fts (events_fts, rank) VALUES ('secure-delete', 1);

CREATE TABLE memories (
	id        INTEGER PRIMARY KEY,
	tenant    TEXT    NOT NULL,
	namespace TEXT    NOT NULL,
	key       TEXT    NOT NULL,
	value     TEXT    NOT NULL,
	created   INTEGER NOT NULL,
	updated   INTEGER NOT NULL,
	expires   INTEGER NOT NULL DEFAULT 0,
	UNIQUE (tenant, namespace, key)
);
CREATE INDEX memories_by_updated ON memories (tenant, updated DESC);
CREATE INDEX memories_by_expiry ON memories (expires) WHERE expires > 0;

CREATE VIRTUAL TABLE memories_fts USING fts5 (body, tokenize = 'unicode61 remove_diacritics 0');
INSERT INTO memories_fts (memories_fts, rank) VALUES ('secure-delete', 1);
`,
	// 2: window snapshots (snapshot.go), derived from the log.
	2: `
CREATE TABLE snapshots (
	tenant TEXT    NOT NULL,
	thread TEXT    NOT NULL,
	seq    INTEGER NOT NULL,
	data   BLOB    NOT NULL,
	PRIMARY KEY (tenant, thread),
	FOREIGN KEY (tenant, thread) REFERENCES threads (tenant, id)
);
`,
	3: `
DROP TABLE events_fts;
CREATE VIRTUAL TABLE events_fts USING fts5 (scope, body, tokenize = 'unicode61 remove_diacritics 0');
INSERT INTO events_fts (events_fts, rank) VALUES ('secure-delete', 1);
DELETE FROM memories_fts;
`,
	// 4: the archive index's queue (log.go, indexPending): a group commit
	// writes its messages' index terms here, and they move into events_fts
	// in batches, before any search reads the index.
	4: `
CREATE TABLE events_fts_pending (
	id    INTEGER PRIMARY KEY,
	scope TEXT NOT NULL,
	body  TEXT NOT NULL
);
`,
	5: `
DROP TABLE events_fts;
DELETE FROM events_fts_pending;
CREATE VIRTUAL TABLE events_fts USING fts5 (scope, body, content = '', contentless_delete = 1,
	tokenize = 'unicode61 remove_diacritics 0');
INSERT INTO events_fts (events_fts, rank) VALUES ('secure-delete', 1);
CREATE TABLE events_terms (
	id    INTEGER PRIMARY KEY,
	terms TEXT NOT NULL
);
CREATE TRIGGER events_terms_queued AFTER INSERT ON events_fts_pending BEGIN
	INSERT INTO events_terms (id, terms) VALUES (new.id, new.body);
END;
CREATE TRIGGER events_terms_delete AFTER DELETE ON events BEGIN
	DELETE FROM events_terms WHERE id = old.id;
END;
`,
	6: `
DROP TABLE events_fts;
CREATE VIRTUAL TABLE events_fts USING fts5 (scope, body, tokenize = 'unicode61 remove_diacritics 0');
INSERT INTO events_fts (events_fts, rank) VALUES ('secure-delete', 1);
`,
	7: `
CREATE TABLE events_fts_mark (
	id   INTEGER PRIMARY KEY CHECK (id = 1),
	upto INTEGER NOT NULL
);
INSERT INTO events_fts_mark (id, upto) VALUES (1, COALESCE(
	(SELECT min(id) - 1 FROM events_fts_pending),
	(SELECT max(id) FROM events_terms),
	0));
DROP TRIGGER events_terms_queued;
DROP TABLE events_fts_pending;
`,
	8: `
ALTER TABLE threads ADD COLUMN active INTEGER NOT NULL DEFAULT 0;
UPDATE threads SET active = updated - updated % 60000000000;
DROP INDEX threads_by_updated;
CREATE INDEX threads_by_active ON threads (tenant, active DESC);
`,
	9: `
DROP TABLE events_fts;
CREATE VIEW events_fts_src (id, scope, body) AS
	SELECT t.id, mneme_scope(e.tenant, e.thread), t.terms FROM events_terms t JOIN events e ON e.id = t.id;
CREATE VIRTUAL TABLE events_fts USING fts5 (scope, body, content = 'events_fts_src', content_rowid = 'id',
	columnsize = 0, tokenize = 'unicode61 remove_diacritics 0');
INSERT INTO events_fts (events_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO events_fts (rowid, scope, body)
	SELECT id, scope, body FROM events_fts_src WHERE id <= (SELECT upto FROM events_fts_mark) ORDER BY id;
`,
	10: `
ALTER TABLE events_fts_mark ADD COLUMN deletes INTEGER NOT NULL DEFAULT 0;
`,
	11: `
INSERT INTO events_fts (events_fts, rank) VALUES ('automerge', 8);
`,
	12: `
DROP TABLE events_fts;
DROP VIEW events_fts_src;
ALTER TABLE events_fts_mark RENAME TO archive_state;
ALTER TABLE archive_state DROP COLUMN upto;
ALTER TABLE archive_state ADD COLUMN hw INTEGER NOT NULL DEFAULT 0;
ALTER TABLE archive_state ADD COLUMN key TEXT NOT NULL DEFAULT '';
UPDATE archive_state SET hw = COALESCE((SELECT max(id) FROM events), 0), key = lower(hex(randomblob(16)));
`,
	13: `
ALTER TABLE events ADD COLUMN made_ref TEXT;
ALTER TABLE archive_state ADD COLUMN refkey TEXT NOT NULL DEFAULT '';
ALTER TABLE archive_state ADD COLUMN locs INTEGER NOT NULL DEFAULT 0;
UPDATE archive_state SET refkey = lower(hex(randomblob(16)));
`,
}

// goMigrations are the steps of a migration done in Go, after its SQL, in
// its transaction.
var goMigrations = map[int]func(context.Context, *sql.Tx) error{
	3: reindex,
	5: reindexTerms,
	6: fillIndex,
}

// SchemaVersion is the schema version this build writes.
const SchemaVersion = 13

func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied INTEGER NOT NULL)`); err != nil {
		return err
	}
	// A file at this build's version, the common case (every restart),
	// is checked by one read instead of a write transaction a version.
	var n, have int
	if err := db.QueryRowContext(ctx, `SELECT count(*), COALESCE(max(version), 0) FROM schema_migrations`).Scan(&n, &have); err != nil {
		return err
	}
	if n == SchemaVersion && have == SchemaVersion {
		return nil
	}
	for v := 1; v < len(migrations); v++ {
		if err := applyMigration(ctx, db, v); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
	}
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return err
	}
	if have > SchemaVersion {
		return fmt.Errorf("database schema version %d is newer than this build's %d", have, SchemaVersion)
	}
	return nil
}

// applyMigration applies version v unless it is recorded; the IMMEDIATE
// transaction makes two processes opening a new file at once take turns.
func applyMigration(ctx context.Context, db *sql.DB, v int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, v).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
		return err
	}
	if step := goMigrations[v]; step != nil {
		if err := step(ctx, tx); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied) VALUES (?, ?)`, v, time.Now().UnixNano()); err != nil {
		return err
	}
	return tx.Commit()
}

// indexRow is a stored message as the archive index takes it.
type indexRow struct {
	id             int64
	tenant, thread string
	body           string
}

// indexRows reads every stored message's index body, in id order; the
// rows are read whole before the caller writes, on the same transaction.
func indexRows(ctx context.Context, tx *sql.Tx) ([]indexRow, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, tenant, thread, at, message FROM events WHERE message IS NOT NULL ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var batch []indexRow
	for rows.Next() {
		var (
			r  indexRow
			at int64
			js string
		)
		if err := rows.Scan(&r.id, &r.tenant, &r.thread, &at, &js); err != nil {
			return nil, err
		}
		m, err := backend.DecodeMessage(js)
		if err != nil {
			return nil, fmt.Errorf("event %d: stored message: %w", r.id, err)
		}
		r.body = fulltext.IndexMessage(*m, backend.FromNanos(at))
		batch = append(batch, r)
	}
	return batch, rows.Err()
}

// reindex fills the (emptied) archive and memory indexes from the rows.
func reindex(ctx context.Context, tx *sql.Tx) error {
	batch, err := indexRows(ctx, tx)
	if err != nil {
		return err
	}
	ins, err := tx.PrepareContext(ctx, insertFTS)
	if err != nil {
		return err
	}
	defer ins.Close()
	for _, r := range batch {
		if _, err := ins.ExecContext(ctx, r.id, scopeTerms(r.tenant, r.thread), r.body); err != nil {
			return err
		}
	}
	mrows, err := tx.QueryContext(ctx, `SELECT id, key, value FROM memories`)
	if err != nil {
		return err
	}
	defer mrows.Close()
	type mem struct {
		id   int64
		body string
	}
	var mems []mem
	for mrows.Next() {
		var (
			m          mem
			key, value string
		)
		if err := mrows.Scan(&m.id, &key, &value); err != nil {
			return err
		}
		m.body = fulltext.IndexBody(backend.MemoryText(key, json.RawMessage(value)))
		mems = append(mems, m)
	}
	if err := mrows.Err(); err != nil {
		return err
	}
	mrows.Close()
	for _, m := range mems {
		if _, err := tx.ExecContext(ctx, `INSERT INTO memories_fts (rowid, body) VALUES (?, ?)`, m.id, m.body); err != nil {
			return err
		}
	}
	return nil
}

// reindexTerms fills the (emptied) archive index and events_terms from the
// rows.
func reindexTerms(ctx context.Context, tx *sql.Tx) error {
	batch, err := indexRows(ctx, tx)
	if err != nil {
		return err
	}
	fts, err := tx.PrepareContext(ctx, insertFTS)
	if err != nil {
		return err
	}
	defer fts.Close()
	terms, err := tx.PrepareContext(ctx, `INSERT INTO events_terms (id, terms) VALUES (?, ?)`)
	if err != nil {
		return err
	}
	defer terms.Close()
	for _, r := range batch {
		if _, err := fts.ExecContext(ctx, r.id, scopeTerms(r.tenant, r.thread), r.body); err != nil {
			return err
		}
		if _, err := terms.ExecContext(ctx, r.id, r.body); err != nil {
			return err
		}
	}
	return nil
}

// fillIndex fills the (new, empty) archive index from events_terms, but
// for the messages still queued (the queue moves them).
func fillIndex(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT t.id, e.tenant, e.thread, t.terms FROM events_terms t JOIN events e ON e.id = t.id
		WHERE t.id NOT IN (SELECT id FROM events_fts_pending) ORDER BY t.id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	type row struct {
		id             int64
		tenant, thread string
		body           string
	}
	var batch []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.tenant, &r.thread, &r.body); err != nil {
			return err
		}
		batch = append(batch, r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows.Close()
	ins, err := tx.PrepareContext(ctx, insertFTS)
	if err != nil {
		return err
	}
	defer ins.Close()
	for _, r := range batch {
		if _, err := ins.ExecContext(ctx, r.id, scopeTerms(r.tenant, r.thread), r.body); err != nil {
			return err
		}
	}
	return nil
}
