package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/sqlite"
)

// The archive index is written in batches (log.go): an Append writes its
// messages' index terms to events_terms, those past the index's mark are
// its queue, and a search reads a short queue beside the index or moves it
// into the index first. These tests check what the conformance suite
// cannot see: the queue is used, it survives a restart, it is emptied in
// batches, and a deleted thread leaves nothing in it.

// queued returns how many messages wait in the file's queue (past the mark
// in the index's file, archive.go), read on a connection of its own.
func queued(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // the attached index is the connection's
	if _, err := db.Exec(`ATTACH DATABASE ? AS ix`, path+"-index"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM events_terms WHERE id > (SELECT upto FROM ix.meta)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func appendText(t *testing.T, s store.Store, thread string, after int64, text string) {
	t.Helper()
	m := message.NewText(message.User, text)
	if _, err := s.Append(context.Background(), "acme", thread, after, []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
		t.Fatal(err)
	}
}

func searchThreads(t *testing.T, s store.Store, text string) []string {
	t.Helper()
	hits, err := s.Search(context.Background(), "acme", store.SearchQuery{Text: text})
	if err != nil {
		t.Fatal(err)
	}
	var threads []string
	for _, h := range hits {
		threads = append(threads, h.Thread)
	}
	return threads
}

// TestQueuedIndexSurvivesReopen: messages acknowledged but not yet moved
// into the index are found after the store is closed (or the process
// killed) and opened again.
func TestQueuedIndexSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mneme.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		appendText(t, s, "t", int64(i), fmt.Sprintf("queued note INV-%d", 7000+i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := queued(t, path); n != 3 {
		t.Fatalf("%d messages queued after 3 appends, want 3: the test would not exercise the queue", n)
	}
	s, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3 {
		if got := searchThreads(t, s, fmt.Sprintf("INV-%d", 7000+i)); len(got) != 1 {
			t.Errorf("INV-%d: %d hits after reopen, want 1", 7000+i, len(got))
		}
	}
	// The tenant's search read them beside the index; moved into it, they
	// are found there.
	if err := s.CatchUpIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if n := queued(t, path); n != 0 {
		t.Errorf("%d messages still queued after a catch-up", n)
	}
	for i := range 3 {
		if got := searchThreads(t, s, fmt.Sprintf("INV-%d", 7000+i)); len(got) != 1 {
			t.Errorf("INV-%d: %d hits from the index, want 1", 7000+i, len(got))
		}
	}
}

// TestGroupsEmptyTheQueue: appends have the queue moved into the index
// once it holds IndexBatch messages, without waiting for a search.
func TestGroupsEmptyTheQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mneme.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := sqlite.IndexBatch + 10
	for i := range n {
		appendText(t, s, "t", int64(i), fmt.Sprintf("note %d", i))
	}
	// The index's writer moves them in the background, while the log
	// goes on committing.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		q := queued(t, path)
		if int64(q) < sqlite.IndexBatch {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages still queued after 20 s, want fewer than %d", q, n, sqlite.IndexBatch)
		}
	}
	if got := searchThreads(t, s, "note 0"); len(got) == 0 {
		t.Error("the first message is not found")
	}
}

// TestDeleteEmptiesTheQueue: a thread deleted while its messages are
// queued leaves nothing in the queue, so neither a search nor the next
// messages (which may take the freed rowids) meet them.
func TestDeleteEmptiesTheQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mneme.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appendText(t, s, "gone", 0, "the launch code is swordfish")
	if err := s.DeleteThread(context.Background(), "acme", "gone"); err != nil {
		t.Fatal(err)
	}
	if q := queued(t, path); q != 0 {
		t.Fatalf("%d messages queued after the thread was deleted", q)
	}
	appendText(t, s, "kept", 0, "the cake recipe is secret")
	if got := searchThreads(t, s, "swordfish"); len(got) != 0 {
		t.Errorf("a deleted message is found: %v", got)
	}
	if got := searchThreads(t, s, "cake recipe"); len(got) != 1 || got[0] != "kept" {
		t.Errorf("the new message: hits in %v, want [kept]", got)
	}
}

// TestDeleteErasesIndexedTerms: a thread whose messages already moved
// into the archive index (a search moved them) leaves none of their terms
// in the file once deleted and purged. The index is contentless: a delete
// alone only tombstones its rows.
func TestDeleteErasesIndexedTerms(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mneme.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 5 {
		appendText(t, s, "doomed", int64(i), "the vault word is qzplugh4242")
	}
	appendText(t, s, "kept", 0, "an innocent bystander")
	if err := s.CatchUpIndex(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := searchThreads(t, s, "qzplugh4242"); len(got) == 0 {
		t.Fatal("the doomed thread is not found before the delete")
	}
	if q := queued(t, path); q != 0 {
		t.Fatalf("%d messages still queued after a catch-up: the test would not exercise the index", q)
	}
	if err := s.DeleteThread(context.Background(), "acme", "doomed"); err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	if filesContain(t, path, [][]byte{[]byte("qzplugh4242")}) {
		t.Error("a deleted thread's terms are still in the database files")
	}
	if got := searchThreads(t, s, "bystander"); len(got) != 1 {
		t.Errorf("the kept thread: %v", got)
	}
}

// TestIndexAfterDeletingTheNewest: once the newest messages, already
// indexed, are deleted, the messages appended next are queued and found,
// and the deleted ones are not (their ids are not given again, archive.go).
func TestIndexAfterDeletingTheNewest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mneme.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appendText(t, s, "kept", 0, "an early note")
	for i := range 3 {
		appendText(t, s, "gone", int64(i), fmt.Sprintf("a doomed note %d", i))
	}
	if err := s.CatchUpIndex(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := searchThreads(t, s, "doomed"); len(got) != 3 {
		t.Fatalf("%d hits before the delete, want 3", len(got))
	}
	if q := queued(t, path); q != 0 {
		t.Fatalf("%d messages still queued after a catch-up: the test would not exercise the index", q)
	}
	if err := s.DeleteThread(context.Background(), "acme", "gone"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		appendText(t, s, "new", int64(i), fmt.Sprintf("a fresh memo %d", i))
	}
	if got := searchThreads(t, s, "fresh memo"); len(got) != 3 {
		t.Errorf("%d of the 3 messages that reuse the deleted ids are found", len(got))
	}
	if got := searchThreads(t, s, "doomed"); len(got) != 0 {
		t.Errorf("deleted messages found: %v", got)
	}
}
