package postgres

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

var be = binary.BigEndian

// row is an event encoded for insertion, outside any transaction.
type row struct {
	ev    store.Event // Message nil
	msg   *message.Message
	json  *string
	data  *string
	terms string
	lossy int16
	tool  *string
	// tsv is terms' tsvector entries in binary form, lexemes their
	// number and lexemeBytes their lexemes' bytes (builtTerms).
	tsv                  []byte
	lexemes, lexemeBytes int
}

// encode validates an event and encodes it for insertion as seq.
func encode(ev store.Event, seq int64, now time.Time) (row, error) {
	if err := backend.CheckEvent(ev); err != nil {
		return row{}, err
	}
	r := row{ev: ev, msg: ev.Message}
	r.ev.Seq = seq
	r.ev.Message = nil
	if r.ev.At.IsZero() {
		r.ev.At = now
	}
	r.ev.At = r.ev.At.UTC().Round(0)
	if r.msg != nil {
		if r.ev.Ref == "" {
			r.ev.Ref = store.NewRef()
		}
		js, err := backend.EncodeMessage(r.msg)
		if err != nil {
			return row{}, err
		}
		r.json = &js
		t := buildTerms(fulltext.SearchText(*r.msg, r.ev.At), true)
		r.terms, r.lossy, r.tsv, r.lexemes, r.lexemeBytes = t.lit, t.lossy, t.bin, t.lexemes, t.bytes
	}
	if len(ev.Data) > 0 {
		d := string(ev.Data)
		r.data = &d
		r.ev.Data = append(json.RawMessage(nil), ev.Data...)
	}
	return r, nil
}

func (r row) role() *string {
	if r.msg == nil {
		return nil
	}
	s := string(r.msg.Role)
	return &s
}

func (r row) ref() *string {
	if r.ev.Ref == "" {
		return nil
	}
	return &r.ev.Ref
}

// values are the row's columns in insertCols order.
func (r row) values(tenant, thread string) []any {
	return []any{tenant, thread, r.ev.Seq, string(r.ev.Kind), backend.Nanos(r.ev.At), r.ref(), r.role(), r.tool,
		r.ev.Tokens, r.json, r.data, r.indexed(tenant, thread), r.lossy}
}

var insertCols = []string{"tenant", "thread", "seq", "kind", "at", "ref", "role", "tool", "tokens", "message", "data", "terms", "lossy", "tsv"}

const insertEvent = `INSERT INTO events (tenant, thread, seq, kind, at, ref, role, tool, tokens, message, data, terms, lossy, tsv)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $12::tsvector)`

// copyThreshold is the batch size from which COPY beats a pipelined batch
// of INSERTs.
const copyThreshold = 64

// Append implements store.Log. Appends of fewer than copyThreshold events
// are group-committed: concurrent ones (on this replica) share one
// transaction, sent as one pipelined batch, and so one WAL flush; each still
// returns only once its events are durable (I1). Each is one statement that
// moves the thread's row only from the expected last seq and inserts the
// events only if it did, so a conflicting append fails alone. Larger
// appends take a transaction of their own and COPY.
func (s *Store) Append(ctx context.Context, tenant, thread string, after int64, evs []store.Event) ([]store.Event, error) {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return nil, err
	}
	if after < 0 {
		return nil, fmt.Errorf("%w: negative after", store.ErrInvalid)
	}
	if len(evs) > 0 && len(evs) < copyThreshold {
		// A group being committed meanwhile waits for this one.
		defer s.group.Expect()()
	}
	now := s.clock()
	rows := make([]row, len(evs))
	for i, ev := range evs {
		r, err := encode(ev, after+int64(i)+1, now)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		rows[i] = r
	}
	var err error
	gen := s.calls.Gen()
	if len(rows) == 0 || len(rows) >= copyThreshold {
		err = s.inTx(ctx, "append", func(tx pgx.Tx) error {
			if err := lockTail(ctx, tx, tenant, thread, after, len(rows) > 0, now); err != nil {
				return err
			}
			if len(rows) == 0 {
				return nil
			}
			return insertRows(ctx, tx, &s.calls, tenant, thread, after, rows, now, false)
		})
	} else {
		// Outside the group's transaction: tool names (read from what is
		// committed up to after, which the caller has seen) and the
		// statement's arguments.
		resolveTools(ctx, s.pool, &s.calls, tenant, thread, after, rows)
		if err = ctx.Err(); err == nil {
			err = s.group.Do(newAppendReq(tenant, thread, after, rows, now), s.commitGroup)
		}
	}
	if err != nil {
		return nil, err
	}
	s.calls.Remember(gen, tenant, thread, after, func(yield func(*message.Message) bool) {
		for _, r := range rows {
			if !yield(r.msg) {
				return
			}
		}
	})
	out := make([]store.Event, len(rows))
	for i, r := range rows {
		out[i] = r.ev
		if r.json != nil {
			// Return what a Load will return, not the caller's pointer
			// (a copy standing for decoding r.json back).
			m, err := backend.NormalizeMessage(r.msg)
			if err != nil {
				return nil, fmt.Errorf("postgres: append: %w", err)
			}
			out[i].Message = m
		}
	}
	return out, nil
}

// groupSQL appends a group of requests in one statement, one execution
// for the whole group however many requests it holds. r lists the
// requests; each moves its thread's row from its expected last seq
// (moved), or creates it when that seq is 0 (created: the first of the
// group's creators of one thread), and only the requests that did (won)
// insert their events. The statement returns the won requests: any other
// is a conflict. Under READ COMMITTED a concurrent mover makes the UPDATE
// wait, then re-check last_seq; a concurrent creator makes the INSERT
// wait, then do nothing. Ids are compared in the columns' "C" collation.
// The events' arrays are unnested in a select list (a ProjectSet, which
// yields their rows one at a time), not in FROM: a function scan stores
// every row in a tuplestore first, a copy of each message, its terms and
// its tsvector (a tenth of what the insert's indexes cost the server).
var groupSQL = `WITH r AS (
	SELECT tenant COLLATE "C" AS tenant, thread COLLATE "C" AS thread, after, n, msgs, tokens, req, now
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::int[], $8::bigint[])
		AS u(tenant, thread, after, n, msgs, tokens, req, now)
), moved AS (
	UPDATE threads t SET last_seq = r.after + r.n, updated = GREATEST(t.updated, r.now),
		messages = t.messages + r.msgs, tokens = t.tokens + r.tokens
	FROM r
	WHERE t.tenant = r.tenant AND t.id = r.thread AND t.last_seq = r.after AND r.after > 0
	RETURNING r.req
), created AS (
	INSERT INTO threads (tenant, id, created, updated, last_seq, messages, tokens)
	SELECT DISTINCT ON (tenant, thread) tenant, thread, now, now, n, msgs, tokens
	FROM r WHERE after = 0 ORDER BY tenant, thread, req
	ON CONFLICT DO NOTHING
	RETURNING tenant, id
), won AS (
	SELECT req FROM moved
	UNION ALL
	SELECT min(r.req) FROM created c JOIN r ON r.tenant = c.tenant AND r.thread = c.id AND r.after = 0
	GROUP BY c.tenant, c.id
), ins AS (
` + insertGroupEvents("r.tenant, r.thread") + `
	JOIN r ON r.req = e.req
	WHERE e.req IN (SELECT req FROM won)
)
SELECT req FROM won`

// insertGroupEvents is the events' insert both group statements end
// with, from their arrays ($9 to $21), each event's thread named by
// thread (the columns of the request it joins).
func insertGroupEvents(thread string) string {
	return `INSERT INTO events (tenant, thread, seq, kind, at, ref, role, tool, tokens, message, data, terms, lossy, tsv)
	SELECT ` + thread + `, e.seq, e.kind, e.at, e.ref, e.role, e.tool, e.tokens, e.message, e.data, e.terms, e.lossy, e.tsv
	FROM (SELECT unnest($9::int[]) AS req, unnest($10::bigint[]) AS seq, unnest($11::text[]) AS kind,
		unnest($12::bigint[]) AS at, unnest($13::text[]) AS ref, unnest($14::text[]) AS role,
		unnest($15::text[]) AS tool, unnest($16::int[]) AS tokens, unnest($17::text[]) AS message,
		unnest($18::text[]) AS data, unnest($19::text[]) AS terms, unnest($20::smallint[]) AS lossy,
		unnest($21::tsvector[]) AS tsv) e`
}

// groupMoveSQL is groupSQL for a group whose requests all append to
// threads that exist (no after is 0), as nearly every group does: without
// the threads' insert the statement has fewer plan nodes, and the server
// sets them all up at each execution (a fifth of its CPU of a
// one-message group). It takes groupSQL's arguments and answers as it
// does: UPDATE ... FROM moves a thread's row once however many requests
// name it, and returns the one request that did.
var groupMoveSQL = `WITH moved AS (
	UPDATE threads t SET last_seq = r.after + r.n, updated = GREATEST(t.updated, r.now),
		messages = t.messages + r.msgs, tokens = t.tokens + r.tokens
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::int[], $8::bigint[])
		AS r(tenant, thread, after, n, msgs, tokens, req, now)
	WHERE t.tenant = r.tenant COLLATE "C" AND t.id = r.thread COLLATE "C" AND t.last_seq = r.after AND r.after > 0
	RETURNING r.req, t.tenant, t.id
), ins AS (
` + insertGroupEvents("m.tenant, m.id") + `
	JOIN moved m ON m.req = e.req
)
SELECT req FROM moved`

// appendReq is one Append waiting in a group: its thread's move and its
// events, built before it queues.
type appendReq struct {
	tenant, thread string
	after          int64
	msgs, tokens   int64 // the thread's counters move by these
	now            int64 // the thread's updated time (Nanos)
	rows           []row // its events
	// scope is the scope lexemes of its messages, the thread's then the
	// tenant's (indexed).
	scope [2]string

	backend.GroupMember // its outcome, set by commitGroup
}

// newAppendReq builds the request for rows, outside the group's commit.
// The request keeps rows (encodeGroup reads them column by column) until
// its group has committed.
func newAppendReq(tenant, thread string, after int64, rows []row, now time.Time) *appendReq {
	r := &appendReq{tenant: tenant, thread: thread, after: after, now: backend.Nanos(now), rows: rows}
	for i := range rows {
		if w := &rows[i]; w.msg != nil {
			r.msgs++
			r.tokens += int64(w.ev.Tokens)
		}
	}
	if r.msgs > 0 {
		r.scope = [2]string{threadLexeme(tenant, thread), tenantLexeme(tenant)}
	}
	return r
}

// commitGroup appends batch in one statement (groupSQL or groupMoveSQL), in the implicit
// transaction of its one round trip, committed, and so durable, before
// its result is read to the end. A failed statement (a ref already used,
// bytes the database refuses, a deadlock with another replica's group)
// fails the whole group: then each request is retried alone, so that the
// error stays its own.
func (s *Store) commitGroup(batch []*appendReq) {
	// The transaction is the group's: no caller's cancellation may abort
	// the others.
	ctx := context.Background()
	n := len(batch)
	won := make([]bool, n)
	args := getGroupArgs()
	err := s.execGroup(ctx, batch, args, won)
	pending := args.pending
	args.put()
	if err == nil {
		s.cleaner.note(s, pending)
	}
	if err != nil && n > 1 {
		for _, r := range batch {
			s.commitGroup([]*appendReq{r})
		}
		return
	}
	for i, r := range batch {
		switch {
		case err != nil:
			r.Err = err
		case !won[i]:
			r.Err = fmt.Errorf("%w: last seq is not %d", store.ErrConflict, r.after)
		}
	}
}

// Names of groupSQL and groupMoveSQL prepared on a connection.
const (
	groupStmt     = "mneme_append_group"
	groupMoveStmt = "mneme_append_move"
)

// execGroup runs groupSQL (groupMoveSQL when no request creates its
// thread) with batch as its arguments, encoded by args, on a connection
// of the pool, and marks the requests that won. The statement is prepared
// once per connection through pgx; each execution's Bind, Execute and
// Sync are written to the connection as args encoded them, in one write,
// and the server's answers read through pgx up to its ReadyForQuery,
// which follows the commit of the implicit transaction that Sync ends
// (and so, with synchronous_commit, its WAL flush).
func (s *Store) execGroup(ctx context.Context, batch []*appendReq, args *groupArgs, won []bool) error {
	name, sql := groupMoveStmt, groupMoveSQL
	for _, r := range batch {
		if r.after == 0 {
			name, sql = groupStmt, groupSQL
			break
		}
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return dbErr("append", err)
	}
	defer c.Release()
	sd, err := c.Conn().Prepare(ctx, name, sql) // once per connection
	if err != nil {
		return dbErr("append", err)
	}
	pc := c.Conn().PgConn()
	// The connection is idle, so pgx has nothing buffered to send.
	if _, err := pc.Conn().Write(args.encodeGroup(batch, sd.Name)); err != nil {
		// Some of the messages may have been sent: the connection's state
		// is unknown, and it goes (the pool drops a closed connection).
		pc.Close(ctx)
		return dbErr("append", err)
	}
	var failed error
	for {
		msg, err := pc.ReceiveMessage(ctx)
		if err != nil {
			pc.Close(ctx)
			return dbErr("append", err)
		}
		switch msg := msg.(type) {
		case *pgproto3.DataRow:
			if v := msg.Values; len(v) == 1 && len(v[0]) == 4 {
				if req := int32(be.Uint32(v[0])); req >= 0 && int(req) < len(won) {
					won[req] = true
				}
			}
		case *pgproto3.ErrorResponse:
			failed = pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.ReadyForQuery:
			if failed != nil {
				clear(won)
				return dbErr("append", failed)
			}
			return nil
		}
	}
}

// resolveTools names the tool of each nameless tool result in rows: from
// the call in rows before it, or in the thread's log up to seq after.
func resolveTools(ctx context.Context, q querier, calls *backend.CallCache, tenant, thread string, after int64, rows []row) {
	for i := range rows {
		r := &rows[i]
		if r.msg == nil {
			continue
		}
		name := backend.ToolOf(*r.msg, func(id string) string {
			return findCall(ctx, q, calls, tenant, thread, after, rows[:i], id)
		})
		if name != "" {
			r.tool = &name
		}
	}
}

// querier is what findCall reads with: a transaction or the pool.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// lockTail locks the thread's row and checks that its last seq is after;
// when the thread does not exist, after must be 0, and create inserts its
// row, created at created (a concurrent creator makes the insert wait,
// then conflict).
func lockTail(ctx context.Context, tx pgx.Tx, tenant, thread string, after int64, create bool, created time.Time) error {
	var last int64
	err := tx.QueryRow(ctx, `SELECT last_seq FROM threads WHERE tenant = $1 AND id = $2 FOR UPDATE`, tenant, thread).Scan(&last)
	switch {
	case err == nil:
		if last != after {
			return fmt.Errorf("%w: last seq is %d, not %d", store.ErrConflict, last, after)
		}
		return nil
	case !errors.Is(err, pgx.ErrNoRows):
		return dbErr("append", err)
	}
	if after != 0 {
		return fmt.Errorf("%w: last seq is 0, not %d", store.ErrConflict, after)
	}
	if !create {
		return nil
	}
	tag, err := tx.Exec(ctx, `INSERT INTO threads (tenant, id, created, updated, last_seq) VALUES ($1, $2, $3, $3, 0)
		ON CONFLICT DO NOTHING`, tenant, thread, backend.Nanos(created))
	if err != nil {
		return dbErr("append", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: thread created concurrently", store.ErrConflict)
	}
	return nil
}

// insertRows resolves tool names, inserts rows (seqs after+1...) and moves
// the thread's counters and updated time. The thread's row is locked. COPY
// is used when forced or for large batches, a pipelined batch of INSERTs
// otherwise.
func insertRows(ctx context.Context, tx pgx.Tx, calls *backend.CallCache, tenant, thread string, after int64, rows []row, updated time.Time, useCopy bool) error {
	var msgs, tokens int64
	for i := range rows {
		r := &rows[i]
		if r.msg == nil {
			continue
		}
		msgs++
		tokens += int64(r.ev.Tokens)
		name := backend.ToolOf(*r.msg, func(id string) string {
			return findCall(ctx, tx, calls, tenant, thread, after, rows[:i], id)
		})
		if name != "" {
			r.tool = &name
		}
	}
	if useCopy || len(rows) >= copyThreshold {
		src := make([][]any, len(rows))
		for i, r := range rows {
			v := r.values(tenant, thread)
			var tsv pgtype.TSVector // COPY takes no cast: the literal parsed here
			if err := tsv.Scan(v[11].(string)); err != nil {
				return fmt.Errorf("postgres: append: terms of event %d: %w", r.ev.Seq, err)
			}
			src[i] = append(v, tsv)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, insertCols, pgx.CopyFromRows(src)); err != nil {
			return dbErr("append", err)
		}
	} else {
		var b pgx.Batch
		for _, r := range rows {
			b.Queue(insertEvent, r.values(tenant, thread)...)
		}
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return dbErr("append", err)
		}
	}
	last := rows[len(rows)-1].ev.Seq
	_, err := tx.Exec(ctx, `UPDATE threads SET last_seq = $1, updated = GREATEST(updated, $2), messages = messages + $3, tokens = tokens + $4
		WHERE tenant = $5 AND id = $6`, last, backend.Nanos(updated), msgs, tokens, tenant, thread)
	if err != nil {
		return dbErr("append", err)
	}
	return nil
}

// findCall finds the name of tool call callID: first in the batch being
// appended (newest first), then among the calls this replica appended to
// the thread last (backend.CallCache), then among the thread's recent
// assistant messages, pre-filtered by the call id's JSON spelling.
func findCall(ctx context.Context, tx querier, calls *backend.CallCache, tenant, thread string, after int64, batch []row, callID string) string {
	for i := len(batch) - 1; i >= 0; i-- {
		if m := batch[i].msg; m != nil {
			if n := backend.CallName(*m, callID); n != "" {
				return n
			}
		}
	}
	if n, ok := calls.Lookup(tenant, thread, after, callID); ok {
		return n
	}
	rows, err := tx.Query(ctx, `SELECT message FROM events
		WHERE tenant = $1 AND thread = $2 AND seq > $3 AND seq <= $4 AND role = 'assistant' AND strpos(message, $5) > 0
		ORDER BY seq DESC LIMIT 5`, tenant, thread, after-backend.ToolLookback, after, backend.CallNeedle(callID))
	if err != nil {
		return ""
	}
	defer rows.Close()
	return backend.CallNameInRows(rows, callID)
}

const eventCols = `seq, kind, at, ref, tokens, message, data`

func scanEvent(sc pgx.Row, lead ...any) (store.Event, error) {
	var (
		ev        store.Event
		kind      string
		at        int64
		ref       *string
		msg, data *string
	)
	if err := sc.Scan(append(lead, &ev.Seq, &kind, &at, &ref, &ev.Tokens, &msg, &data)...); err != nil {
		return ev, err
	}
	ev.Kind, ev.At, ev.Ref = store.Kind(kind), backend.FromNanos(at), deref(ref)
	if msg != nil {
		m, err := backend.DecodeMessage(*msg)
		if err != nil {
			return ev, fmt.Errorf("event %d: stored message: %w", ev.Seq, err)
		}
		ev.Message = m
	}
	if data != nil {
		ev.Data = json.RawMessage(*data)
	}
	return ev, nil
}

// Load implements store.Log.
func (s *Store) Load(ctx context.Context, tenant, thread string, from int64, limit int) ([]store.Event, error) {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return nil, err
	}
	lim := int64(math.MaxInt64)
	if limit > 0 {
		lim = int64(limit)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+eventCols+` FROM events
		WHERE tenant = $1 AND thread = $2 AND seq >= $3 ORDER BY seq LIMIT $4`, tenant, thread, from, lim)
	if err != nil {
		return nil, dbErr("load", err)
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, dbErr("load", err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("load", err)
	}
	return out, nil
}

// LastSeq implements store.Log.
func (s *Store) LastSeq(ctx context.Context, tenant, thread string) (int64, error) {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return 0, err
	}
	var last int64
	err := s.pool.QueryRow(ctx, `SELECT last_seq FROM threads WHERE tenant = $1 AND id = $2`, tenant, thread).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, dbErr("last seq", err)
	}
	return last, nil
}

// Threads implements store.Log.
func (s *Store) Threads(ctx context.Context, tenant string, p store.Page) ([]store.ThreadInfo, string, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, "", err
	}
	limit := p.Size()
	q := `SELECT ` + backend.ThreadCols + ` FROM threads WHERE tenant = $1`
	args := []any{tenant}
	if p.Cursor != "" {
		at, id, err := backend.DecodeCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		// active, a function of updated that never decreases, bounds
		// the scan of its index.
		u := backend.Nanos(at)
		q += ` AND active <= $4 AND (updated < $2 OR (updated = $2 AND id > $3))`
		args = append(args, u, id, u-u%activeBucket)
	}
	q += fmt.Sprintf(` ORDER BY active DESC, updated DESC, id LIMIT %d`, limit+1)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, "", dbErr("threads", err)
	}
	defer rows.Close()
	var out []store.ThreadInfo
	for rows.Next() {
		ti, err := backend.ScanThread(rows)
		if err != nil {
			return nil, "", dbErr("threads", err)
		}
		out = append(out, ti)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbErr("threads", err)
	}
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		return out, backend.EncodeCursor(last.Updated, last.ID), nil
	}
	return out, "", nil
}

// Thread implements store.Log.
func (s *Store) Thread(ctx context.Context, tenant, thread string) (store.ThreadInfo, error) {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return store.ThreadInfo{}, err
	}
	ti, err := backend.ScanThread(s.pool.QueryRow(ctx, `SELECT `+backend.ThreadCols+` FROM threads WHERE tenant = $1 AND id = $2`, tenant, thread))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ThreadInfo{}, store.ErrNotFound
	}
	if err != nil {
		return store.ThreadInfo{}, dbErr("thread", err)
	}
	return ti, nil
}

// DeleteThread implements store.Log: the thread's row is locked first, so a
// concurrent Append either finishes before or conflicts after; then its
// vectors, events (and so their archive index entries), leases and row go.
// The rows are gone for every query at commit; their bytes leave the data
// files when (auto)vacuum reclaims the pages, as for any PostgreSQL delete.
func (s *Store) DeleteThread(ctx context.Context, tenant, thread string) error {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return err
	}
	// This replica forgets the thread's terms at once (another finds its
	// entry stale at its next search of the thread).
	defer s.terms.drop(termKey{tenant, thread})
	defer s.calls.Forget(tenant, thread) // committed or not: forgetting is always right
	return s.inTx(ctx, "delete thread", func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM threads WHERE tenant = $1 AND id = $2 FOR UPDATE`, tenant, thread).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return dbErr("delete thread", err)
		}
		for _, q := range []string{
			`DELETE FROM vectors WHERE tenant = $1 AND thread = $2`,
			`DELETE FROM snapshots WHERE tenant = $1 AND thread = $2`,
			`DELETE FROM events WHERE tenant = $1 AND thread = $2`,
			`DELETE FROM leases WHERE tenant = $1 AND thread = $2`,
			`DELETE FROM threads WHERE tenant = $1 AND id = $2`,
		} {
			if _, err := tx.Exec(ctx, q, tenant, thread); err != nil {
				return dbErr("delete thread", err)
			}
		}
		return nil
	})
}

// EventByRef implements store.Log.
func (s *Store) EventByRef(ctx context.Context, tenant, ref string) (string, store.Event, error) {
	if err := checkTenant(tenant); err != nil {
		return "", store.Event{}, err
	}
	if ref == "" {
		return "", store.Event{}, store.ErrNotFound
	}
	var thread string
	ev, err := scanEvent(s.pool.QueryRow(ctx, `SELECT thread, `+eventCols+` FROM events WHERE tenant = $1 AND ref = $2`, tenant, ref), &thread)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", store.Event{}, store.ErrNotFound
	}
	if err != nil {
		return "", store.Event{}, dbErr("event by ref", err)
	}
	return thread, ev, nil
}

// GroupStats reports how many Appends the group commit has committed and
// in how many groups (transactions): what the benchmarks report as
// appends per commit.
func (s *Store) GroupStats() backend.GroupStats { return s.group.Stats() }
