package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

const maxLimit = 1000

// The archive index: events_fts holds, for each message event (rowid =
// events.id), its scope and its index terms (fulltext.IndexBody of
// fulltext.SearchText). The scope column carries two tokens, one naming the
// tenant and one the thread, so that a search ANDs its terms with its
// scope inside FTS5: the index itself narrows to the thread or the tenant,
// and the cost of a search does not grow with what other threads and
// tenants hold.
const insertFTS = `INSERT INTO events_fts (rowid, scope, body) VALUES (?, ?, ?)`

// scopeTerms returns the scope column of an event of this thread.
func scopeTerms(tenant, thread string) string {
	return tenantToken(tenant) + " " + threadToken(tenant, thread)
}

// tenantToken and threadToken are hashes, spelled as one FTS5 token each:
// ids are arbitrary strings, tokens only letters and digits. A collision
// only adds candidates, which the events join drops.
func tenantToken(tenant string) string { return "t" + scopeHash(tenant) }

func threadToken(tenant, thread string) string {
	return "h" + scopeHash(tenant+"\x00"+thread)
}

func scopeHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:10])
}

// Search implements store.Archive. FTS5 finds the candidates, every
// document of the scope (the thread, or the tenant) containing any term,
// from a MATCH expression built only of quoted phrases, so user text never
// reaches FTS5 syntax; fulltext.ParsedQuery.Rank scores them by BM25 with the
// scope's statistics (never another tenant's); verbatim identifier terms
// are then checked on each candidate's text, best first, until Limit hits
// are found.
func (s *Store) Search(ctx context.Context, tenant string, q store.SearchQuery) ([]store.Hit, error) {
	if err := backend.CheckSearch(tenant, q); err != nil {
		return nil, err
	}
	pq, err := fulltext.ParseQuery(q.Text)
	if err != nil || pq.Empty() {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, maxLimit)
	if err := s.catchUpIndex(ctx); err != nil { // every acknowledged message is searchable
		return nil, err
	}

	scope := `"` + tenantToken(tenant) + `"`
	if q.Thread != "" {
		scope = `"` + threadToken(tenant, q.Thread) + `"`
	}
	match := "scope : " + scope + " AND body : (" + pq.Union(fulltext.FTS5Phrase, " OR ") + ")"
	var (
		where []string
		args  = []any{match}
	)
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	if q.Role != "" {
		add("e.role = ?", string(q.Role))
	}
	if q.Tool != "" {
		add("e.tool = ?", q.Tool)
	}
	if q.FromSeq > 0 {
		add("e.seq >= ?", q.FromSeq)
	}
	if q.ToSeq > 0 {
		add("e.seq <= ?", q.ToSeq)
	}
	if !q.Since.IsZero() {
		add("e.at >= ?", backend.Nanos(q.Since))
	}
	if !q.Until.IsZero() {
		add("e.at <= ?", backend.Nanos(q.Until))
	}
	// The candidates carry their terms, not their text: bodies can be
	// megabytes, and only those examined below are read. A thread's search
	// without filters needs nothing of events: the scope is in the index,
	// and rowid order is seq order. Otherwise events filters, and gives the
	// thread and seq that order a tenant's candidates (Rank breaks ties by
	// candidate order, (thread, seq) on every backend).
	var sqlText string
	if q.Thread != "" && len(where) == 0 {
		sqlText = `SELECT rowid, '', 0, body FROM events_fts WHERE events_fts MATCH ? ORDER BY rowid`
	} else {
		sqlText = `SELECT e.id, e.thread, e.seq, f.body FROM events_fts f JOIN events e ON e.id = f.rowid
			WHERE events_fts MATCH ? AND ` + strings.Join(append(where, "e.tenant = ?"), " AND ") + ` ORDER BY e.thread, e.seq`
		args = append(args, tenant)
	}

	conn, err := s.r.Conn(ctx) // one read snapshot for the statistics, candidates and texts
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}
	defer tx.Rollback()

	// The scope's document count: every message event is indexed.
	var n int
	if q.Thread != "" {
		err = tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(messages), 0) FROM threads WHERE tenant = ? AND id = ?`, tenant, q.Thread).Scan(&n)
	} else {
		err = tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(messages), 0) FROM threads WHERE tenant = ?`, tenant).Scan(&n)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}

	rows, err := tx.QueryContext(ctx, sqlText, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}
	var (
		ids  []int64
		docs [][]string
	)
	for rows.Next() {
		var (
			id, seq int64
			thread  string
			body    string
		)
		if err := rows.Scan(&id, &thread, &seq, &body); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: search: %w", err)
		}
		ids = append(ids, id)
		docs = append(docs, strings.Fields(body))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}

	ev, err := tx.PrepareContext(ctx, `SELECT tenant, thread, seq, ref, role, tool, at, message FROM events WHERE id = ?`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}
	defer ev.Close()
	var hits []store.Hit
	for _, r := range pq.Rank(docs, n) {
		if len(hits) == limit {
			break
		}
		var (
			h              store.Hit
			evTenant, role string
			ref, tool, js  sql.NullString
			at             int64
		)
		if err := ev.QueryRowContext(ctx, ids[r.Index]).Scan(&evTenant, &h.Thread, &h.Seq, &ref, &role, &tool, &at, &js); err != nil {
			return nil, fmt.Errorf("sqlite: search: %w", err)
		}
		if evTenant != tenant || (q.Thread != "" && h.Thread != q.Thread) {
			continue // a scope hash collision
		}
		h.Ref, h.Role, h.Tool, h.At = ref.String, message.Role(role), tool.String, backend.FromNanos(at)
		var m message.Message
		if err := json.Unmarshal([]byte(js.String), &m); err != nil {
			return nil, fmt.Errorf("sqlite: search: event %s/%d: stored message: %w", h.Thread, h.Seq, err)
		}
		text := fulltext.SearchText(m, h.At)
		if !pq.MatchesVerbatim(text) {
			continue
		}
		h.Snippet = fulltext.Snippet(text, pq, 0)
		h.Score = r.Score
		hits = append(hits, h)
	}
	return hits, nil
}
