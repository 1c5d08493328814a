package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/storetest"
)

// searchPaths are the ways a thread's search finds its candidates; each
// must find and rank exactly what the other does.
var searchPaths = []struct {
	name string
	path searchPath
}{
	{"index", useIndex},
	{"read-thread", readThread},
	{"cached", cachedThread},
}

func openWithPath(t *testing.T, path searchPath) *Store {
	t.Helper()
	s := openFile(t, filepath.Join(t.TempDir(), "mneme.db"))
	s.searchPath = path
	return s
}

// openFile opens the file at path, closed when the test ends.
func openFile(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSearchPaths runs the conformance suite's searches, and LoCoMo's
// questions against store/inmem, with every thread's search taking one
// path.
func TestSearchPaths(t *testing.T) {
	for _, p := range searchPaths {
		t.Run(p.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store { return openWithPath(t, p.path) })
			t.Run("LoCoMoSame", func(t *testing.T) {
				storetest.LoCoMoSame(t, openWithPath(t, p.path), inmem.New())
			})
		})
	}
}

// TestMigrateIndex: a file written at schema version 4 (the index kept its
// terms itself, and the last message still waits in its queue) opens, and
// its messages are found as before, on both paths; messages appended
// afterwards too, and deleting the thread leaves nothing in the index.
func TestMigrateIndex(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v4.db")
	texts := []string{"Caroline's painting won at the show", "refund INV-4401 today", "lunch plans"}
	oldFile(t, path, 4, texts, func(db *sql.DB, i int, id int64, body string) error {
		index := insertFTS
		if i == len(texts)-1 {
			index = `INSERT INTO events_fts_pending (id, scope, body) VALUES (?, ?, ?)`
		}
		_, err := db.ExecContext(ctx, index, id, scopeTerms("acme", "t"), body)
		return err
	})

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("open a version 4 file: %v", err)
	}
	defer s.Close()
	m := message.NewText(message.User, "another refund")
	if _, err := s.Append(ctx, "acme", "t", int64(len(texts)), []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range searchPaths {
		s.searchPath = p.path
		for _, c := range []struct {
			q    string
			want []int64
		}{
			{"painting Caroline", []int64{1}},
			{"INV-4401", []int64{2}},
			{"refund", []int64{2, 4}},
			{"lunch", []int64{3}},
		} {
			hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: c.q, Thread: "t"})
			var got []int64
			for _, h := range hits {
				got = append(got, h.Seq)
			}
			slices.Sort(got)
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("%s: Search(%q) = seqs %v, %v; want %v", p.name, c.q, got, err, c.want)
			}
		}
	}
	counts := func() (indexed, terms int) {
		if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM events_terms`).Scan(&terms); err != nil {
			t.Fatal(err)
		}
		return len(s.indexedIDs(t, "acme")), terms
	}
	// Searches read the queue beside the index; moved, every message is in
	// the index, once.
	if err := s.catchUpIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if indexed, terms := counts(); indexed != 4 || terms != 4 {
		t.Errorf("%d indexed, %d terms rows; want 4 each", indexed, terms)
	}
	if err := s.DeleteThread(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	if indexed, terms := counts(); indexed != 0 || terms != 0 {
		t.Errorf("after DeleteThread: %d indexed, %d terms rows; want none", indexed, terms)
	}
}

// TestMigrateQueue: a version 6 file with messages in its index queue
// table opens at version 7 with them queued past the mark, and a search
// through the index finds indexed and queued messages alike, a thread's
// (which reads the queue beside the index) and a tenant's (which moves
// the queue into the index, each message once).
func TestMigrateQueue(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v6.db")
	texts := []string{"refund INV-4401 today", "another refund", "a refund still queued", "and a last refund queued"}
	oldFile(t, path, 6, texts, func(db *sql.DB, i int, id int64, body string) error {
		if i >= 2 { // queued: a trigger copies the terms to events_terms
			_, err := db.ExecContext(ctx, `INSERT INTO events_fts_pending (id, scope, body) VALUES (?, ?, ?)`, id, scopeTerms("acme", "t"), body)
			return err
		}
		// indexed, as version 6 moved its queue
		if _, err := db.ExecContext(ctx, insertFTS, id, scopeTerms("acme", "t"), body); err != nil {
			return err
		}
		_, err := db.ExecContext(ctx, `INSERT INTO events_terms (id, terms) VALUES (?, ?)`, id, body)
		return err
	})

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("open a version 6 file: %v", err)
	}
	defer s.Close()
	// Since version 12 the index has a file of its own, made at the
	// first open: every message is queued for it.
	if q := s.queuedCount(t); q != int64(len(texts)) {
		t.Fatalf("%d queued after the migration, want %d (the new index file holds none)", q, len(texts))
	}
	s.searchPath = useIndex
	for _, thread := range []string{"t", ""} {
		hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "refund", Thread: thread})
		if err != nil || len(hits) != len(texts) {
			t.Fatalf("Search(refund) in thread %q = %d hits, %v; want %d", thread, len(hits), err, len(texts))
		}
	}
	if err := s.catchUpIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if ids := s.indexedIDs(t, "acme"); len(ids) != len(texts) || len(slices.Compact(slices.Clone(ids))) != len(texts) {
		t.Errorf("rows indexed: %v; want %d, each once", ids, len(texts))
	}
}

// fileAt makes a file at schema version v, open.
func fileAt(t *testing.T, path string, v int) *sql.DB {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= v; k++ {
		if err := applyMigration(ctx, db, k); err != nil {
			t.Fatalf("migration %d: %v", k, err)
		}
	}
	return db
}

// oldFile writes a file at schema version v holding thread acme/t with a
// user message of each text, and lets index put each message's terms
// (body) where that version kept them.
func oldFile(t *testing.T, path string, v int, texts []string, index func(db *sql.DB, i int, id int64, body string) error) {
	t.Helper()
	ctx := context.Background()
	db := fileAt(t, path, v)
	defer db.Close()
	if _, err := db.ExecContext(ctx, `INSERT INTO threads (tenant, id, created, updated, last_seq, messages, tokens) VALUES ('acme', 't', 1, 1, ?, ?, ?)`, len(texts), len(texts), 10*len(texts)); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 15, 9, 0, 0, 0, time.UTC)
	for i, text := range texts {
		m := message.NewText(message.User, text)
		js, err := backend.EncodeMessage(&m)
		if err != nil {
			t.Fatal(err)
		}
		res, err := db.ExecContext(ctx, `INSERT INTO events (tenant, thread, seq, kind, at, ref, role, tokens, message) VALUES ('acme', 't', ?, 'message', ?, ?, 'user', 10, ?)`,
			i+1, backend.Nanos(at), store.NewRef(), js)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := res.LastInsertId()
		if err := index(db, i, id, fulltext.IndexBody(fulltext.SearchText(m, at))); err != nil {
			t.Fatal(err)
		}
	}
}

// TestThreadSearchReadsQueue: a thread's search through the index, with
// some of the thread's messages indexed and some still queued, finds and
// ranks what reading the thread finds, filtered or not, and writes
// nothing: the queue is as long after it as before.
func TestThreadSearchReadsQueue(t *testing.T) {
	ctx := context.Background()
	s := openWithPath(t, useIndex)
	add := func(thread string, after int64, role message.Role, text string) {
		t.Helper()
		m := message.NewText(role, text)
		if _, err := s.Append(ctx, "acme", thread, after, []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
			t.Fatal(err)
		}
	}
	words := []string{"refund", "invoice", "INV-4401", "shipping", "lunch", "refund policy"}
	roles := []message.Role{message.User, message.Assistant}
	for i := range 12 {
		add("t", int64(i), roles[i%2], words[i%len(words)]+" for order "+words[(i*5)%len(words)])
		add("u", int64(i), message.User, words[i%len(words)]+" elsewhere")
	}
	if err := s.catchUpIndex(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 12; i < 20; i++ {
		add("t", int64(i), roles[i%2], words[(i*7)%len(words)]+" queued "+words[i%len(words)])
	}
	queue := func() int { return int(s.queuedCount(t)) }
	before := queue()
	if before != 8 {
		t.Fatalf("%d messages queued, want 8: the test would not mix indexed and queued messages", before)
	}
	for _, q := range []store.SearchQuery{
		{Text: "refund", Thread: "t"},
		{Text: "refund invoice lunch", Thread: "t", Limit: 20},
		{Text: "INV-4401 queued", Thread: "t"},
		{Text: "refund", Thread: "t", Role: message.Assistant},
		{Text: "shipping order", Thread: "t", FromSeq: 5, ToSeq: 16},
	} {
		s.searchPath = useIndex
		got, err := s.Search(ctx, "acme", q)
		if err != nil {
			t.Fatal(err)
		}
		s.searchPath = readThread
		want, err := s.Search(ctx, "acme", q)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 {
			t.Fatalf("%+v: reading the thread finds nothing: the query proves nothing", q)
		}
		if !slices.EqualFunc(got, want, func(a, b store.Hit) bool { return a.Seq == b.Seq && a.Score == b.Score }) {
			t.Errorf("%+v: the index and its queue find %v, reading the thread %v", q, hitSeqs(got), hitSeqs(want))
		}
	}
	if n := queue(); n != before {
		t.Errorf("%d messages queued after the thread's searches, %d before: a thread's search wrote", n, before)
	}
	// A queue longer than a search reads is moved into the index first.
	for i := 20; i < 21+readQueued; i++ {
		add("t", int64(i), message.User, "a long queue of zephyr notes")
	}
	s.searchPath = useIndex
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "zephyr", Thread: "t", Limit: 200})
	if err != nil || len(hits) != 1+readQueued {
		t.Fatalf("a long queue: %d hits, %v; want %d", len(hits), err, 1+readQueued)
	}
	if n := queue(); n != 0 {
		t.Errorf("%d messages still queued after a thread's search met a queue of %d", n, before+1+readQueued)
	}
}

func hitSeqs(hits []store.Hit) []int64 {
	var seqs []int64
	for _, h := range hits {
		seqs = append(seqs, h.Seq)
	}
	return seqs
}
