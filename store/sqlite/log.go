package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// toolLookback bounds how far back Append looks for the tool call a
// nameless tool result answers.
const toolLookback = 500

// prepared is an event ready to insert: encoded outside the transaction.
type prepared struct {
	ev    store.Event
	msg   *message.Message
	json  sql.NullString
	plain string
	data  sql.NullString
}

// Append implements store.Log: in one IMMEDIATE transaction it checks the
// thread's last seq, inserts the events and their archive text, and updates
// the thread's counters.
func (s *Store) Append(ctx context.Context, tenant, thread string, after int64, evs []store.Event) ([]store.Event, error) {
	if err := store.CheckScope(tenant, thread); err != nil {
		return nil, err
	}
	if after < 0 {
		return nil, fmt.Errorf("%w: negative after", store.ErrInvalid)
	}
	now := s.clock()
	ps := make([]prepared, len(evs))
	for i, ev := range evs {
		p, err := prepare(ev, after+int64(i)+1, now)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		ps[i] = p
	}
	var msgs, tokens int64
	for _, p := range ps {
		if p.msg != nil {
			msgs++
			tokens += int64(p.ev.Tokens)
		}
	}

	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var last int64
		err := tx.QueryRowContext(ctx, `SELECT last_seq FROM threads WHERE tenant = ? AND id = ?`, tenant, thread).Scan(&last)
		exists := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: append: %w", err)
		}
		if last != after {
			return fmt.Errorf("%w: last seq is %d, not %d", store.ErrConflict, last, after)
		}
		if len(ps) == 0 {
			return nil
		}
		if !exists {
			if _, err := tx.ExecContext(ctx, `INSERT INTO threads (tenant, id, created, updated, last_seq) VALUES (?, ?, ?, ?, 0)`,
				tenant, thread, store.Nanos(now), store.Nanos(now)); err != nil {
				return fmt.Errorf("sqlite: append: %w", err)
			}
		}
		ins, err := tx.PrepareContext(ctx, `INSERT INTO events (tenant, thread, seq, kind, at, ref, role, tool, tokens, message, data)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return fmt.Errorf("sqlite: append: %w", err)
		}
		defer ins.Close()
		fts, err := tx.PrepareContext(ctx, `INSERT INTO events_fts (rowid, body) VALUES (?, ?)`)
		if err != nil {
			return fmt.Errorf("sqlite: append: %w", err)
		}
		defer fts.Close()
		for i, p := range ps {
			var role, tool sql.NullString
			if p.msg != nil {
				role = sql.NullString{String: string(p.msg.Role), Valid: true}
				name := store.ToolOf(*p.msg, func(id string) string {
					return s.findCall(ctx, tx, tenant, thread, after, ps[:i], id)
				})
				tool = sql.NullString{String: name, Valid: name != ""}
			}
			ref := sql.NullString{String: p.ev.Ref, Valid: p.ev.Ref != ""}
			res, err := ins.ExecContext(ctx, tenant, thread, p.ev.Seq, string(p.ev.Kind), store.Nanos(p.ev.At),
				ref, role, tool, p.ev.Tokens, p.json, p.data)
			if isUniqueViolation(err) {
				return fmt.Errorf("%w: ref %q already used", store.ErrInvalid, p.ev.Ref)
			}
			if err != nil {
				return fmt.Errorf("sqlite: append: %w", err)
			}
			if p.msg != nil {
				id, err := res.LastInsertId()
				if err != nil {
					return fmt.Errorf("sqlite: append: %w", err)
				}
				if _, err := fts.ExecContext(ctx, id, p.plain); err != nil {
					return fmt.Errorf("sqlite: append: index: %w", err)
				}
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE threads SET last_seq = ?, updated = ?, messages = messages + ?, tokens = tokens + ?
			WHERE tenant = ? AND id = ?`, after+int64(len(ps)), store.Nanos(now), msgs, tokens, tenant, thread)
		if err != nil {
			return fmt.Errorf("sqlite: append: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]store.Event, len(ps))
	for i, p := range ps {
		out[i] = p.ev
		if p.json.Valid {
			// Return what a Load will return, not the caller's pointer.
			var m message.Message
			if err := json.Unmarshal([]byte(p.json.String), &m); err != nil {
				return nil, fmt.Errorf("sqlite: append: %w", err)
			}
			out[i].Message = &m
		}
	}
	return out, nil
}

// prepare validates an event and encodes it for insertion as seq.
func prepare(ev store.Event, seq int64, now time.Time) (prepared, error) {
	if err := store.CheckEvent(ev); err != nil {
		return prepared{}, err
	}
	p := prepared{ev: ev, msg: ev.Message}
	p.ev.Seq = seq
	p.ev.Message = nil
	if p.ev.At.IsZero() {
		p.ev.At = now
	}
	p.ev.At = p.ev.At.UTC().Round(0)
	if p.msg != nil {
		if p.ev.Ref == "" {
			p.ev.Ref = store.NewRef()
		}
		js, err := store.EncodeMessage(p.msg)
		if err != nil {
			return prepared{}, err
		}
		p.json = sql.NullString{String: js, Valid: true}
		p.plain = p.msg.PlainText()
	}
	if len(ev.Data) > 0 {
		p.data = sql.NullString{String: string(ev.Data), Valid: true}
		p.ev.Data = append(json.RawMessage(nil), ev.Data...)
	}
	return p, nil
}

// findCall finds the name of tool call callID: first in the batch being
// appended (newest first), then among the thread's recent assistant
// messages, pre-filtered by the call id's JSON spelling.
func (s *Store) findCall(ctx context.Context, tx *sql.Tx, tenant, thread string, after int64, batch []prepared, callID string) string {
	for i := len(batch) - 1; i >= 0; i-- {
		if m := batch[i].msg; m != nil {
			if n := store.CallName(*m, callID); n != "" {
				return n
			}
		}
	}
	rows, err := tx.QueryContext(ctx, `SELECT message FROM events
		WHERE tenant = ? AND thread = ? AND seq > ? AND role = 'assistant' AND instr(message, ?) > 0
		ORDER BY seq DESC LIMIT 5`, tenant, thread, after-toolLookback, store.CallNeedle(callID))
	if err != nil {
		return ""
	}
	defer rows.Close()
	return store.CallNameInRows(rows, callID)
}

const eventCols = `seq, kind, at, ref, tokens, message, data`

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
	ev.Kind, ev.At, ev.Ref = store.Kind(kind), store.FromNanos(at), ref.String
	if msg.Valid {
		var m message.Message
		if err := json.Unmarshal([]byte(msg.String), &m); err != nil {
			return ev, fmt.Errorf("sqlite: event %d: stored message: %w", ev.Seq, err)
		}
		ev.Message = &m
	}
	if dat.Valid {
		ev.Data = json.RawMessage(dat.String)
	}
	return ev, nil
}

// Load implements store.Log.
func (s *Store) Load(ctx context.Context, tenant, thread string, from int64, limit int) ([]store.Event, error) {
	if err := store.CheckScope(tenant, thread); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+eventCols+` FROM events
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
	if err := store.CheckScope(tenant, thread); err != nil {
		return 0, err
	}
	var last int64
	err := s.r.QueryRowContext(ctx, `SELECT last_seq FROM threads WHERE tenant = ? AND id = ?`, tenant, thread).Scan(&last)
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
	q := `SELECT ` + store.ThreadCols + ` FROM threads WHERE tenant = ?`
	args := []any{tenant}
	if p.Cursor != "" {
		at, id, err := store.DecodeCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		q += ` AND (updated < ? OR (updated = ? AND id > ?))`
		args = append(args, store.Nanos(at), store.Nanos(at), id)
	}
	q += ` ORDER BY updated DESC, id LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: threads: %w", err)
	}
	defer rows.Close()
	var out []store.ThreadInfo
	for rows.Next() {
		ti, err := store.ScanThread(rows)
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
		return out, store.EncodeCursor(last.Updated, last.ID), nil
	}
	return out, "", nil
}

func checkTenant(tenant string) error { return store.CheckScope(tenant, "-") }

// Thread implements store.Log.
func (s *Store) Thread(ctx context.Context, tenant, thread string) (store.ThreadInfo, error) {
	if err := store.CheckScope(tenant, thread); err != nil {
		return store.ThreadInfo{}, err
	}
	ti, err := store.ScanThread(s.r.QueryRowContext(ctx, `SELECT `+store.ThreadCols+` FROM threads WHERE tenant = ? AND id = ?`, tenant, thread))
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
	if err := store.CheckScope(tenant, thread); err != nil {
		return err
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{
			`DELETE FROM events_fts WHERE rowid IN (SELECT id FROM events WHERE tenant = ? AND thread = ?)`,
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
	if err != nil {
		return err
	}
	s.checkpoint(ctx)
	return nil
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
	var thread string
	row := s.r.QueryRowContext(ctx, `SELECT thread, `+eventCols+` FROM events WHERE tenant = ? AND ref = ?`, tenant, ref)
	ev, err := scanEvent(row, &thread)
	if errors.Is(err, sql.ErrNoRows) {
		return "", store.Event{}, store.ErrNotFound
	}
	if err != nil {
		return "", store.Event{}, fmt.Errorf("sqlite: event by ref: %w", err)
	}
	return thread, ev, nil
}
