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
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "mneme.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.searchPath = path
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
		if err := s.r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM events_fts), (SELECT count(*) FROM events_terms)`).Scan(&indexed, &terms); err != nil {
			t.Fatal(err)
		}
		return indexed, terms
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
// through the index finds indexed and queued messages alike.
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
	var upto int64
	if err := s.r.QueryRowContext(ctx, `SELECT upto FROM events_fts_mark`).Scan(&upto); err != nil || upto != 2 {
		t.Fatalf("mark after the migration = %d, %v; want 2 (two messages indexed)", upto, err)
	}
	s.searchPath = useIndex
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "refund", Thread: "t"})
	if err != nil || len(hits) != len(texts) {
		t.Fatalf("Search(refund) = %d hits, %v; want %d", len(hits), err, len(texts))
	}
	var indexed int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM events_fts`).Scan(&indexed); err != nil || indexed != len(texts) {
		t.Errorf("%d rows indexed, %v; want %d, each once", indexed, err, len(texts))
	}
}

// oldFile writes a file at schema version v holding thread acme/t with a
// user message of each text, and lets index put each message's terms
// (body) where that version kept them.
func oldFile(t *testing.T, path string, v int, texts []string, index func(db *sql.DB, i int, id int64, body string) error) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= v; k++ {
		if err := applyMigration(ctx, db, k); err != nil {
			t.Fatalf("migration %d: %v", k, err)
		}
	}
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
