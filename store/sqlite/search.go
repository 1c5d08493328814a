package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

const maxLimit = 1000

// Search implements store.Archive. FTS5 finds and ranks candidates (bm25)
// from a MATCH expression built only of quoted phrases (store.ParsedQuery),
// so user text never reaches FTS5 syntax; verbatim identifier terms are then
// checked on each candidate's text, best first, until Limit hits are found.
//
// The BM25 statistics are those of the whole file, not of the tenant: a
// score is comparable only within one result list.
func (s *Store) Search(ctx context.Context, tenant string, q store.SearchQuery) ([]store.Hit, error) {
	if err := store.CheckSearch(tenant, q); err != nil {
		return nil, err
	}
	pq, err := store.ParseQuery(q.Text)
	if err != nil || pq.Empty() {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, maxLimit)

	where := []string{"events_fts MATCH ?", "e.tenant = ?"}
	args := []any{pq.FTS5(), tenant}
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	if q.Thread != "" {
		add("e.thread = ?", q.Thread)
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
		add("e.at >= ?", store.Nanos(q.Since))
	}
	if !q.Until.IsZero() {
		add("e.at <= ?", store.Nanos(q.Until))
	}
	// The candidate list carries no text: bodies can be megabytes, and only
	// those examined below are read.
	sqlText := `SELECT e.id, e.thread, e.ref, e.seq, e.role, e.tool, e.at, f.rank
		FROM events_fts f JOIN events e ON e.id = f.rowid
		WHERE ` + strings.Join(where, " AND ") + ` ORDER BY f.rank, e.id`
	verbatim := false
	for _, t := range pq.Terms {
		verbatim = verbatim || t.Verbatim
	}
	if !verbatim { // every candidate is a hit
		sqlText += fmt.Sprintf(" LIMIT %d", limit)
	}

	conn, err := s.r.Conn(ctx) // one read snapshot for candidates and bodies
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, sqlText, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}
	type cand struct {
		id  int64
		hit store.Hit
	}
	var cands []cand
	for rows.Next() {
		var (
			c         cand
			ref, tool sql.NullString
			role      string
			at        int64
			rank      float64
		)
		if err := rows.Scan(&c.id, &c.hit.Thread, &ref, &c.hit.Seq, &role, &tool, &at, &rank); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: search: %w", err)
		}
		c.hit.Ref, c.hit.Role, c.hit.Tool, c.hit.At, c.hit.Score = ref.String, message.Role(role), tool.String, store.FromNanos(at), -rank
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}

	body, err := tx.PrepareContext(ctx, `SELECT body FROM events_fts WHERE rowid = ?`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}
	defer body.Close()
	var hits []store.Hit
	for _, c := range cands {
		if len(hits) == limit {
			break
		}
		var text string
		if err := body.QueryRowContext(ctx, c.id).Scan(&text); err != nil {
			return nil, fmt.Errorf("sqlite: search: %w", err)
		}
		if !pq.MatchesVerbatim(text) {
			continue
		}
		c.hit.Snippet = store.Snippet(text, pq, 0)
		hits = append(hits, c.hit)
	}
	return hits, nil
}
