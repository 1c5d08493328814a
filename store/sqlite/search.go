package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

const maxLimit = 1000

// The archive index: each message event (id = events.id) has its index
// terms (fulltext.IndexBody of fulltext.SearchText) in events_terms, which
// searches read, and events_fts indexes them beside its scope (once they
// leave the queue, see log.go). The scope column carries two tokens, one naming
// the tenant and one the thread, so that a search ANDs its terms with its
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

// A thread's search reads the thread's terms directly, without the index,
// when the thread is small: FTS5 costs a fixed few hundred microseconds a
// query (it seeks every term in every segment) and about twice as much per
// candidate as a range of events_terms rows costs per row, and a
// natural-language query (auto-recall's) finds most of a thread anyway.
// Past these sizes the index finds the documents that hold a term.
const (
	scanMessages = 2_000
	scanTokens   = 100_000
)

// searchPath is how a thread's search finds its candidates.
type searchPath int

const (
	bySize     searchPath = iota // readThread when the thread is small, else useIndex
	useIndex                     // FTS5
	readThread                   // every document of the thread
)

// threadPath returns the path a thread's search takes in a thread of n
// messages and tokens tokens.
func (s *Store) threadPath(n, tokens int64) searchPath {
	if s.searchPath != bySize {
		return s.searchPath
	}
	if n <= scanMessages && tokens <= scanTokens {
		return readThread
	}
	return useIndex
}

// searchStmts are the fixed statements of a search, prepared once on the
// readers: with FTS5's own, preparing them was a tenth of a search.
type searchStmts struct {
	mu                                 sync.Mutex
	thread, queued, read, match, texts *sql.Stmt
}

// get returns the statements, preparing them on first use.
func (st *searchStmts) get(db *sql.DB) (*searchStmts, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.texts != nil {
		return st, nil
	}
	var ps searchStmts
	for _, p := range []struct {
		to **sql.Stmt
		q  string
	}{
		{&ps.thread, `SELECT messages, tokens FROM threads WHERE tenant = ? AND id = ?`},
		{&ps.queued, queuedQuery},
		{&ps.read, `SELECT e.id, t.terms FROM events e JOIN events_terms t ON t.id = e.id
			WHERE e.tenant = ? AND e.thread = ? ORDER BY e.seq`},
		{&ps.match, `SELECT f.rowid, t.terms FROM events_fts f JOIN events_terms t ON t.id = f.rowid
			WHERE events_fts MATCH ? ORDER BY f.rowid`},
		{&ps.texts, `SELECT id, tenant, thread, seq, ref, role, tool, at, message FROM events
			WHERE id IN (SELECT value FROM json_each(?))`},
	} {
		stmt, err := db.PrepareContext(context.Background(), p.q) // shared: no caller's cancellation
		if err != nil {
			return nil, err
		}
		*p.to = stmt
	}
	st.thread, st.queued, st.read, st.match, st.texts = ps.thread, ps.queued, ps.read, ps.match, ps.texts
	return st, nil
}

// Search implements store.Archive. The candidates are every document of
// the scope (the thread, or the tenant) containing any term: FTS5 finds
// them from a MATCH expression built only of quoted phrases, so user text
// never reaches FTS5 syntax, or, in a small thread, every document of the
// thread is read and those without a term dropped. A fulltext.Tally counts
// their terms and ranks them by BM25 with the scope's statistics (never
// another tenant's); verbatim identifier terms are then checked on each
// candidate's text, best first, until Limit hits are found.
//
// Only the index lags behind the log (its queue, log.go): a search that
// uses it first moves the queue into it (catchUpIndex), so that it sees
// every acknowledged message; reading a thread needs no such write.
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
	stmts, err := s.search.get(s.r)
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}
	hits, err := s.searchSnapshot(ctx, stmts, tenant, q, pq, limit, true)
	if errors.Is(err, errIndexQueued) {
		if err := s.catchUpIndex(ctx); err != nil {
			return nil, err
		}
		// What is queued after this was acknowledged after the search
		// began: it need not be seen.
		hits, err = s.searchSnapshot(ctx, stmts, tenant, q, pq, limit, false)
	}
	return hits, err
}

// errIndexQueued: the search needs the index, and messages wait in its
// queue.
var errIndexQueued = errors.New("sqlite: search: the index has messages queued")

// searchSnapshot is Search in one read snapshot. With checkQueue, it
// returns errIndexQueued rather than use an index that lacks queued
// messages.
func (s *Store) searchSnapshot(ctx context.Context, stmts *searchStmts, tenant string, q store.SearchQuery, pq fulltext.ParsedQuery, limit int, checkQueue bool) ([]store.Hit, error) {

	// The scope and the filters, as conditions on events.
	where := []string{"e.tenant = ?"}
	args := []any{tenant}
	if q.Thread != "" {
		where, args = append(where, "e.thread = ?"), append(args, q.Thread)
	}
	filtered := false
	add := func(cond string, v any) {
		where, args = append(where, cond), append(args, v)
		filtered = true
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
	scope := `"` + tenantToken(tenant) + `"`
	if q.Thread != "" {
		scope = `"` + threadToken(tenant, q.Thread) + `"`
	}
	match := "scope : " + scope + " AND body : (" + pq.Union(fulltext.FTS5Phrase, " OR ") + ")"

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

	// The scope's document count (every message event is indexed) and, for
	// a thread, its size.
	var n, tokens int64
	if q.Thread != "" {
		err = tx.StmtContext(ctx, stmts.thread).QueryRowContext(ctx, tenant, q.Thread).Scan(&n, &tokens)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
	} else {
		err = tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(messages), 0) FROM threads WHERE tenant = ?`, tenant).Scan(&n)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}

	path := useIndex
	if q.Thread != "" {
		path = s.threadPath(n, tokens)
	}
	if path == useIndex && checkQueue {
		var queued bool
		if err := tx.StmtContext(ctx, stmts.queued).QueryRowContext(ctx).Scan(&queued); err != nil {
			return nil, fmt.Errorf("sqlite: search: %w", err)
		}
		if queued {
			return nil, errIndexQueued
		}
	}

	// The candidates carry their terms, not their text: bodies can be
	// megabytes, and only those examined below are read. In a thread, id
	// order is seq order; a tenant's candidates come in (thread, seq) order
	// (Rank breaks ties by candidate order, the same on every backend).
	var rows *sql.Rows
	switch {
	case path == readThread && !filtered:
		rows, err = tx.StmtContext(ctx, stmts.read).QueryContext(ctx, args...)
	case path == readThread:
		rows, err = tx.QueryContext(ctx, `SELECT e.id, t.terms FROM events e JOIN events_terms t ON t.id = e.id
			WHERE `+strings.Join(where, " AND ")+` ORDER BY e.seq`, args...)
	case q.Thread != "" && !filtered:
		// The scope is in the index: nothing of events is needed.
		rows, err = tx.StmtContext(ctx, stmts.match).QueryContext(ctx, match)
	default:
		rows, err = tx.QueryContext(ctx, `SELECT e.id, t.terms FROM events_fts f JOIN events e ON e.id = f.rowid JOIN events_terms t ON t.id = f.rowid
			WHERE events_fts MATCH ? AND `+strings.Join(where, " AND ")+` ORDER BY e.thread, e.seq`, append([]any{match}, args...)...)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}
	var ids []int64
	tally := pq.Tally()
	for rows.Next() {
		var (
			id   int64
			body sql.RawBytes // read in place: only its counts are kept
		)
		if err := rows.Scan(&id, &body); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: search: %w", err)
		}
		if !tally.AddBody(body) {
			tally.RemoveLast() // no term: not a candidate (only reading a thread finds these)
			continue
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}

	// Texts are read a page of ranked candidates at a time, in one query
	// each.
	var hits []store.Hit
	// The ranking is drawn from a heap (Tally.Ranked): only as many
	// candidates as the pages take are ordered.
	next, stop := iter.Pull(tally.Ranked(int(n)))
	defer stop()
	texts := tx.StmtContext(ctx, stmts.texts)
	for len(hits) < limit {
		var ranked []fulltext.Scored
		for range limit - len(hits) + 2 {
			r, ok := next()
			if !ok {
				break
			}
			ranked = append(ranked, r)
		}
		if len(ranked) == 0 {
			break
		}
		page := make([]int64, 0, len(ranked))
		for _, r := range ranked {
			page = append(page, ids[r.Index])
		}
		list, _ := json.Marshal(page)
		rows, err := texts.QueryContext(ctx, string(list))
		if err != nil {
			return nil, fmt.Errorf("sqlite: search: %w", err)
		}
		type stored struct {
			hit    store.Hit
			tenant string
			js     string
		}
		byID := make(map[int64]*stored, len(page))
		for rows.Next() {
			var (
				id        int64
				st        stored
				role      string
				ref, tool sql.NullString
				at        int64
			)
			if err := rows.Scan(&id, &st.tenant, &st.hit.Thread, &st.hit.Seq, &ref, &role, &tool, &at, &st.js); err != nil {
				rows.Close()
				return nil, fmt.Errorf("sqlite: search: %w", err)
			}
			st.hit.Ref, st.hit.Role, st.hit.Tool, st.hit.At = ref.String, message.Role(role), tool.String, backend.FromNanos(at)
			byID[id] = &st
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("sqlite: search: %w", err)
		}
		for _, r := range ranked {
			if len(hits) == limit {
				break
			}
			st := byID[ids[r.Index]]
			if st == nil {
				return nil, fmt.Errorf("sqlite: search: indexed event %d is not in events", ids[r.Index])
			}
			h := st.hit
			if st.tenant != tenant || (q.Thread != "" && h.Thread != q.Thread) {
				continue // a scope hash collision
			}
			m, err := backend.DecodeMessage(st.js)
			if err != nil {
				return nil, fmt.Errorf("sqlite: search: event %s/%d: stored message: %w", h.Thread, h.Seq, err)
			}
			text := fulltext.SearchText(*m, h.At)
			if !pq.MatchesVerbatim(text) {
				continue
			}
			h.Snippet = fulltext.Snippet(text, pq, 0)
			h.Score = r.Score
			hits = append(hits, h)
		}
	}
	return hits, nil
}
