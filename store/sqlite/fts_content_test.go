package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// The archive index is contentless, in a file of its own (archive.go): it
// is given a row's terms to index them and again to take them out, and a
// delete given other terms than were indexed would leave the index wrong
// without a word. These tests check that it stays the log's index through
// the queue, deletes of any thread (the newest too) and the migration:
// FTS5's integrity-check, and each thread's rows and terms found in the
// index as the log holds them.

// checkIndex moves the queue into the index and checks it against the
// log: its structure, each thread's rows, and (unless quick) each row's
// every term.
func checkIndex(t *testing.T, s *Store) { checkIndexAs(t, s, false) }

func checkIndexAs(t *testing.T, s *Store, quick bool) {
	t.Helper()
	ctx := context.Background()
	if err := s.catchUpIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.mustIndex(t).w.ExecContext(ctx, `INSERT INTO events_fts (events_fts, rank) VALUES ('integrity-check', 0)`); err != nil {
		t.Fatalf("the index is not consistent: %v", err)
	}
	rows, err := readIndexed(ctx, s.r, `SELECT t.id, e.tenant, e.thread, t.terms FROM events_terms t JOIN events e ON e.id = t.id ORDER BY t.id`)
	if err != nil {
		t.Fatal(err)
	}
	if q := s.queuedCount(t); q != 0 {
		t.Fatalf("%d still queued after a catch-up", q)
	}
	// Each thread's rows, by its scope token, are the log's.
	want := map[string][]int64{}
	for _, r := range rows {
		want[r.scope] = append(want[r.scope], r.id)
	}
	for scope, ids := range want {
		thread := strings.Fields(scope)[1]
		got := s.matchIDs(t, `"`+thread+`"`)
		if fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Fatalf("the index holds %v under %s, the log %v", got, thread, ids)
		}
	}
	if got := s.indexedIDs(t, "acme"); len(got) != len(rows) {
		t.Fatalf("the index holds %d rows of the tenant, the log %d", len(got), len(rows))
	}
	if quick {
		return
	}
	// Each row is found by each of its terms (one search a thread's term).
	byTerm := map[[2]string][]int64{}
	for _, r := range rows {
		thread := strings.Fields(r.scope)[1]
		for _, term := range strings.Fields(r.terms) {
			byTerm[[2]string{thread, term}] = append(byTerm[[2]string{thread, term}], r.id)
		}
	}
	for k, ids := range byTerm {
		got := s.matchIDs(t, `"`+k[0]+`" AND "`+k[1]+`"`)
		for _, id := range ids {
			if !slices.Contains(got, id) {
				t.Fatalf("row %d is not found by its term %q", id, k[1])
			}
		}
	}
}

// matchIDs returns the ids of the index's rows that match expr.
func (s *Store) matchIDs(t *testing.T, expr string) []int64 {
	t.Helper()
	js, _, err := s.mustIndex(t).match(context.Background(), expr, func(int64) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	if err := json.Unmarshal(js, &ids); err != nil {
		t.Fatal(err)
	}
	return ids
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
			checkIndexAs(t, s, true)
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
// queued, opens at this version with all three queued for the index's new
// file; a search finds all three, the index matches the log, and a delete
// leaves nothing.
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
	if q := s.queuedCount(t); q != 3 {
		t.Fatalf("%d queued after the migration, want 3 (version 12's index file is new)", q)
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
