package postgres

import (
	"container/list"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

// The term cache. A small thread's search reads every message's terms
// (search.go), and sending them is most of what such a search costs, on
// the server and in the client, however little the thread changed since
// its last search: auto-recall searches the current thread at every
// request. So a replica keeps, for the small threads it searched lately,
// each message's terms as ids into the thread's vocabulary, and a search
// reads from the database only the messages appended since, in the
// statement that reads the thread's row.
//
// This is safe because a thread's events are never rewritten: the events
// up to a last seq, once seen, stay what they were until the thread is
// deleted. The statement checks that the thread is the one cached (same
// created time, its last seq not behind, the cached last message still
// there under its ref); otherwise it sends every message and the entry
// is rebuilt. The count of messages (BM25's N) and the new messages come
// from that one statement, so a search still sees one snapshot. A hit's
// text is read from the database the first time the message is a hit,
// then kept with it: a thread's next searches, whose hits are mostly the
// same messages, are then one round trip.
//
// A thread is cached only while it is small (what readThread would read).
// A lossy message (its tsvector lacks positions or lexemes) is cached
// with its text and the terms of its text, and checked against them as
// the uncached read does.

// termCacheBytes bounds what all entries hold: their terms (4 bytes a
// token), messages and vocabularies, and the texts of the hits found in
// them.
const termCacheBytes = 32 << 20

// termCache holds threadTerms by tenant and thread, least recently used
// first out.
type termCache struct {
	mu    sync.Mutex
	max   int // bytes
	bytes int
	byKey map[termKey]*list.Element // of *cached
	lru   list.List                 // front: most recent
}

type termKey struct{ tenant, thread string }

// cached is an entry and the bytes it is charged.
type cached struct {
	key     termKey
	t       *threadTerms
	charged int
}

func newTermCache(maxBytes int) *termCache {
	return &termCache{max: maxBytes, byKey: map[termKey]*list.Element{}}
}

// get returns the entry of a thread, nil if none.
func (c *termCache) get(k termKey) *threadTerms {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byKey[k]; e != nil {
		c.lru.MoveToFront(e)
		return e.Value.(*cached).t
	}
	return nil
}

// put makes t the entry of k, unless the entry there is newer (another
// search of the same incarnation of the thread saw more of it).
func (c *termCache) put(k termKey, t *threadTerms) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byKey[k]; e != nil {
		old := e.Value.(*cached)
		if old.t.created == t.created && old.t.last > t.last {
			return
		}
		c.bytes -= old.charged
		c.lru.Remove(e)
	}
	v := &cached{key: k, t: t, charged: t.size()}
	c.byKey[k] = c.lru.PushFront(v)
	c.bytes += v.charged
	c.evict()
}

// grew charges k's entry n more bytes, if it is still of memo's
// incarnation (a text was kept).
func (c *termCache) grew(k termKey, memo *textMemo, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byKey[k]; e != nil && e.Value.(*cached).t.memo == memo {
		e.Value.(*cached).charged += n
		c.bytes += n
		c.evict()
	}
}

// evict drops the least recently used entries while over the bound,
// keeping the newest.
func (c *termCache) evict() {
	for c.bytes > c.max && c.lru.Len() > 1 {
		e := c.lru.Back()
		v := e.Value.(*cached)
		c.bytes -= v.charged
		delete(c.byKey, v.key)
		c.lru.Remove(e)
	}
}

// drop forgets k's entry.
func (c *termCache) drop(k termKey) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byKey[k]; e != nil {
		c.bytes -= e.Value.(*cached).charged
		delete(c.byKey, k)
		c.lru.Remove(e)
	}
}

// threadTerms is the cached terms of one thread's messages up to last.
// It is never changed once in the cache: a search that finds new messages
// builds the next entry (successor, add), so searches read entries
// without locks.
type threadTerms struct {
	key     termKey
	created int64 // the thread's created time (Nanos): its incarnation
	last    int64 // the thread's last seq this covers
	docs    []termDoc
	toks    []int32                  // every document's tokens, as vocabulary ids, in order
	vocab   map[string]int32         // the thread's distinct tokens
	words   []string                 // vocab's keys by id
	memo    *textMemo                // the incarnation's kept texts
	slab    []atomic.Pointer[string] // add's next termDoc.text, while built
	large   bool                     // the thread is not small: nothing else is set
}

// textMemo counts the bytes of the texts kept in the messages of one
// incarnation of a thread (shared by its successive entries).
type textMemo struct{ bytes atomic.Int64 }

// termDoc is one message event of a cached thread.
type termDoc struct {
	seq, at   int64
	ref, tool string
	role      string
	end       int  // its tokens are toks[previous end:end]
	lossy     bool // its tokens come from its text, which text holds
	// text is its fulltext.SearchText once read for a hit, shared by the
	// entries that hold the message.
	text *atomic.Pointer[string]
}

// size is about the bytes t holds.
func (t *threadTerms) size() int {
	if t.large {
		return 256
	}
	n := 4*len(t.toks) + 96*len(t.docs) + int(t.memo.bytes.Load())
	for _, w := range t.words {
		n += 16 + 2*len(w) // the word and the map's entry
	}
	return n
}

// lastDoc returns the seq and ref of the thread's last cached message (0
// and "" when none), which the statement checks.
func (t *threadTerms) lastDoc() (int64, string) {
	if t == nil || len(t.docs) == 0 {
		return 0, ""
	}
	d := t.docs[len(t.docs)-1]
	return d.seq, d.ref
}

// successor returns the entry that will hold the thread up to last: a
// copy of t's messages (other searches may be reading t) when t is of the
// same incarnation, else none. more says that messages will be added
// (add); without, t's are shared.
func (t *threadTerms) successor(k termKey, created, last int64, more bool) *threadTerms {
	if t != nil && t.large {
		t = nil
	}
	if t != nil && t.created == created && !more {
		n := *t
		n.last, n.slab = last, nil
		return &n
	}
	n := &threadTerms{key: k, created: created, last: last}
	if t != nil && t.created == created {
		n.docs = append(make([]termDoc, 0, len(t.docs)+8), t.docs...)
		n.toks = append(make([]int32, 0, len(t.toks)+512), t.toks...)
		n.words = append([]string(nil), t.words...)
		n.vocab = maps.Clone(t.vocab)
		n.memo = t.memo
	} else {
		n.vocab = map[string]int32{}
		n.memo = &textMemo{}
	}
	return n
}

// add appends a message, given its terms literal (exact: its positions
// are 1..n), to an entry being built.
func (n *threadTerms) add(d termDoc, terms []byte) {
	start := len(n.toks)
	var id int32
	eachLexeme(terms, func(tok []byte) {
		var ok bool
		if id, ok = n.vocab[string(tok)]; !ok {
			id = int32(len(n.words))
			w := string(tok)
			n.words = append(n.words, w)
			n.vocab[w] = id
		}
	}, func(pos int) {
		for len(n.toks) < start+pos {
			n.toks = append(n.toks, -1)
		}
		n.toks[start+pos-1] = id
	})
	n.push(d)
}

// addText appends a message given its text (fulltext.SearchText), which
// it keeps.
func (n *threadTerms) addText(d termDoc, text string) {
	for _, tok := range fulltext.IndexTerms(text) {
		id, ok := n.vocab[tok]
		if !ok {
			id = int32(len(n.words))
			n.words = append(n.words, tok)
			n.vocab[tok] = id
		}
		n.toks = append(n.toks, id)
	}
	n.push(d)
	n.docs[len(n.docs)-1].text.Store(&text)
	n.memo.bytes.Add(int64(len(text)))
}

// push appends d, whose tokens were just appended to toks.
func (n *threadTerms) push(d termDoc) {
	d.end = len(n.toks)
	if len(n.slab) == 0 {
		n.slab = make([]atomic.Pointer[string], 64)
	}
	d.text, n.slab = &n.slab[0], n.slab[1:]
	n.docs = append(n.docs, d)
}

// cachedThreadSQL reads a thread's row and its messages after seq $4 if
// the cache's entry is still the thread's ($3 its created time, $5 and
// $6 its last message), else all of them; none when the thread is not
// small. Always one row at least when the thread exists (the LEFT JOIN),
// every row carrying the thread's columns.
var cachedThreadSQL = `WITH t AS MATERIALIZED (
	SELECT created, last_seq, messages,
		messages <= ` + strconv.Itoa(scanMessages) + ` AND tokens <= ` + strconv.Itoa(scanTokens) + ` AS small,
		created = $3 AND last_seq >= $4
			AND ($5::bigint = 0 OR EXISTS (SELECT 1 FROM events WHERE tenant = $1 AND thread = $2 AND seq = $5 AND ref = $6)) AS valid
	FROM threads WHERE tenant = $1 AND id = $2)
SELECT t.created, t.last_seq, t.messages, t.small, t.valid, e.seq, e.at, e.lossy, e.ref, e.role, e.tool, e.terms, e.message
FROM t LEFT JOIN LATERAL (
	SELECT seq, at, lossy, ref, role, tool, terms, CASE WHEN lossy > 0 THEN message END AS message FROM events
	WHERE tenant = $1 AND thread = $2 AND message IS NOT NULL AND t.small
		AND seq > CASE WHEN t.valid THEN $4::bigint ELSE 0 END
) e ON true
ORDER BY e.seq`

// cachedCandidates finds a thread's candidates for q through the term
// cache, adding them to tally. ok is false when the thread is not small:
// then the caller searches with the index, and the cache remembers that
// the thread is large (a thread only grows; one deleted and written again
// smaller is searched with the index until its entry leaves the cache).
func (s *Store) cachedCandidates(ctx context.Context, tenant string, q store.SearchQuery, pq fulltext.ParsedQuery, tally *fulltext.Tally) (n int64, cands []cand, ok bool, err error) {
	k := termKey{tenant, q.Thread}
	cur := s.terms.get(k)
	if cur != nil && cur.large {
		return 0, nil, false, nil
	}
	var created, last int64
	if cur != nil {
		created, last = cur.created, cur.last
	}
	lastSeq, lastRef := cur.lastDoc()
	rows, err := s.pool.Query(ctx, cachedThreadSQL, tenant, q.Thread, created, last, lastSeq, lastRef)
	if err != nil {
		return 0, nil, false, dbErr("search", err)
	}
	// Columns are decoded from the driver's buffers (RawValues): only
	// refs and tools become strings.
	var (
		found, small, valid bool
		thLast              int64
		next                *threadTerms // the entry being built
	)
	fds := rows.FieldDescriptions()
	for rows.Next() {
		raw := rows.RawValues()
		if len(raw) != 13 {
			rows.Close()
			return 0, nil, false, fmt.Errorf("postgres: search: %d columns", len(raw))
		}
		num := func(i int) int64 {
			if err == nil {
				var v int64
				v, err = rawInt(raw[i], fds[i].Format)
				return v
			}
			return 0
		}
		if !found {
			found = true
			created, n, small, valid = num(0), num(2), rawBool(raw[3], fds[3].Format), rawBool(raw[4], fds[4].Format)
			if !valid {
				cur = nil
			}
			if thLast = num(1); small && (cur == nil || raw[5] != nil || cur.last != thLast) {
				next = cur.successor(k, created, thLast, raw[5] != nil)
			}
			if err != nil {
				rows.Close()
				return 0, nil, false, fmt.Errorf("postgres: search: %w", err)
			}
		}
		if raw[5] == nil || !small {
			continue // no message after the entry's
		}
		d := termDoc{seq: num(5), at: num(6), ref: string(raw[8]), role: roleString(raw[9]), tool: string(raw[10])}
		lossy := num(7)
		if err != nil {
			rows.Close()
			return 0, nil, false, fmt.Errorf("postgres: search: %w", err)
		}
		if lossy == exact {
			next.add(d, raw[11])
			continue
		}
		// A lossy message's tsvector lacks positions or lexemes: its
		// terms come from its text, which it keeps (search checks it, as
		// the uncached read does).
		js := string(raw[12])
		text, err := searchText(&js, store.Hit{Thread: q.Thread, Seq: d.seq, At: backend.FromNanos(d.at)})
		if err != nil {
			rows.Close()
			return 0, nil, false, err
		}
		d.lossy = true
		next.addText(d, text)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, false, dbErr("search", err)
	}
	if !found {
		return 0, nil, true, nil // no such thread: nothing to find
	}
	if !small {
		s.terms.put(k, &threadTerms{key: k, created: created, last: thLast, large: true})
		return 0, nil, false, nil
	}
	t := cur
	if next != nil {
		t = next
		s.terms.put(k, t)
	}
	return n, t.candidates(q, pq, tally), true, nil
}

// candidates adds to tally the cached messages that pass q's filters and
// hold a term, and returns them.
func (t *threadTerms) candidates(q store.SearchQuery, pq fulltext.ParsedQuery, tally *fulltext.Tally) []cand {
	// The query's tokens by vocabulary id.
	ids := make([]int32, len(t.words))
	for i := range ids {
		ids[i] = -1
	}
	for _, term := range pq.Terms {
		for _, tok := range term.Tokens {
			if v, ok := t.vocab[tok]; ok {
				ids[v] = tally.TokenID([]byte(tok))
			}
		}
	}
	since, until := backend.Nanos(q.Since), backend.Nanos(q.Until)
	first := 0
	if q.FromSeq > 0 {
		first = sort.Search(len(t.docs), func(i int) bool { return t.docs[i].seq >= q.FromSeq })
	}
	cands := make([]cand, 0, len(t.docs)-first)
	var doc []int32
	for i := first; i < len(t.docs); i++ {
		d := &t.docs[i]
		if q.ToSeq > 0 && d.seq > q.ToSeq {
			break
		}
		if q.Role != "" && d.role != string(q.Role) || q.Tool != "" && d.tool != q.Tool ||
			!q.Since.IsZero() && d.at < since || !q.Until.IsZero() && d.at > until {
			continue
		}
		start := 0
		if i > 0 {
			start = t.docs[i-1].end
		}
		var text *string
		if d.lossy {
			// As the uncached read: only a document that matches in full
			// is a candidate.
			if text = d.text.Load(); !matchesFully(pq, *text) {
				continue
			}
		}
		doc = doc[:0]
		for _, v := range t.toks[start:d.end] {
			doc = append(doc, ids[v])
		}
		if !tally.AddIDs(doc) {
			tally.RemoveLast()
			continue
		}
		cands = append(cands, cand{thread: q.Thread, ref: d.ref, seq: d.seq, at: d.at, text: text, doc: d, from: t})
	}
	return cands
}

// rawInt decodes an integer column as the driver holds it: binary (as
// pgx asks for integers in a prepared statement's results) or text.
func rawInt(raw []byte, format int16) (int64, error) {
	if format == pgx.BinaryFormatCode {
		switch len(raw) {
		case 8:
			return int64(binary.BigEndian.Uint64(raw)), nil
		case 4:
			return int64(int32(binary.BigEndian.Uint32(raw))), nil
		case 2:
			return int64(int16(binary.BigEndian.Uint16(raw))), nil
		}
		return 0, fmt.Errorf("integer of %d bytes", len(raw))
	}
	return strconv.ParseInt(string(raw), 10, 64)
}

// rawBool decodes a boolean column as the driver holds it.
func rawBool(raw []byte, format int16) bool {
	if format == pgx.BinaryFormatCode {
		return len(raw) == 1 && raw[0] == 1
	}
	return len(raw) > 0 && raw[0] == 't'
}

// roleString returns a role column as a string, without allocating for
// the known roles.
func roleString(raw []byte) string {
	for _, r := range []message.Role{message.User, message.Assistant, message.Tool, message.System} {
		if string(raw) == string(r) {
			return string(r)
		}
	}
	return string(raw)
}
