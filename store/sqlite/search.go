package sqlite

import (
	"bytes"
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
// leave the queue, see log.go), in a file of its own (archive.go). Its
// scope is two tokens, one naming the tenant and one the thread, so that a
// search ANDs its terms with its scope inside FTS5: the index itself
// narrows to the thread or the tenant, and the cost of a search does not
// grow with what other threads and tenants hold. The index file's rows
// carry them ahead of their terms (indexScope); the log's own index, in
// the migrations before the file, in a column of their own (scopeTerms).

// scopeTerms returns the scope column of an event of this thread, as the
// log's own index kept it.
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

// indexScope is the scope's tokens as a row of the index file carries them,
// ahead of its terms (archive.go's indexVersion 3).
func indexScope(tenant, thread string) string {
	return indexToken(tenantToken(tenant)) + " " + indexToken(threadToken(tenant, thread)) + " "
}

// indexToken is a scope token as the index file spells it: behind a "_",
// which no term holds.
func indexToken(tok string) string { return "_" + tok }

// indexScopes keeps the indexScope of the threads the index's writer moved
// last: a move's rows come from a few threads at a time, and two SHA-256
// a row were a tenth of its CPU.
var indexScopes struct {
	sync.Mutex
	m map[[2]string]string
}

// cachedIndexScope is indexScope through indexScopes, which it empties
// once it holds 4,096 threads.
func cachedIndexScope(tenant, thread string) string {
	k := [2]string{tenant, thread}
	indexScopes.Lock()
	defer indexScopes.Unlock()
	if sc, ok := indexScopes.m[k]; ok {
		return sc
	}
	if len(indexScopes.m) >= 4096 || indexScopes.m == nil {
		indexScopes.m = make(map[[2]string]string)
	}
	sc := indexScope(tenant, thread)
	indexScopes.m[k] = sc
	return sc
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
// What it reads is kept between searches (postingsCache), so that the next
// search of the thread reads only the messages appended since. Past these
// sizes the index finds the documents that hold a term. The bound on
// tokens is the cache's more than the first read's: at 100,000 a coding
// agent's 500-message thread (120,000 tokens, most of them tool output)
// took the index, and each of auto-recall's two searches a request ran
// FTS5 over most of the thread, or first moved a new thread's queue into
// the index, a write and an fsync on the request path, where the cache
// reads the one or two messages appended since (BenchmarkProxyLatency,
// sqlite/500).
const (
	scanMessages = 2_000
	scanTokens   = 400_000
)

// searchPath is how a thread's search finds its candidates.
type searchPath int

const (
	bySize       searchPath = iota // cachedThread when the thread is small, else useIndex
	useIndex                       // FTS5
	readThread                     // every document of the thread
	cachedThread                   // the thread's postings kept between searches (postingsCache), else readThread
)

// threadPath returns the path a thread's search takes in a thread of n
// messages and tokens tokens.
func (s *Store) threadPath(n, tokens int64) searchPath {
	if s.searchPath != bySize {
		return s.searchPath
	}
	if n <= scanMessages && tokens <= scanTokens {
		return cachedThread
	}
	return useIndex
}

// searchStmts are the fixed statements of a search, prepared once on the
// readers: with FTS5's own, preparing them was a tenth of a search.
type searchStmts struct {
	mu                          sync.Mutex
	thread, queued, read, texts *sql.Stmt
	queue, atMark               *sql.Stmt // a thread's queued messages, and its last seq the index holds (useIndex)
	since, terms                *sql.Stmt // the cached path's reads; terms the index's candidates' too
	cache                       postingsCache
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
		{&ps.thread, `SELECT messages, tokens, created, (SELECT deletes FROM archive_state), last_seq
			FROM threads WHERE tenant = ? AND id = ?`},
		{&ps.since, `SELECT e.seq, e.id, COALESCE(e.made_ref, e.ref, ''), t.terms FROM events e JOIN events_terms t ON t.id = e.id
			WHERE e.tenant = ? AND e.thread = ? AND e.seq >= ? ORDER BY e.seq`},
		// Messages' terms by id (the index's candidates of a thread, the
		// cache's reads), in id order.
		{&ps.terms, `SELECT id, terms FROM events_terms WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id`},
		// The highest id a message has: the queue spans the ids from the
		// index's mark to it (at most as many messages, and none exactly
		// when it is the mark: a row past the mark is a queued message).
		{&ps.queued, `SELECT COALESCE(max(id), 0) FROM events_terms`},
		{&ps.read, `SELECT e.id, t.terms FROM events e JOIN events_terms t ON t.id = e.id
			WHERE e.tenant = ? AND e.thread = ? ORDER BY e.seq`},
		{&ps.queue, queueQuery("")},
		// The thread's last seq at or below the index's mark: its events
		// past it are its queued messages (ids grow with seqs in a
		// thread). Walked back from the thread's end on its (tenant,
		// thread, seq) index, which holds each event's id (the unary +
		// keeps SQLite from walking the ids instead).
		{&ps.atMark, `SELECT COALESCE((SELECT seq FROM events WHERE tenant = ? AND thread = ? AND +id <= ?
			ORDER BY seq DESC LIMIT 1), 0)`},
		{&ps.texts, `SELECT id, tenant, thread, seq, COALESCE(made_ref, ref), role, tool, at, message FROM events
			WHERE id IN (SELECT value FROM json_each(?))`},
	} {
		stmt, err := db.PrepareContext(context.Background(), p.q) // shared: no caller's cancellation
		if err != nil {
			return nil, err
		}
		*p.to = stmt
	}
	st.thread, st.queued, st.read, st.texts = ps.thread, ps.queued, ps.read, ps.texts
	st.since, st.terms, st.queue, st.atMark = ps.since, ps.terms, ps.queue, ps.atMark
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
// Only the index lags behind the log (its queue, log.go). A thread's
// search that uses it also reads the thread's queued messages, in the same
// snapshot, so that it sees every acknowledged message without writing,
// while the thread has few queued (readQueued; other threads' queued
// messages, however many, are not read): moving the queue into the index
// first put a commit, an fsync and a small FTS5 segment (merged again
// later) on every auto-recall of a large thread, once per proxied request.
// A longer queue (a new thread's whole history, which the search would
// read every time) is moved into the index first (catchUpIndex). A
// tenant's search reads the whole queue beside the index (its tenant's
// rows: the events join keeps them), in the same query as the index's
// candidates and so in their (thread, seq) order, while the queue holds at
// most tenantReadQueued messages: moving it first put a move of up to a
// batch (FTS5's work, a commit and an fsync) on nearly every tenant's
// search while appends went on.
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
	maxQueued := int64(readQueued)
	if q.Thread == "" {
		maxQueued = tenantReadQueued
	}
	defer s.moveAhead()
	x, _ := s.index() // without one (it could not be opened), the log is read
	if x != nil && x.w == nil {
		maxQueued = -1 // read-only: the queue cannot move (readCandidates reads it)
	}
	hits, err := s.searchSnapshot(ctx, stmts, tenant, q, pq, limit, maxQueued)
	if errors.Is(err, errIndexQueued) {
		if err := s.catchUpIndex(ctx); err != nil {
			return nil, err
		}
		// What is queued after this was acknowledged after the search
		// began: it need not be seen.
		hits, err = s.searchSnapshot(ctx, stmts, tenant, q, pq, limit, -1)
	}
	return hits, err
}

// moveAhead moves the archive index's queue into the index in the
// background (moveIndex) once a search finds half a batch queued (by this
// process's count), so that the next search need not read it.
func (s *Store) moveAhead() {
	if s.queued.Load() >= indexBatch/2 {
		s.moveIndex()
	}
}

// readQueued is the most of its own queued messages a thread's search
// reads beside the index rather than move the queue into it: reading a
// queued message costs every search about what indexing it costs once.
// Other threads' queued messages do not count (queueQuery does not read
// them).
const readQueued = 64

// tenantReadQueued is the most queued messages (of every tenant: the queue
// is read by id) a tenant's search reads beside the index rather than move
// the queue into it. Appends move the queue at indexBatch, so that only a
// queue that could not move (a move failing, or a restart's) or that grew
// while a move was under way reaches it.
var tenantReadQueued = 2 * indexBatch

// errIndexQueued: the search needs the index, and more messages wait in
// its queue than it reads.
var errIndexQueued = errors.New("sqlite: search: the index has messages queued")

// searchSnapshot is Search in one read snapshot. Unless maxQueued is
// negative, it returns errIndexQueued rather than use an index whose
// queue spans more than maxQueued ids.
func (s *Store) searchSnapshot(ctx context.Context, stmts *searchStmts, tenant string, q store.SearchQuery, pq fulltext.ParsedQuery, limit int, maxQueued int64) ([]store.Hit, error) {

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
	var (
		n, tokens, lastSeq int64
		born               birth
	)
	if q.Thread != "" {
		err = tx.StmtContext(ctx, stmts.thread).QueryRowContext(ctx, tenant, q.Thread).Scan(&n, &tokens, &born.created, &born.deletes, &lastSeq)
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
	if x, _ := s.index(); path == useIndex && (x == nil || x.w == nil && q.Thread == "") {
		// Read-only, without an index, or (a tenant's search) with a
		// queue that cannot move: the log is read.
		path = readThread
	}
	var (
		ids   []int64
		tally *fulltext.Tally
		texts *hitTexts
	)
	if path == cachedThread {
		path = readThread // unless the cache serves the search
		if !filtered {
			var done func()
			tally, ids, texts, done, err = stmts.cache.search(ctx, stmts, tx, tenant, q.Thread, born, lastSeq, n, pq)
			if done != nil {
				defer done()
			}
			if err != nil {
				return nil, fmt.Errorf("sqlite: search: %w", err)
			}
		}
	}
	if tally == nil {
		tally, ids, err = s.readCandidates(ctx, stmts, tx, tenant, q, pq, path, filtered, maxQueued, lastSeq, n, where, args)
		if err != nil {
			return nil, err
		}
	}
	return s.hits(ctx, stmts, tx, tenant, q, pq, limit, n, tally, ids, texts)
}

// readCandidates finds the candidates of a search by the index (useIndex)
// or by reading the thread (readThread), and counts their terms.
//
// A thread's search counts the thread's own queued messages against
// maxQueued (its last seq, lastSeq, past the last the index holds); a
// tenant's, the ids the whole queue spans.
func (s *Store) readCandidates(ctx context.Context, stmts *searchStmts, tx *sql.Tx, tenant string, q store.SearchQuery, pq fulltext.ParsedQuery, path searchPath, filtered bool, maxQueued, lastSeq, n int64, where []string, args []any) (*fulltext.Tally, []int64, error) {
	scope := `"` + indexToken(tenantToken(tenant)) + `"`
	if q.Thread != "" {
		scope = `"` + indexToken(threadToken(tenant, q.Thread)) + `"`
	}
	match := scope + " AND (" + pq.Union(ftsTerm, " OR ") + ")"

	// The index's candidates (ids, in the index's file, read in a snapshot
	// of their own: see archive.go for why any will do) and the mark up to
	// which it holds the log's rows.
	var (
		found  []byte // the index's ids as a JSON array
		mark   int64
		atMark int64 // a thread's last seq the index holds
		high   int64 // a tenant's: the queue's last id, when read
	)
	if path == useIndex {
		x, err := s.index()
		if err != nil {
			return nil, nil, err
		}
		found, mark, err = x.match(ctx, match, func(mark int64) error {
			if q.Thread != "" {
				if err := tx.StmtContext(ctx, stmts.atMark).QueryRowContext(ctx, tenant, q.Thread, mark).Scan(&atMark); err != nil {
					return err
				}
				if maxQueued >= 0 && lastSeq-atMark > maxQueued {
					return errIndexQueued
				}
				return nil
			}
			if maxQueued < 0 {
				return nil
			}
			if err := tx.StmtContext(ctx, stmts.queued).QueryRowContext(ctx).Scan(&high); err != nil {
				return err
			}
			if high-mark > maxQueued {
				return errIndexQueued
			}
			return nil
		})
		if errors.Is(err, errIndexQueued) {
			return nil, nil, err
		}
		if err != nil {
			return nil, nil, fmt.Errorf("sqlite: search: %w", err)
		}
	}

	// The candidates carry their terms, not their text: bodies can be
	// megabytes, and only those examined below are read. In a thread, id
	// order is seq order; a tenant's candidates come in (thread, seq) order
	// (Rank breaks ties by candidate order, the same on every backend).
	// The index's ids are joined to the log's rows: one the log no longer
	// holds (a deleted message's, archive.go) is no candidate.
	var (
		rows *sql.Rows
		err  error
	)
	switch {
	case path == readThread && !filtered && q.Thread != "":
		rows, err = tx.StmtContext(ctx, stmts.read).QueryContext(ctx, args...)
	case path == readThread:
		order := "e.seq"
		if q.Thread == "" {
			order = "e.thread, e.seq"
		}
		rows, err = tx.QueryContext(ctx, `SELECT e.id, t.terms FROM events e JOIN events_terms t ON t.id = e.id
			WHERE `+strings.Join(where, " AND ")+` ORDER BY `+order, args...)
	case q.Thread != "" && !filtered:
		// The scope is in the index: nothing of events is needed.
		rows, err = tx.StmtContext(ctx, stmts.terms).QueryContext(ctx, string(found))
	case q.Thread == "":
		// The index's candidates and the queue (the log's rows past the
		// mark in this snapshot), in (thread, seq) order together.
		conds := where
		if byID(found, max(high-mark, 0), n) {
			conds = append([]string{"+e.tenant = ?"}, where[1:]...)
		}
		rows, err = tx.QueryContext(ctx, `SELECT e.id, t.terms FROM events e JOIN events_terms t ON t.id = e.id
			WHERE (e.id IN (SELECT value FROM json_each(?)) OR e.id > ?) AND `+strings.Join(conds, " AND ")+` ORDER BY e.thread, e.seq`,
			append([]any{string(found), mark}, args...)...)
	default:
		rows, err = tx.QueryContext(ctx, `SELECT e.id, t.terms FROM events e JOIN events_terms t ON t.id = e.id
			WHERE e.id IN (SELECT value FROM json_each(?)) AND `+strings.Join(where, " AND ")+` ORDER BY e.thread, e.seq`,
			append([]any{string(found)}, args...)...)
	}
	tally := pq.Tally()
	ids, err := addCandidates(tally, nil, rows, err)
	if err == nil && path == useIndex && q.Thread != "" {
		// The thread's queued messages, not yet in the index: all of
		// them come after the indexed ones, in seq (so id) order.
		if filtered {
			rows, err = tx.QueryContext(ctx, queueQuery(" AND "+strings.Join(where[2:], " AND ")), append([]any{tenant, q.Thread, atMark, mark}, args[2:]...)...)
		} else {
			rows, err = tx.StmtContext(ctx, stmts.queue).QueryContext(ctx, tenant, q.Thread, atMark, mark)
		}
		ids, err = addCandidates(tally, ids, rows, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: search: %w", err)
	}
	return tally, ids, nil
}

// byID reports whether a tenant's search reads its candidates (found, a
// JSON array of ids, and queued more) by id, then sorts them, rather than
// walk the tenant's n messages in (thread, seq) order on its index and keep
// the candidates ("+" keeps the index out of the query). SQLite walked the
// tenant's messages whatever their number: 13 ms at 80,000 messages for a
// term that three of them hold, where reading them by id took 2. Reading by
// id costs several times a step of the walk, which a term most messages
// hold pays for (BenchmarkTenantSearch).
func byID(found []byte, queued, n int64) bool {
	candidates := queued
	if len(found) > 2 { // not "[]"
		candidates += int64(bytes.Count(found, []byte(","))) + 1
	}
	return candidates*tenantWalkRatio < n
}

// tenantWalkRatio: a tenant's search reads its candidates by id while they
// are fewer than one in tenantWalkRatio of its messages (byID); a variable
// for BenchmarkTenantSearch, which runs each plan alone beside it.
var tenantWalkRatio int64 = 8

// queueQuery reads a thread's queued messages that meet extra, in seq
// order: its events past its last seq the index holds (atMark), whose ids
// are past the index's mark (log.go). Its arguments: tenant, thread, the
// seq and the mark. The thread's (tenant, thread, seq) index drives it, so
// that it reads the thread's queued messages only, however long the queue
// of every other thread is.
func queueQuery(extra string) string {
	return `SELECT t.id, t.terms FROM events e JOIN events_terms t ON t.id = e.id
		WHERE e.tenant = ? AND e.thread = ? AND e.seq > ? AND e.id > ?` + extra + `
		ORDER BY e.seq`
}

// addCandidates counts the terms of rows' documents (id, terms) in tally
// and returns ids with theirs appended; a document without any of the
// query's terms is not a candidate. It closes rows; err is the query's.
func addCandidates(tally *fulltext.Tally, ids []int64, rows *sql.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id   int64
			body sql.RawBytes // read in place: only its counts are kept
		)
		if err := rows.Scan(&id, &body); err != nil {
			return nil, err
		}
		if !tally.AddBody(body) {
			tally.RemoveLast() // no term: not a candidate (reading a thread or the queue finds these)
			continue
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// hits reads the texts of the ranked candidates, a page at a time, and
// returns the first limit that hold the query's verbatim terms. texts,
// when set, holds candidates' texts read by earlier searches, and keeps
// those read now.
func (s *Store) hits(ctx context.Context, stmts *searchStmts, tx *sql.Tx, tenant string, q store.SearchQuery, pq fulltext.ParsedQuery, limit int, n int64, tally *fulltext.Tally, ids []int64, texts *hitTexts) ([]store.Hit, error) {

	// Texts are read a page of ranked candidates at a time, in one query
	// each.
	var hits []store.Hit
	// The ranking is drawn from a heap (Tally.Ranked): only as many
	// candidates as the pages take are ordered.
	next, stop := iter.Pull(tally.Ranked(int(n)))
	defer stop()
	stmt := tx.StmtContext(ctx, stmts.texts)
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
		byID := make(map[int64]*hitText, len(ranked))
		page := make([]int64, 0, len(ranked))
		for _, r := range ranked {
			id := ids[r.Index]
			if ht := texts.get(id); ht != nil {
				byID[id] = ht
			} else {
				page = append(page, id)
			}
		}
		if len(page) > 0 {
			if err := readTexts(ctx, stmt, page, byID); err != nil {
				return nil, err
			}
		}
		for _, r := range ranked {
			if len(hits) == limit {
				break
			}
			ht := byID[ids[r.Index]]
			if ht == nil {
				return nil, fmt.Errorf("sqlite: search: indexed event %d is not in events", ids[r.Index])
			}
			h := ht.hit
			if ht.tenant != tenant || (q.Thread != "" && h.Thread != q.Thread) {
				continue // a scope hash collision
			}
			if !ht.decoded {
				m, err := backend.DecodeMessage(ht.js)
				if err != nil {
					return nil, fmt.Errorf("sqlite: search: event %s/%d: stored message: %w", h.Thread, h.Seq, err)
				}
				ht.text, ht.js, ht.decoded = fulltext.SearchText(*m, h.At), "", true
				texts.put(ids[r.Index], ht)
			}
			if !pq.MatchesVerbatim(ht.text) {
				continue
			}
			h.Snippet = fulltext.Snippet(ht.text, pq, 0)
			h.Score = r.Score
			hits = append(hits, h)
		}
	}
	return hits, nil
}

// hitText is what a hit needs of its event: the hit without its score and
// snippet, its tenant, and the text a search matches
// (fulltext.SearchText).
type hitText struct {
	hit     store.Hit
	tenant  string
	js      string // the stored message, until decoded
	text    string
	decoded bool
}

// readTexts reads the events at ids with stmt, into byID.
func readTexts(ctx context.Context, stmt *sql.Stmt, ids []int64, byID map[int64]*hitText) error {
	list, _ := json.Marshal(ids)
	rows, err := stmt.QueryContext(ctx, string(list))
	if err != nil {
		return fmt.Errorf("sqlite: search: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id        int64
			ht        hitText
			role      string
			ref, tool sql.NullString
			at        int64
		)
		if err := rows.Scan(&id, &ht.tenant, &ht.hit.Thread, &ht.hit.Seq, &ref, &role, &tool, &at, &ht.js); err != nil {
			return fmt.Errorf("sqlite: search: %w", err)
		}
		ht.hit.Ref, ht.hit.Role, ht.hit.Tool, ht.hit.At = ref.String, message.Role(role), tool.String, backend.FromNanos(at)
		byID[id] = &ht
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: search: %w", err)
	}
	return nil
}

// The postings cache (cachedThread). A small thread's search would read
// every document of the thread and count its terms (readThread): the
// search auto-recall runs at every request, on the same thread, which has
// grown by a message or two since. The cache keeps, per thread, what the
// ranking needs of every message (fulltext.Posting lists of each term,
// each message's length in terms and its event id), read once and then
// extended by the messages appended since, so that a search reads only
// those, and ranks from postings (fulltext.Tally.AddPostings: the counts,
// hence the ranking, are exactly readThread's).
//
// An entry is checked against the thread's row and its events in the
// search's own snapshot, at every search: it serves only the same life of
// the thread (birth: its created, and the file's count of deleted threads,
// so that a thread deleted and appended to again is another, even under a
// stopped clock), only a snapshot that holds at least what it holds (an
// older one reads the thread); the last message it holds must still be
// there, the same event (seq, id, ref and terms), and its message count
// must then be the thread's. Any other case rebuilds it from the thread's
// rows. A delete of any thread rebuilds every entry once. Filtered
// searches and a tenant's do not use it.
type postingsCache struct {
	mu      sync.Mutex
	threads map[[2]string]*threadPostings
	terms   int64 // held by every entry
	clock   int64 // the last use's stamp
	// max is the most terms the entries hold together (0: maxCachedTerms):
	// past it, the least recently used go.
	max int64
}

// maxCachedTerms bounds the cache: about 12 bytes a term in its postings,
// and a map entry per distinct term of a thread.
const maxCachedTerms = 2_000_000

// birth tells one life of a thread from another: its row's created, and
// how many threads the file had seen deleted (archive_state.deletes,
// schema 10) when it was read. A thread deleted and made again differs in
// the count even when the clock stood still.
type birth struct{ created, deletes int64 }

// threadPostings is one thread's entry. Its mutex is held while it is
// read or extended.
type threadPostings struct {
	tenant, thread string

	// Under the cache's mutex.
	used   int64 // stamp of the last use
	weight int64 // the terms the cache counts for it

	mu       sync.Mutex
	born     birth
	lastSeq  int64 // its last_seq when last extended
	lastMsg  int64 // the seq of the last message held, 0 for none
	lastID   int64 // its event id
	lastRef  string
	lastHash uint64  // and its terms' hash (FNV-1a)
	messages int64   // messages held
	terms    int64   // their terms
	ids      []int64 // by seq-1: a message's event id, 0 for other events
	lens     []int32 // by seq-1: a message's length in terms
	postings map[string]*fulltext.Posting
	texts    hitTexts

	// While a search reads it: where a phrase's documents' terms are read.
	ctx   context.Context
	tx    *sql.Tx
	stmts *searchStmts
}

// Posting, Len and Terms are the entry as fulltext.Tally.AddPostings reads
// it.
func (tp *threadPostings) Posting(tok string) *fulltext.Posting { return tp.postings[tok] }
func (tp *threadPostings) Len(seq int64) int                    { return int(tp.lens[seq-1]) }

// Terms reads the terms of the messages at seqs, in the search's snapshot.
func (tp *threadPostings) Terms(seqs []int64) ([][]string, error) {
	want := make([]int64, len(seqs))
	for i, seq := range seqs {
		want[i] = tp.ids[seq-1]
	}
	list, _ := json.Marshal(want)
	rows, err := tp.tx.StmtContext(tp.ctx, tp.stmts.terms).QueryContext(tp.ctx, string(list))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byID := make(map[int64][]string, len(seqs))
	for rows.Next() {
		var (
			id   int64
			body sql.RawBytes
		)
		if err := rows.Scan(&id, &body); err != nil {
			return nil, err
		}
		var terms []string
		eachBodyTerm(body, func(tok []byte) { terms = append(terms, string(tok)) })
		byID[id] = terms
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([][]string, len(seqs))
	for i, id := range want {
		t, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("event %d has no terms", id)
		}
		out[i] = t
	}
	return out, nil
}

// eachBodyTerm calls fn with each term of a stored body, split on spaces
// as fulltext.Tally.AddBody splits it.
func eachBodyTerm(body []byte, fn func(tok []byte)) {
	for i := 0; i < len(body); {
		if body[i] == ' ' {
			i++
			continue
		}
		j := i + 1
		for j < len(body) && body[j] != ' ' {
			j++
		}
		fn(body[i:j])
		i = j
	}
}

// search ranks the thread's messages for pq from its entry, brought up to
// the snapshot of tx, in which the thread was born so, and its row says
// lastSeq and messages.
// It returns a nil Tally when the entry cannot serve this snapshot: the
// caller reads the thread instead.
//
// With a Tally it returns the entry's hitTexts, valid in this snapshot, and
// done, which the caller calls once it has read the hits: the entry stays
// locked until then. done is nil when the Tally is.
func (c *postingsCache) search(ctx context.Context, stmts *searchStmts, tx *sql.Tx, tenant, thread string, born birth, lastSeq, messages int64, pq fulltext.ParsedQuery) (_ *fulltext.Tally, _ []int64, _ *hitTexts, done func(), _ error) {
	key := [2]string{tenant, thread}
	c.mu.Lock()
	if c.threads == nil {
		c.threads = map[[2]string]*threadPostings{}
	}
	tp := c.threads[key]
	if tp == nil {
		tp = &threadPostings{tenant: tenant, thread: thread}
		c.threads[key] = tp
	}
	c.clock++
	tp.used = c.clock
	c.mu.Unlock()

	tp.mu.Lock()
	ok, err := tp.update(ctx, stmts, tx, born, lastSeq, messages)
	c.resize(key, tp, tp.cost())
	if err != nil || !ok {
		tp.mu.Unlock()
		return nil, nil, nil, nil, err
	}
	tp.ctx, tp.tx, tp.stmts = ctx, tx, stmts
	tally := pq.Tally()
	seqs, err := tally.AddPostings(tp, nil)
	tp.ctx, tp.tx, tp.stmts = nil, nil, nil
	if err != nil {
		tp.mu.Unlock()
		return nil, nil, nil, nil, err
	}
	ids := make([]int64, len(seqs))
	for i, seq := range seqs {
		ids[i] = tp.ids[seq-1]
	}
	return tally, ids, &tp.texts, func() {
		c.resize(key, tp, tp.cost())
		tp.mu.Unlock()
	}, nil
}

// cost is what the entry counts against maxCachedTerms: its terms, and
// its texts at about what a term costs.
func (tp *threadPostings) cost() int64 { return tp.terms + tp.texts.bytes/12 }

// hitTexts are the texts of a thread's events that its searches read for
// their hits (hitText, by event id), kept in the thread's entry: the hits
// of auto-recall's searches, two a request, are mostly the same events
// from one request to the next, and reading their messages again (and
// decoding them) was half of a search's time in a 500-message thread. An
// event id names one event of the thread for the life the entry holds
// (reset clears them with the postings), and the entry serves only
// snapshots that hold its messages. They are bounded per entry
// (maxThreadTexts) and weigh in the cache's bound.
type hitTexts struct {
	byID  map[int64]*hitText
	bytes int64
}

const maxThreadTexts = 8 << 20

// get returns the text kept for id, or nil.
func (t *hitTexts) get(id int64) *hitText {
	if t == nil {
		return nil
	}
	return t.byID[id]
}

// put keeps ht (decoded) for id; past the bound, the texts kept so far go.
func (t *hitTexts) put(id int64, ht *hitText) {
	if t == nil {
		return
	}
	if _, ok := t.byID[id]; ok {
		return
	}
	n := int64(len(ht.text)+len(ht.tenant)+len(ht.hit.Thread)+len(ht.hit.Ref)+len(ht.hit.Tool)) + 96
	if t.bytes+n > maxThreadTexts {
		t.byID, t.bytes = nil, 0
		if n > maxThreadTexts {
			return
		}
	}
	if t.byID == nil {
		t.byID = map[int64]*hitText{}
	}
	t.byID[id] = ht
	t.bytes += n
}

// resize sets the weight of key's entry tp to terms, and drops the least
// recently used other entries while the cache holds too much (an entry
// too large alone goes too).
func (c *postingsCache) resize(key [2]string, tp *threadPostings, terms int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.threads[key] != tp {
		return // dropped meanwhile: it no longer counts
	}
	c.terms += terms - tp.weight
	tp.weight = terms
	limit := c.max
	if limit == 0 {
		limit = maxCachedTerms
	}
	if terms > limit {
		delete(c.threads, key)
		c.terms -= terms
	}
	for c.terms > limit {
		var (
			oldKey [2]string
			old    *threadPostings
		)
		for k, e := range c.threads {
			if k != key && (old == nil || e.used < old.used) {
				oldKey, old = k, e
			}
		}
		if old == nil {
			return
		}
		delete(c.threads, oldKey)
		c.terms -= old.weight
	}
}

// update brings the entry to the snapshot in which the thread was born so
// and whose thread row says lastSeq and messages, and reports whether it
// holds that snapshot.
func (tp *threadPostings) update(ctx context.Context, stmts *searchStmts, tx *sql.Tx, born birth, lastSeq, messages int64) (bool, error) {
	if tp.postings == nil || tp.born != born {
		tp.reset(born)
	} else if tp.lastSeq > lastSeq {
		return false, nil // an older snapshot than the entry's
	}
	// Even when the thread's row says what the entry holds, the last
	// message is checked (extend): a file put back from a copy can hold
	// another thread under the same name, birth and counts.
	ok, err := tp.extend(ctx, stmts, tx, lastSeq, messages)
	if err != nil || ok {
		return ok, err
	}
	// The last message held is gone or another event, or the count
	// differs: read the thread whole.
	tp.reset(born)
	return tp.extend(ctx, stmts, tx, lastSeq, messages)
}

func (tp *threadPostings) reset(born birth) {
	tp.born, tp.lastSeq, tp.lastMsg, tp.lastID, tp.lastRef, tp.lastHash = born, 0, 0, 0, "", 0
	tp.messages, tp.terms, tp.ids, tp.lens = 0, 0, nil, nil
	tp.postings = map[string]*fulltext.Posting{}
	tp.texts = hitTexts{}
}

// extend adds the messages past the last one held, after checking that
// that one is still there, the same event, and reports whether the entry
// then holds the thread's messages up to lastSeq. When it does not, the
// entry must be reset.
func (tp *threadPostings) extend(ctx context.Context, stmts *searchStmts, tx *sql.Tx, lastSeq, messages int64) (bool, error) {
	rows, err := tx.StmtContext(ctx, stmts.since).QueryContext(ctx, tp.tenant, tp.thread, max(tp.lastMsg, 1))
	if err != nil {
		return false, err
	}
	defer rows.Close()
	check := tp.lastMsg > 0 // the first row must be the last message held
	for rows.Next() {
		var (
			seq, id int64
			ref     string
			body    sql.RawBytes
		)
		if err := rows.Scan(&seq, &id, &ref, &body); err != nil {
			return false, err
		}
		if check {
			if seq != tp.lastMsg || id != tp.lastID || ref != tp.lastRef || termsHash(body) != tp.lastHash {
				return false, nil
			}
			check = false
			continue
		}
		if seq > lastSeq {
			return false, nil // not this snapshot's
		}
		tp.add(seq, id, ref, body)
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	if check {
		return false, nil // the last message held is gone
	}
	tp.lastSeq = lastSeq
	return tp.messages == messages, nil
}

// add adds the message at seq, past every one held.
func (tp *threadPostings) add(seq, id int64, ref string, body []byte) {
	for int64(len(tp.ids)) < seq-1 {
		tp.ids, tp.lens = append(tp.ids, 0), append(tp.lens, 0)
	}
	n := 0
	eachBodyTerm(body, func(tok []byte) {
		n++
		p := tp.postings[string(tok)]
		if p == nil {
			p = &fulltext.Posting{}
			tp.postings[string(tok)] = p
		}
		p.Add(seq)
	})
	tp.ids, tp.lens = append(tp.ids, id), append(tp.lens, int32(n))
	tp.lastMsg, tp.lastID, tp.lastRef, tp.lastHash = seq, id, ref, termsHash(body)
	tp.messages++
	tp.terms += int64(n)
}

// termsHash is FNV-1a of a message's stored terms.
func termsHash(body []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range body {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// ftsTerm spells a term for the index's MATCH: a phrase as all of its words
// (the index keeps no positions since archive.go's indexVersion 2), which finds
// every row holding the phrase and some that do not; the Tally counts the
// phrase itself in each candidate's terms, and a candidate without any term
// is no hit.
func ftsTerm(t fulltext.SearchTerm) string {
	if len(t.Tokens) == 1 {
		return fulltext.FTS5Phrase(t)
	}
	parts := make([]string, len(t.Tokens))
	for i, tok := range t.Tokens {
		parts[i] = fulltext.FTS5Phrase(fulltext.SearchTerm{Tokens: []string{tok}})
	}
	return "(" + strings.Join(parts, " AND ") + ")"
}
