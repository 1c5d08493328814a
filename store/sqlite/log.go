package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sqlitedrv "modernc.org/sqlite"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

// activeBucket is the width of the threads' active column (migration 8),
// in nanoseconds: a minute.
const activeBucket = 60_000_000_000

// prepared is an event ready to insert: encoded outside the transaction.
type prepared struct {
	ev    store.Event
	msg   *message.Message
	json  sql.NullString
	key   string // the ref's key in the ref column (refs.go)
	made  bool   // the ref is one this store made: key is its locator's
	plain string // the archive's index terms (fulltext.IndexBody)
	data  sql.NullString
	tool  sql.NullString // a tool result's tool (resolveTools)
}

// Append implements store.Log. Concurrent appends share one IMMEDIATE
// transaction and so one fsync (group commit, see backend.GroupCommit); each still
// returns only once its events are durable (I1), and each is checked on its
// own: a conflicting append fails alone, inside a savepoint.
func (s *Store) Append(ctx context.Context, tenant, thread string, after int64, evs []store.Event) ([]store.Event, error) {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return nil, err
	}
	if after < 0 {
		return nil, fmt.Errorf("%w: negative after", store.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Everything that does not need the thread's tail is done here, outside
	// the writer's critical section: validation, refs, JSON, archive text,
	// counters. A group being committed meanwhile waits for it (Expect).
	// The index's file is checked against the log before this process
	// first writes to it (archive.go: a mark past the log's highest id
	// tells a stale index only until new ids pass it). Open does not wait:
	// a restart's first window needs no append.
	<-s.ixReady
	// Refs first: taking one may reserve a block of locators (refs.go), a
	// write this request must not be waited for through.
	var refs []string // none when every message has one (the engine's)
	for i, ev := range evs {
		if ev.Message != nil && ev.Ref == "" {
			if refs == nil {
				refs = make([]string, len(evs))
			}
			refs[i] = s.NewRef()
		}
	}
	defer s.group.Expect()()
	now := s.clock()
	req := &appendReq{tenant: tenant, thread: thread, after: after, now: now, ps: make([]prepared, len(evs))}
	for i, ev := range evs {
		if refs != nil && refs[i] != "" {
			ev.Ref = refs[i]
		}
		p, err := s.prepare(ev, after+int64(i)+1, now)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		req.ps[i] = p
		if p.msg != nil {
			req.msgs++
			req.tokens += int64(p.ev.Tokens)
		}
	}
	// Tool names too: read from what is committed up to after (which the
	// caller has seen), on a reader, not in the writer's transaction.
	s.resolveTools(ctx, tenant, thread, after, req.ps)
	gen := s.calls.Gen()
	if err := s.group.Stream(req, s.commitGroup); err != nil {
		return nil, err
	}
	s.calls.Remember(gen, tenant, thread, after, func(yield func(*message.Message) bool) {
		for _, p := range req.ps {
			if !yield(p.msg) {
				return
			}
		}
	})
	out := make([]store.Event, len(req.ps))
	for i, p := range req.ps {
		out[i] = p.ev
		if p.json.Valid {
			// Return what a Load will return, not the caller's pointer
			// (a copy standing for decoding p.json back).
			m, err := backend.NormalizeMessage(p.msg)
			if err != nil {
				return nil, classify("append", err)
			}
			out[i].Message = m
		}
	}
	return out, nil
}

// appendReq is one Append waiting in a group.
type appendReq struct {
	tenant, thread string
	after          int64
	now            time.Time
	ps             []prepared
	msgs, tokens   int64

	backend.GroupMember // its outcome, set by commitGroup
}

// The statements a group runs, each prepared once on the writer (rawTx):
// parsing SQL on every commit was a fifth of a lone writer's CPU.
const (
	insertEvent = `INSERT INTO events (id, tenant, thread, seq, kind, at, ref, made_ref, role, tool, tokens, message, data)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	insertTerms  = `INSERT INTO events_terms (id, terms) VALUES (?, ?)`
	insertThread = `INSERT INTO threads (tenant, id, created, updated, active, last_seq, messages, tokens)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
	// bumpThread moves a thread whose active minute is now's; active is
	// not SET, so threads_by_active is left alone (schema.go, migration
	// 8). Otherwise bumpActive moves the minute too.
	bumpThread = `UPDATE threads SET last_seq = ?, updated = ?, messages = messages + ?, tokens = tokens + ?
		WHERE tenant = ? AND id = ? AND last_seq = ? AND active = ?`
	bumpActive = `UPDATE threads SET last_seq = ?, updated = ?, active = ?, messages = messages + ?, tokens = tokens + ?
		WHERE tenant = ? AND id = ? AND last_seq = ?`
	selectLastSeq = `SELECT last_seq FROM threads WHERE tenant = ? AND id = ?`
)

// commitGroup writes every request of batch in one transaction. Requests
// fail alone: a conflict is found before a request writes anything, and a
// request that fails otherwise (a ref already used) has the group written
// again with each request in a savepoint, so that its failure rolls back
// that request alone. If the commit fails, every request fails:
// none of them is durable.
//
// The group's requests come from take (backend.GroupCommit.Stream): those
// queued are written while the rest are still being prepared. Once one
// fails after writing, the group takes no more, and the requests it took
// are written again.
func (s *Store) commitGroup(take func() []*appendReq) {
	// The transaction is the group's, not one caller's: no caller's
	// cancellation may abort the others.
	ctx := context.Background()
	batch := take()
	if len(batch) == 0 {
		return
	}
	err := s.rawWriteTx(ctx, func(x rawTx) error {
		high, _, err := x.queryInt64(ctx, highestID)
		if err != nil {
			return classify("append", err)
		}
		next := high + 1
		for i := 0; ; i++ {
			if i == len(batch) {
				more := take()
				if len(more) == 0 {
					return nil
				}
				batch = append(batch, more...)
			}
			r := batch[i]
			// Only a clean conflict fails a request here: anything else
			// (it wrote, or SQLite failed and may have ended the
			// transaction) has the group written again with savepoints.
			wrote, err := s.appendIn(ctx, x, r, &next)
			if err != nil && (wrote || !errors.Is(err, store.ErrConflict)) {
				return errWroteAndFailed
			}
			r.Err = err
		}
	})
	if errors.Is(err, errWroteAndFailed) {
		for _, r := range batch {
			r.Err = nil
		}
		err = s.rawWriteTx(ctx, func(x rawTx) error {
			return s.writeGroup(ctx, x, batch)
		})
	}
	if err != nil {
		for _, r := range batch {
			if r.Err == nil {
				r.Err = err
			}
		}
		return
	}
	var msgs int64
	for _, r := range batch {
		if r.Err == nil {
			msgs += r.msgs
		}
	}
	// Once enough terms are queued, the index's writer moves them into the
	// index, in its own file (archive.go), while the log goes on
	// committing: in batches, FTS5 writes one large segment where it wrote
	// one per commit and merged them again.
	if s.queued.Add(msgs) >= indexBatch {
		s.moveIndex()
	}
}

// indexBatch is how many messages' index terms are queued before the
// index's writer moves them into the archive index (a variable for the
// benchmarks, which measure the moves alone). FTS5 writes a batch as one
// segment, a header and a doclist for each of its terms, which later
// merges rewrite: four times larger batches took a sixth to a quarter less
// CPU a message (BenchmarkIndexMove), but no more appends went through with 32
// threads appending (BenchmarkDurableAppend, 40,000 messages, alternated),
// and a tenant's search, which reads the queue beside the index, would read
// up to four times as many.
var indexBatch int64 = 512

// The archive index is written in batches. An Append writes each message's
// index terms to events_terms (one row at the end of a b-tree, in the
// group's transaction, so as durable as the message), which searches of
// small threads read directly; the index (in a file of its own, archive.go)
// holds the rows up to its mark, and the rows past it are the queue. Once
// indexBatch messages are queued, the index's writer moves them, in the
// background. A thread's search that uses the index reads the thread's
// queued rows beside it while the queue is short (search.go, readQueued),
// and a tenant's search the whole queue (tenantReadQueued); a longer queue
// is moved first (catchUpIndex): either way a search sees every
// acknowledged message.
// Written per group, FTS5 flushed a small segment at every commit and
// merged them again: more than a third of the writer's CPU with 32 threads
// appending.
//
// Ids are never used twice (archive.go): a group numbers its messages from
// past the highest id the log ever held (archive_state.hw, which a delete
// raises before it deletes, and the largest id in events).

// init registers mneme_scope(tenant, thread), the scope column's text
// (scopeTerms), with which the log's own index was filled in the
// migrations before the index had a file of its own, and
// mneme_index_scope(tenant, thread), the scope's tokens as the index
// file's rows begin (indexScope).
func init() {
	registerScope("mneme_index_scope", cachedIndexScope)
	registerScope("mneme_scope", scopeTerms)
}

// registerScope registers the SQL function name(tenant, thread) as scope.
func registerScope(name string, scope func(tenant, thread string) string) {
	err := sqlitedrv.RegisterDeterministicScalarFunction(name, 2, func(_ *sqlitedrv.FunctionContext, args []driver.Value) (driver.Value, error) {
		tenant, ok1 := args[0].(string)
		thread, ok2 := args[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%s: tenant and thread must be text", name)
		}
		return scope(tenant, thread), nil
	})
	if err != nil {
		panic(err)
	}
}

// moveIndex moves the queue into the index in the background (Store.ahead),
// unless a move is under way or the index cannot be written.
func (s *Store) moveIndex() {
	if s.readOnly {
		return
	}
	s.ahead.Start(nil, func() {
		// The store's, not a caller's: Close waits for it. A failure
		// leaves the queue to the next move.
		_ = s.catchUpIndex(context.Background())
	})
}

// highestID is the highest id the log ever held: a group numbers its
// messages past it, and an index file whose mark is past it is not this
// log's (archive.go).
const highestID = `SELECT max(hw, COALESCE((SELECT max(id) FROM events), 0)) FROM archive_state`

// catchUpIndex moves the queued index terms into the index, if any are
// queued (by this process or another on the same file, or before a
// crash): what a search of a long queue does first.
func (s *Store) catchUpIndex(ctx context.Context) error {
	x, err := s.index()
	if err != nil {
		return err
	}
	if x == nil || x.w == nil {
		return nil // read-only: searches read the log (search.go)
	}
	n, err := x.move(ctx)
	s.queued.Add(-n)
	if s.queued.Load() < 0 {
		s.queued.Store(0)
	}
	if err != nil {
		return classify("index", err)
	}
	return nil
}

// errWroteAndFailed: a request of a group written without savepoints
// failed otherwise than on a conflict found before it wrote; the group is
// written again with savepoints.
var errWroteAndFailed = errors.New("sqlite: append: a request failed after writing")

// writeGroup writes batch in tx again, each request in a savepoint, once
// a request failed after writing: its failure rolls back that request
// alone. Only then: FTS5 flushed its pending terms to a new segment at
// every savepoint, when the log's file held the index, which then had to
// be merged.
func (s *Store) writeGroup(ctx context.Context, x rawTx, batch []*appendReq) error {
	high, _, err := x.queryInt64(ctx, highestID)
	if err != nil {
		return classify("append", err)
	}
	next := high + 1
	if len(batch) == 1 {
		// Alone: the request's error is the transaction's.
		_, batch[0].Err = s.appendIn(ctx, x, batch[0], &next)
		return batch[0].Err
	}
	for _, r := range batch {
		if _, err := x.ExecContext(ctx, `SAVEPOINT append`); err != nil {
			return classify("append", err)
		}
		if _, r.Err = s.appendIn(ctx, x, r, &next); r.Err != nil {
			if _, err := x.ExecContext(ctx, `ROLLBACK TO append`); err != nil {
				return classify("append", err)
			}
		}
		if _, err := x.ExecContext(ctx, `RELEASE append`); err != nil {
			return classify("append", err)
		}
	}
	return nil
}

// appendIn checks r's expected last seq and writes its events in tx. The
// thread's row moves first, guarded by the expected seq, so that the common
// case costs no read. Its events take ids from *next on. wrote reports
// whether it changed anything in tx (never when it fails on a conflict).
func (s *Store) appendIn(ctx context.Context, x rawTx, r *appendReq, next *int64) (wrote bool, err error) {
	ps := r.ps
	if len(ps) == 0 {
		last, err := x.lastSeq(ctx, r.tenant, r.thread)
		if err != nil {
			return false, err
		}
		if last != r.after {
			return false, fmt.Errorf("%w: last seq is %d, not %d", store.ErrConflict, last, r.after)
		}
		return false, nil
	}
	newLast := r.after + int64(len(ps))
	now := backend.Nanos(r.now)
	active := now - now%activeBucket
	var moved int64
	if r.after == 0 {
		res, err := x.ExecContext(ctx, insertThread,
			r.tenant, r.thread, now, now, active, newLast, r.msgs, r.tokens)
		if err != nil {
			return false, classify("append", err)
		}
		moved, _ = res.RowsAffected()
	} else {
		res, err := x.ExecContext(ctx, bumpThread, newLast, now, r.msgs, r.tokens, r.tenant, r.thread, r.after, active)
		if err != nil {
			return false, classify("append", err)
		}
		if moved, _ = res.RowsAffected(); moved == 0 {
			// Another minute, or a conflict (which this finds too).
			res, err := x.ExecContext(ctx, bumpActive, newLast, now, active, r.msgs, r.tokens, r.tenant, r.thread, r.after)
			if err != nil {
				return false, classify("append", err)
			}
			moved, _ = res.RowsAffected()
		}
	}
	if moved == 0 {
		last, err := x.lastSeq(ctx, r.tenant, r.thread)
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("%w: last seq is %d, not %d", store.ErrConflict, last, r.after)
	}
	for _, p := range ps {
		var role, tool sql.NullString
		if p.msg != nil {
			role = sql.NullString{String: string(p.msg.Role), Valid: true}
			tool = p.tool
		}
		// A ref this store made is kept by its locator's key, and in
		// made_ref; any other as it is (refs.go).
		ref := sql.NullString{String: p.key, Valid: p.key != ""}
		var made sql.NullString
		if p.made {
			made = sql.NullString{String: p.ev.Ref, Valid: true}
		}
		id := *next
		*next++
		_, err := x.ExecContext(ctx, insertEvent, id, r.tenant, r.thread, p.ev.Seq, string(p.ev.Kind), backend.Nanos(p.ev.At),
			text(ref), text(made), text(role), text(tool), p.ev.Tokens, text(p.json), text(p.data))
		if isUniqueViolation(err) {
			return true, fmt.Errorf("%w: ref %q already used", store.ErrInvalid, p.ev.Ref)
		}
		if err != nil {
			return true, classify("append", err)
		}
		if p.msg != nil {
			if _, err := x.ExecContext(ctx, insertTerms, id, p.plain); err != nil {
				return true, fmt.Errorf("sqlite: append: index: %w", err)
			}
		}
	}
	return true, nil
}

// text is ns as a statement's argument: its string, or nil for NULL. A
// sql.NullString given as it is is boxed, and then its Value boxed again.
func text(ns sql.NullString) any {
	if !ns.Valid {
		return nil
	}
	return ns.String
}

func lastSeqIn(ctx context.Context, tx *sql.Tx, tenant, thread string) (int64, error) {
	var last int64
	err := tx.QueryRowContext(ctx, selectLastSeq, tenant, thread).Scan(&last)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, classify("append", err)
	}
	return last, nil
}

// lastSeq is lastSeqIn in a group's transaction.
func (x rawTx) lastSeq(ctx context.Context, tenant, thread string) (int64, error) {
	last, _, err := x.queryInt64(ctx, selectLastSeq, tenant, thread)
	if err != nil {
		return 0, classify("append", err)
	}
	return last, nil
}

// prepare validates an event and encodes it for insertion as seq.
func (s *Store) prepare(ev store.Event, seq int64, now time.Time) (prepared, error) {
	if err := backend.CheckEvent(ev); err != nil {
		return prepared{}, err
	}
	p := prepared{ev: ev, msg: ev.Message}
	p.ev.Seq = seq
	p.ev.Message = nil
	if p.ev.At.IsZero() {
		p.ev.At = now
	}
	p.ev.At = p.ev.At.UTC().Round(0)
	p.key, p.made = s.refKey(p.ev.Ref)
	if p.msg != nil {
		js, err := backend.EncodeMessage(p.msg)
		if err != nil {
			return prepared{}, err
		}
		p.json = sql.NullString{String: js, Valid: true}
		p.plain = fulltext.IndexMessage(*p.msg, p.ev.At)
	}
	if len(ev.Data) > 0 {
		p.data = sql.NullString{String: string(ev.Data), Valid: true}
		p.ev.Data = append(json.RawMessage(nil), ev.Data...)
	}
	return p, nil
}

// resolveTools names the tool of each nameless tool result in ps: from the
// call in ps before it, or in the thread's log up to seq after.
func (s *Store) resolveTools(ctx context.Context, tenant, thread string, after int64, ps []prepared) {
	for i := range ps {
		p := &ps[i]
		if p.msg == nil {
			continue
		}
		name := backend.ToolOf(*p.msg, func(id string) string {
			return s.findCall(ctx, tenant, thread, after, ps[:i], id)
		})
		p.tool = sql.NullString{String: name, Valid: name != ""}
	}
}

// findCall finds the name of tool call callID: first in the batch being
// appended (newest first), then among the calls this process appended to
// the thread last (backend.CallCache), then among the thread's recent
// assistant messages in the log, pre-filtered by the call id's JSON
// spelling.
func (s *Store) findCall(ctx context.Context, tenant, thread string, after int64, batch []prepared, callID string) string {
	for i := len(batch) - 1; i >= 0; i-- {
		if m := batch[i].msg; m != nil {
			if n := backend.CallName(*m, callID); n != "" {
				return n
			}
		}
	}
	if n, ok := s.calls.Lookup(tenant, thread, after, callID); ok {
		return n
	}
	rows, err := s.query(ctx, `SELECT message FROM events
		WHERE tenant = ? AND thread = ? AND seq > ? AND seq <= ? AND role = 'assistant' AND instr(message, ?) > 0
		ORDER BY seq DESC LIMIT 5`, tenant, thread, after-backend.ToolLookback, after, backend.CallNeedle(callID))
	if err != nil {
		return ""
	}
	defer rows.Close()
	return backend.CallNameInRows(rows, callID)
}

// eventCols are an event's columns as scanEvent reads them: its ref is in
// made_ref when this store made it, else in ref (refs.go).
const eventCols = `seq, kind, at, COALESCE(made_ref, ref), tokens, message, data`

func scanEvent(sc interface{ Scan(...any) error }, lead ...any) (store.Event, error) {
	var (
		ev       store.Event
		kind     string
		at       int64
		ref      sql.NullString
		msg, dat sql.NullString
	)
	if err := sc.Scan(append(lead, &ev.Seq, &kind, &at, &ref, &ev.Tokens, &msg, &dat)...); err != nil {
		return ev, err
	}
	ev.Kind, ev.At, ev.Ref = store.Kind(kind), backend.FromNanos(at), ref.String
	if msg.Valid {
		m, err := backend.DecodeMessage(msg.String)
		if err != nil {
			return ev, fmt.Errorf("sqlite: event %d: stored message: %w", ev.Seq, err)
		}
		ev.Message = m
	}
	if dat.Valid {
		ev.Data = json.RawMessage(dat.String)
	}
	return ev, nil
}

// Load implements store.Log.
func (s *Store) Load(ctx context.Context, tenant, thread string, from int64, limit int) ([]store.Event, error) {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.query(ctx, `SELECT `+eventCols+` FROM events
		WHERE tenant = ? AND thread = ? AND seq >= ? ORDER BY seq LIMIT ?`, tenant, thread, from, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: load: %w", err)
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: load: %w", err)
	}
	return out, nil
}

// LastSeq implements store.Log.
func (s *Store) LastSeq(ctx context.Context, tenant, thread string) (int64, error) {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return 0, err
	}
	var last int64
	err := s.queryRow(ctx, `SELECT last_seq FROM threads WHERE tenant = ? AND id = ?`, tenant, thread).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: last seq: %w", err)
	}
	return last, nil
}

// Threads implements store.Log.
func (s *Store) Threads(ctx context.Context, tenant string, p store.Page) ([]store.ThreadInfo, string, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, "", err
	}
	limit := p.Size()
	q := `SELECT ` + backend.ThreadCols + ` FROM threads WHERE tenant = ?`
	args := []any{tenant}
	if p.Cursor != "" {
		at, id, err := backend.DecodeCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		// active, a function of updated, bounds the page's start in
		// threads_by_active.
		u := backend.Nanos(at)
		q += ` AND active <= ? AND (updated < ? OR (updated = ? AND id > ?))`
		args = append(args, u-u%activeBucket, u, u, id)
	}
	q += ` ORDER BY active DESC, updated DESC, id LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: threads: %w", err)
	}
	defer rows.Close()
	var out []store.ThreadInfo
	for rows.Next() {
		ti, err := backend.ScanThread(rows)
		if err != nil {
			return nil, "", fmt.Errorf("sqlite: threads: %w", err)
		}
		out = append(out, ti)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("sqlite: threads: %w", err)
	}
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		return out, backend.EncodeCursor(last.Updated, last.ID), nil
	}
	return out, "", nil
}

func checkTenant(tenant string) error { return backend.CheckScope(tenant, "-") }

// Thread implements store.Log.
func (s *Store) Thread(ctx context.Context, tenant, thread string) (store.ThreadInfo, error) {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return store.ThreadInfo{}, err
	}
	ti, err := backend.ScanThread(s.queryRow(ctx, `SELECT `+backend.ThreadCols+` FROM threads WHERE tenant = ? AND id = ?`, tenant, thread))
	if errors.Is(err, sql.ErrNoRows) {
		return store.ThreadInfo{}, store.ErrNotFound
	}
	if err != nil {
		return store.ThreadInfo{}, fmt.Errorf("sqlite: thread: %w", err)
	}
	return ti, nil
}

// DeleteThread implements store.Log. Deleted pages are zeroed
// (secure_delete) and the WAL is checkpointed and truncated afterwards, so
// the thread's content does not survive in the files.
func (s *Store) DeleteThread(ctx context.Context, tenant, thread string) error {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return err
	}
	// The index first (archive.go): its rows' terms are read from the log
	// to take them out, so they go while the log still holds them.
	end := func(bool) error { return nil }
	x, err := s.index()
	if err != nil {
		return err // the index's rows of the thread must go with it
	}
	if x != nil && x.w != nil {
		if end, err = x.beginDelete(ctx, tenant, thread); err != nil {
			return classify("delete thread", err)
		}
	}
	err = s.deleteFromLog(ctx, tenant, thread)
	s.calls.Forget(tenant, thread) // committed or not: forgetting is always right
	if endErr := end(err == nil); endErr != nil && err == nil {
		err = classify("delete thread", endErr)
	}
	if err != nil {
		return err
	}
	s.checkpoint(ctx)
	if x != nil {
		x.checkpoint(ctx)
	}
	return nil
}

// deleteFromLog deletes the thread from the log's file, in one
// transaction. Its events' vectors go with them, by a trigger on the
// events (vectors.go), in the same statement: so, like every statement
// that reaches a vec0 table, it runs to its end once begun (vecContext).
func (s *Store) deleteFromLog(ctx context.Context, tenant, thread string) error {
	ctx, err := vecContext(ctx)
	if err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		// No id is given again (archive.go): the highest goes on record
		// before the rows go.
		if _, err := tx.ExecContext(ctx, `UPDATE archive_state
			SET hw = max(hw, COALESCE((SELECT max(id) FROM events), 0)), deletes = deletes + 1`); err != nil {
			return fmt.Errorf("sqlite: delete thread: %w", err)
		}
		for _, q := range []string{
			`DELETE FROM snapshots WHERE tenant = ? AND thread = ?`,
			`DELETE FROM events WHERE tenant = ? AND thread = ?`,
		} {
			if _, err := tx.ExecContext(ctx, q, tenant, thread); err != nil {
				return fmt.Errorf("sqlite: delete thread: %w", err)
			}
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM threads WHERE tenant = ? AND id = ?`, tenant, thread)
		if err != nil {
			return fmt.Errorf("sqlite: delete thread: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
}

// checkpoint copies the WAL into the database and truncates it, so that
// deleted bytes (zeroed by secure_delete) reach the file and leave the WAL.
// A reader of an older snapshot makes it report busy: it tries again a few
// times, then gives up; the next checkpoint finishes the job.
func (s *Store) checkpoint(ctx context.Context) {
	for try := 0; try < 10; try++ {
		var busy, frames, done int
		if err := s.w.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &done); err != nil || busy == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(try+1) * 10 * time.Millisecond):
		}
	}
}

// EventByRef implements store.Log.
func (s *Store) EventByRef(ctx context.Context, tenant, ref string) (string, store.Event, error) {
	if err := checkTenant(tenant); err != nil {
		return "", store.Event{}, err
	}
	if ref == "" {
		return "", store.Event{}, store.ErrNotFound
	}
	var (
		thread string
		ev     store.Event
	)
	err := s.byRef(ref, func(key string) (err error) {
		ev, err = scanEvent(s.queryRow(ctx, `SELECT thread, `+eventCols+` FROM events WHERE tenant = ? AND ref = ?`, tenant, key), &thread)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return "", store.Event{}, store.ErrNotFound
	}
	if err != nil {
		return "", store.Event{}, fmt.Errorf("sqlite: event by ref: %w", err)
	}
	return thread, ev, nil
}

// GroupStats reports how many Appends the group commit has committed and
// in how many groups (transactions): what the benchmarks report as
// appends per commit.
func (s *Store) GroupStats() backend.GroupStats { return s.group.Stats() }
