package sqlite

import (
	"context"
	"database/sql"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// queuedCount returns how many messages wait in s's index queue.
func (s *Store) queuedCount(t *testing.T) int64 {
	t.Helper()
	var n int64
	if err := s.r.QueryRowContext(context.Background(), `SELECT count(*) FROM events_terms WHERE id > ?`, s.mustIndex(t).mark(context.Background())).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// indexedIDs returns the ids the index holds under tenant's scope token,
// in order (a contentless index cannot be scanned: its rows are found by
// their scope).
func (s *Store) indexedIDs(t *testing.T, tenant string) []int64 {
	t.Helper()
	rows, err := s.mustIndex(t).r.QueryContext(context.Background(), `SELECT rowid FROM events_fts WHERE events_fts MATCH ? ORDER BY rowid`,
		`"`+indexToken(tenantToken(tenant))+`"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// indexed is a log's message as the index takes it.
type indexed struct {
	id           int64
	scope, terms string
}

// readIndexed reads the log's rows that query (id, tenant, thread, terms)
// selects.
func readIndexed(ctx context.Context, log *sql.DB, query string, args ...any) ([]indexed, error) {
	rows, err := log.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []indexed
	for rows.Next() {
		var (
			r              indexed
			tenant, thread string
		)
		if err := rows.Scan(&r.id, &tenant, &thread, &r.terms); err != nil {
			return nil, err
		}
		r.scope = indexScope(tenant, thread)
		out = append(out, r)
	}
	return out, rows.Err()
}

// mustIndex returns s's index file, once open.
func (s *Store) mustIndex(t *testing.T) *archiveIndex {
	t.Helper()
	x, err := s.index()
	if err != nil || x == nil {
		t.Fatalf("no index: %v", err)
	}
	return x
}

// say appends a user message of text to the thread, after its last event.
func say(t *testing.T, s *Store, tenant, thread, text string) {
	t.Helper()
	ctx := context.Background()
	last, err := s.LastSeq(ctx, tenant, thread)
	if err != nil {
		t.Fatal(err)
	}
	m := message.NewText(message.User, text)
	if _, err := s.Append(ctx, tenant, thread, last, []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
		t.Fatal(err)
	}
}
