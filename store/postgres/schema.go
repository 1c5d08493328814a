package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

// migrations are the schema versions, applied in order at Open, each in its
// own transaction and recorded in schema_migrations, all under one advisory
// lock so that replicas starting together take turns. Never edit a released
// migration: append a new one.
//
// Notes on the shape:
//   - ids are COLLATE "C": byte order, as in Go and SQLite, so that paging
//     cursors and namespace prefix ranges (elements end in \x1f) mean the
//     same under any database locale;
//   - times are UTC Unix nanoseconds in bigints (timestamptz keeps only
//     microseconds); 0 is "never" for memories.expires. Leases alone use
//     timestamptz: they are compared with the database's clock;
//   - terms is a tsvector literal built in Go from fulltext.Tokenize (see
//     search.go), tsv its generated, GIN-indexed value; lossy says how far
//     tsv can be trusted for a document too large to index exactly;
//   - refs are unique per tenant, not globally (as in SQLite: a colliding
//     client-chosen ref tells nothing about another tenant);
//   - vectors reference their event, so deleting events deletes them.
//
// Migration 2 gives vectors the embedder's model (store.Vectors: vectors of
// different models never meet). Vectors written before it have no model to
// attribute them to, so they are dropped: the background indexer embeds
// their events again. (Before it, no caller could write them through
// store.Vectors.)
//
// Migration 4 indexes events and memories by their terms (fulltext.IndexTerms:
// stems, possessives, names and dates) and gives events their scope
// lexemes (search narrows inside the GIN index); reindex, run in the same
// transaction, rewrites every terms column.
//
// Migration 5 lightens every append (issue 19: the server's CPU per
// message). Rows stay uncompressed up to 8 KB (toast_tuple_target): a
// message's row (its JSON, terms and tsvector) is often just over the
// default 2 KB, and compressing it with pglz was 7% of the server's CPU of
// an append. The events' foreign key to threads goes: its check was 5%,
// and what it guarded is how events are written. An append inserts events
// only in the statement (or transaction) that moved or created the
// thread's row from the seq it expected, and DeleteThread deletes the
// events and then the row in one transaction holding the row's lock, so
// an append waiting for that lock finds no row to move and writes nothing.
//
// Migration 6 lets an append's update of its thread's row be a HOT update
// (issue 19): no new entry in any index of threads, the row's new version
// on its page. The threads were listed by an index on their updated time,
// which every append moves, so every append wrote a new entry in that
// index and in the primary key, and the lookups of the next appends walked
// the dead ones. They are listed now by active, updated truncated to the
// minute (activeBucket), which an append moves at most once a minute, then
// sorted by updated within the minute (an incremental sort of the threads
// active in it). Pages keep room for the updated rows (fillfactor 70).
//
// Migration 7 makes the events' tsv a column of its own, written beside
// terms with the same value in binary form (appendTSVector), instead of
// generated from terms: the server parsing the literal of every message
// was 12% of its CPU of an append (issue 19). Every write of terms writes
// tsv (log.go); a row written without it (by a replica of an older build,
// still running beside a newer one that migrated) or whose terms change
// alone gets it from terms, by trigger. TestTSVectorIsTerms checks each
// path.
var migrations = []string{
	1: `
CREATE TABLE threads (
	tenant   text COLLATE "C" NOT NULL,
	id       text COLLATE "C" NOT NULL,
	created  bigint NOT NULL,
	updated  bigint NOT NULL,
	last_seq bigint NOT NULL,
	messages bigint NOT NULL DEFAULT 0,
	tokens   bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (tenant, id)
);
CREATE INDEX threads_by_updated ON threads (tenant, updated DESC, id);

CREATE TABLE events (
	tenant  text COLLATE "C" NOT NULL,
	thread  text COLLATE "C" NOT NULL,
	seq     bigint   NOT NULL,
	kind    text     NOT NULL,
	at      bigint   NOT NULL,
	ref     text COLLATE "C",
	role    text,
	tool    text,
	tokens  integer  NOT NULL DEFAULT 0,
	message text,
	data    text,
	terms   text     NOT NULL DEFAULT '',
	lossy   smallint NOT NULL DEFAULT 0,
	tsv     tsvector GENERATED ALWAYS AS (terms::tsvector) STORED,
	CONSTRAINT events_pkey PRIMARY KEY (tenant, thread, seq),
	CONSTRAINT events_tenant_ref_key UNIQUE (tenant, ref),
	FOREIGN KEY (tenant, thread) REFERENCES threads (tenant, id)
);
CREATE INDEX events_tsv ON events USING gin (tsv);
CREATE INDEX events_lossy ON events (tenant) WHERE lossy > 0;

CREATE TABLE memories (
	tenant    text COLLATE "C" NOT NULL,
	namespace text COLLATE "C" NOT NULL,
	key       text COLLATE "C" NOT NULL,
	value     text     NOT NULL,
	created   bigint   NOT NULL,
	updated   bigint   NOT NULL,
	expires   bigint   NOT NULL DEFAULT 0,
	terms     text     NOT NULL DEFAULT '',
	lossy     smallint NOT NULL DEFAULT 0,
	tsv       tsvector GENERATED ALWAYS AS (terms::tsvector) STORED,
	PRIMARY KEY (tenant, namespace, key)
);
CREATE INDEX memories_by_updated ON memories (tenant, updated DESC);
CREATE INDEX memories_by_expiry ON memories (tenant, expires) WHERE expires > 0;
CREATE INDEX memories_tsv ON memories USING gin (tsv);
CREATE INDEX memories_lossy ON memories (tenant) WHERE lossy > 0;

CREATE TABLE vectors (
	tenant text COLLATE "C" NOT NULL,
	ref    text COLLATE "C" NOT NULL,
	thread text COLLATE "C" NOT NULL,
	seq    bigint  NOT NULL,
	dims   integer NOT NULL,
	norm   double precision NOT NULL,
	v      real[]  NOT NULL,
	PRIMARY KEY (tenant, ref),
	FOREIGN KEY (tenant, ref) REFERENCES events (tenant, ref) ON DELETE CASCADE
);
CREATE INDEX vectors_by_thread ON vectors (tenant, thread);

CREATE TABLE leases (
	tenant  text COLLATE "C" NOT NULL,
	thread  text COLLATE "C" NOT NULL,
	name    text COLLATE "C" NOT NULL,
	owner   text NOT NULL,
	expires timestamptz NOT NULL,
	PRIMARY KEY (tenant, thread, name)
);
`,
	2: `
DELETE FROM vectors;
ALTER TABLE vectors ADD COLUMN model text COLLATE "C" NOT NULL;
CREATE INDEX vectors_by_model ON vectors (tenant, model, dims, thread);
`,
	// 3: window snapshots (snapshot.go), derived from the log.
	3: `
CREATE TABLE snapshots (
	tenant text COLLATE "C" NOT NULL,
	thread text COLLATE "C" NOT NULL,
	seq    bigint NOT NULL,
	data   bytea  NOT NULL,
	PRIMARY KEY (tenant, thread),
	FOREIGN KEY (tenant, thread) REFERENCES threads (tenant, id)
);
`,
	4: `SELECT 1`,
	5: `
ALTER TABLE events SET (toast_tuple_target = 8160);
ALTER TABLE events DROP CONSTRAINT events_tenant_thread_fkey;
`,
	6: `
ALTER TABLE threads SET (fillfactor = 70);
ALTER TABLE threads ADD COLUMN active bigint GENERATED ALWAYS AS (updated - updated % 60000000000) STORED;
DROP INDEX threads_by_updated;
CREATE INDEX threads_by_active ON threads (tenant, active DESC);
`,
	7: `
ALTER TABLE events ALTER COLUMN tsv DROP EXPRESSION;
CREATE FUNCTION events_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.tsv := NEW.terms::tsvector;
	RETURN NEW;
END $$;
CREATE TRIGGER events_tsv_insert BEFORE INSERT ON events
	FOR EACH ROW WHEN (NEW.tsv IS NULL) EXECUTE FUNCTION events_tsv();
CREATE TRIGGER events_tsv_update BEFORE UPDATE OF terms ON events
	FOR EACH ROW WHEN (NEW.terms IS DISTINCT FROM OLD.terms AND NEW.tsv IS NOT DISTINCT FROM OLD.tsv)
	EXECUTE FUNCTION events_tsv();
`,
}

// activeBucket is the width of the threads' active column (migration 6),
// in nanoseconds.
const activeBucket = 60_000_000_000

// goMigrations are the steps of a migration done in Go, after its SQL, in
// its transaction.
var goMigrations = map[int]func(context.Context, pgx.Tx) error{
	4: reindex,
}

// SchemaVersion is the schema version this build writes.
const SchemaVersion = 7

// migrate brings the schema (the first schema of the connection's
// search_path) to SchemaVersion. A session advisory lock, keyed by the
// schema's name, serialises concurrent Opens: the second waits for the first
// and then finds every migration recorded.
func migrate(ctx context.Context, pool *pgxpool.Pool) (err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	const key = `hashtextextended('mneme.migrate:' || current_schema(), 0)`
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(`+key+`)`); err != nil {
		return err
	}
	defer func() {
		// Unlock with a context of its own: ctx may be what failed.
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(`+key+`)`); uerr != nil {
			conn.Conn().Close(context.WithoutCancel(ctx)) // closing the session drops the lock
			err = errors.Join(err, uerr)
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY,
		applied timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	var have int
	if err := conn.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return err
	}
	if have > SchemaVersion {
		return fmt.Errorf("database schema version %d is newer than this build's %d", have, SchemaVersion)
	}
	for v := have + 1; v < len(migrations); v++ {
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return err
			}
			if step := goMigrations[v]; step != nil {
				if err := step(ctx, tx); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, v)
			return err
		}); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
	}
	return nil
}

// reindex rewrites the terms of every message event and memory.
func reindex(ctx context.Context, tx pgx.Tx) error {
	type ev struct {
		tenant, thread string
		seq            int64
		terms          string
		lossy          int16
	}
	rows, err := tx.Query(ctx, `SELECT tenant, thread, seq, at, message FROM events WHERE message IS NOT NULL`)
	if err != nil {
		return err
	}
	var evs []ev
	for rows.Next() {
		var (
			e  ev
			at int64
			js string
		)
		if err := rows.Scan(&e.tenant, &e.thread, &e.seq, &at, &js); err != nil {
			rows.Close()
			return err
		}
		var m message.Message
		if err := json.Unmarshal([]byte(js), &m); err != nil {
			rows.Close()
			return fmt.Errorf("event %s/%d: stored message: %w", e.thread, e.seq, err)
		}
		r := row{msg: &m}
		r.terms, e.lossy = indexTerms(fulltext.SearchText(m, backend.FromNanos(at)))
		e.terms = r.indexed(e.tenant, e.thread)
		evs = append(evs, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	b := &pgx.Batch{}
	for _, e := range evs {
		b.Queue(`UPDATE events SET terms = $4, lossy = $5 WHERE tenant = $1 AND thread = $2 AND seq = $3`, e.tenant, e.thread, e.seq, e.terms, e.lossy)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	type mem struct {
		tenant, namespace, key string
		terms                  string
		lossy                  int16
	}
	mrows, err := tx.Query(ctx, `SELECT tenant, namespace, key, value FROM memories`)
	if err != nil {
		return err
	}
	var mems []mem
	for mrows.Next() {
		var (
			m     mem
			value string
		)
		if err := mrows.Scan(&m.tenant, &m.namespace, &m.key, &value); err != nil {
			mrows.Close()
			return err
		}
		m.terms, m.lossy = indexTerms(backend.MemoryText(m.key, json.RawMessage(value)))
		mems = append(mems, m)
	}
	mrows.Close()
	if err := mrows.Err(); err != nil {
		return err
	}
	b = &pgx.Batch{}
	for _, m := range mems {
		b.Queue(`UPDATE memories SET terms = $4, lossy = $5 WHERE tenant = $1 AND namespace = $2 AND key = $3`, m.tenant, m.namespace, m.key, m.terms, m.lossy)
	}
	return tx.SendBatch(ctx, b).Close()
}
