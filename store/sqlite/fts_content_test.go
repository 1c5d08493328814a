package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// Since schema 9 the archive index reads its content from events_terms
// (the view events_fts_src) instead of keeping a copy of every message's
// terms: FTS5 then trusts that what it indexed is what the view holds. These
// tests check that it stays so through the queue, deletes of any thread
// (the newest too, whose ids SQLite hands out again) and the migration,
// with FTS5's own integrity-check, which compares the index with its
// content table token by token.

// checkIndex moves the queue into the index and runs FTS5's
// integrity-check against the content.
func checkIndex(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	if err := s.catchUpIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO events_fts (events_fts, rank) VALUES ('integrity-check', 1)`); err != nil {
		t.Fatalf("the index does not match its content: %v", err)
	}
}

func TestIndexMatchesContent(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "mneme.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(9, 9))
	words := []string{"refund", "invoice", "painting", "launch", "swordfish", "cake", "deploy", "rollback", "INV-4401", "Caroline's"}
	last := map[string]int64{}
	var deleted, found int
	for step := range 600 {
		switch r := rng.IntN(100); {
		case r < 85:
			thread := fmt.Sprint("t", rng.IntN(6))
			text := fmt.Sprintf("%s %s note %d", words[rng.IntN(len(words))], words[rng.IntN(len(words))], step)
			m := message.NewText(message.User, text)
			if _, err := s.Append(ctx, "acme", thread, last[thread], []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
				t.Fatal(err)
			}
			last[thread]++
		case r < 92:
			hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: words[rng.IntN(len(words))], Limit: 50})
			if err != nil {
				t.Fatal(err)
			}
			found += len(hits)
		case r < 97:
			// the thread appended to last is likely the newest: its ids
			// are handed out again
			thread := fmt.Sprint("t", rng.IntN(6))
			if last[thread] == 0 {
				continue
			}
			if err := s.DeleteThread(ctx, "acme", thread); err != nil {
				t.Fatal(err)
			}
			delete(last, thread)
			deleted++
		default:
			checkIndex(t, s)
		}
	}
	checkIndex(t, s)
	if deleted == 0 || found == 0 {
		t.Fatalf("the walk deleted %d threads and found %d hits: it exercised nothing", deleted, found)
	}
	// every message left is found through the index, under its thread
	s.searchPath = useIndex
	for thread, n := range last {
		hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "note", Thread: thread, Limit: 1000})
		if err != nil || int64(len(hits)) != n {
			t.Errorf("%s: %d hits, %v; want its %d messages", thread, len(hits), err, n)
		}
	}
}

// TestMigrateIndexContent: a version 8 file, two messages indexed and one
// queued, opens at version 9 with the indexed ones in the new index and
// the queued one still queued; a search finds all three, the index matches
// its content, and a delete leaves nothing.
func TestMigrateIndexContent(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v8.db")
	texts := []string{"refund INV-4401 today", "Caroline's painting won", "a refund still queued"}
	oldFile(t, path, 8, texts, func(db *sql.DB, i int, id int64, body string) error {
		if _, err := db.ExecContext(ctx, `INSERT INTO events_terms (id, terms) VALUES (?, ?)`, id, body); err != nil {
			return err
		}
		if i == len(texts)-1 {
			return nil // queued: past the mark
		}
		if _, err := db.ExecContext(ctx, insertFTS, id, scopeTerms("acme", "t"), body); err != nil {
			return err
		}
		_, err := db.ExecContext(ctx, `UPDATE events_fts_mark SET upto = ?`, id)
		return err
	})
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("open a version 8 file: %v", err)
	}
	defer s.Close()
	var upto int64
	if err := s.r.QueryRowContext(ctx, `SELECT upto FROM events_fts_mark`).Scan(&upto); err != nil || upto != 2 {
		t.Fatalf("mark after the migration = %d, %v; want 2", upto, err)
	}
	s.searchPath = useIndex
	for q, want := range map[string]int{"refund": 2, "painting Caroline": 1, "INV-4401": 1} {
		hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: q, Thread: "t"})
		if err != nil || len(hits) != want {
			t.Errorf("Search(%q) = %d hits, %v; want %d", q, len(hits), err, want)
		}
	}
	checkIndex(t, s)
	if err := s.DeleteThread(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	checkIndex(t, s)
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "refund"})
	if err != nil || len(hits) != 0 {
		t.Errorf("after the delete: %d hits, %v", len(hits), err)
	}
}
