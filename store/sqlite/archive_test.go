package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// The archive index's file (archive.go) is derived from the log and bound
// to it. These tests check the rules that keep the two files consistent
// without a common transaction: a missing, foreign or stale index file is
// made again; a delete interrupted between the files is finished at the
// next open either way; no id is given twice.

func addTexts(t *testing.T, s *Store, tenant, thread string, texts ...string) {
	t.Helper()
	ctx := context.Background()
	last, err := s.LastSeq(ctx, tenant, thread)
	if err != nil {
		t.Fatal(err)
	}
	var evs []store.Event
	for _, text := range texts {
		m := message.NewText(message.User, text)
		evs = append(evs, store.Event{Kind: store.KindMessage, Message: &m})
	}
	if _, err := s.Append(ctx, tenant, thread, last, evs); err != nil {
		t.Fatal(err)
	}
}

// hitCount is how many hits a search through the index finds.
func hitCount(t *testing.T, s *Store, tenant, thread, text string) int {
	t.Helper()
	hits, err := s.Search(context.Background(), tenant, store.SearchQuery{Text: text, Thread: thread, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return len(hits)
}

func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return openAt(t, s.path)
}

// TestIndexFileMadeAgain: an index file removed, or another log's put in
// its place, is made again from the log at the next open: every message is
// found, and nothing of the other log's index is (I8: its rows would name
// this log's ids).
func TestIndexFileMadeAgain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openAt(t, filepath.Join(dir, "a.db"))
	addTexts(t, s, "acme", "t", "the refund for INV-4401", "a second refund")
	other := openAt(t, filepath.Join(dir, "b.db"))
	// Fewer messages than this log holds: only its key tells it apart.
	addTexts(t, other, "acme", "t", "the swordfish launch code")
	checkIndex(t, s)
	checkIndex(t, other)
	other.Close()

	// Removed.
	s.Close()
	for _, suffix := range []string{"-index", "-index-wal", "-index-shm"} {
		os.Remove(s.path + suffix)
	}
	s = reopen(t, s)
	if n := hitCount(t, s, "acme", "t", "refund"); n != 2 {
		t.Fatalf("%d hits after the index file was removed, want 2", n)
	}
	checkIndex(t, s)

	// Another log's.
	s.Close()
	b, err := os.ReadFile(filepath.Join(dir, "b.db-index"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path+"-index", b, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(s.path + "-index-wal")
	os.Remove(s.path + "-index-shm")
	s = reopen(t, s)
	if n := hitCount(t, s, "acme", "t", "swordfish"); n != 0 {
		t.Errorf("%d hits of another log's index", n)
	}
	if n := hitCount(t, s, "acme", "t", "refund"); n != 2 {
		t.Errorf("%d hits after another log's index file was put in place, want 2", n)
	}
	checkIndex(t, s)
	if err := s.DeleteThread(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	checkIndex(t, s)
}

// TestIndexFileAheadOfLog: a log put back from an older copy, beside an
// index that holds rows it never had, has its index made again: else the
// ids the log gives next would be taken for indexed rows of other
// messages.
func TestIndexFileAheadOfLog(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, filepath.Join(dir, "a.db"))
	addTexts(t, s, "acme", "t", "an early note")
	s.Close()
	old, err := os.ReadFile(s.path)
	if err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	addTexts(t, s, "acme", "t", "a later launch", "another launch", "a third launch")
	checkIndex(t, s)
	s.Close()
	if err := os.WriteFile(s.path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(s.path + "-wal")
	os.Remove(s.path + "-shm")
	s = reopen(t, s)
	addTexts(t, s, "acme", "t", "a fresh memo", "another memo", "a third memo")
	if n := hitCount(t, s, "acme", "t", "launch"); n != 0 {
		t.Errorf("%d hits of messages the log no longer holds", n)
	}
	if n := hitCount(t, s, "acme", "t", "memo"); n != 3 {
		t.Errorf("%d hits of the new messages, want 3", n)
	}
	checkIndex(t, s)
}

// TestDeleteInterrupted: a delete that took a thread's rows out of the
// index but was stopped before the log's transaction (a crash) has them
// put back at the next open once its record is stale; one stopped after
// it has nothing put back.
func TestDeleteInterrupted(t *testing.T) {
	ctx := context.Background()
	defer func(d time.Duration) { staleDelete = d }(staleDelete)
	staleDelete = 0 // the crash is long past at the next open
	for _, logDeleted := range []bool{false, true} {
		t.Run(fmt.Sprintf("log-deleted=%v", logDeleted), func(t *testing.T) {
			s := openAt(t, filepath.Join(t.TempDir(), "m.db"))
			addTexts(t, s, "acme", "doomed", "the refund for INV-4401", "a second refund")
			addTexts(t, s, "acme", "kept", "a refund kept")
			checkIndex(t, s) // indexed, not queued
			if _, err := s.mustIndex(t).beginDelete(ctx, "acme", "doomed"); err != nil {
				t.Fatal(err)
			}
			if n := hitCount(t, s, "acme", "doomed", "refund"); n != 0 {
				t.Fatalf("%d hits of the thread being deleted, want none: its rows are out of the index", n)
			}
			if logDeleted {
				if err := s.deleteFromLog(ctx, "acme", "doomed"); err != nil {
					t.Fatal(err)
				}
			}
			// The crash: the delete's end never runs (nor does this
			// process write the index again: beginDelete's lock stays
			// taken).
			s = reopen(t, s)
			want := 2
			if logDeleted {
				want = 0
			}
			if n := hitCount(t, s, "acme", "doomed", "refund"); n != want {
				t.Errorf("%d hits after the interrupted delete, want %d", n, want)
			}
			var pending int
			if err := s.mustIndex(t).r.QueryRowContext(ctx, `SELECT count(*) FROM deleting`).Scan(&pending); err != nil || pending != 0 {
				t.Errorf("%d deletes still recorded, %v", pending, err)
			}
			checkIndex(t, s)
			if n := hitCount(t, s, "acme", "kept", "refund"); n != 1 {
				t.Errorf("the kept thread: %d hits, want 1", n)
			}
		})
	}
}

// TestIdsNotGivenAgain: after the newest messages are deleted, the next
// ones take ids past theirs.
func TestIdsNotGivenAgain(t *testing.T) {
	ctx := context.Background()
	s := openAt(t, filepath.Join(t.TempDir(), "m.db"))
	addTexts(t, s, "acme", "kept", "an early note")
	addTexts(t, s, "acme", "gone", "a doomed note", "another doomed note")
	var high int64
	if err := s.r.QueryRowContext(ctx, `SELECT max(id) FROM events`).Scan(&high); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteThread(ctx, "acme", "gone"); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s) // the highest id is kept in the file, not in memory
	addTexts(t, s, "acme", "new", "a fresh memo")
	var low int64
	if err := s.r.QueryRowContext(ctx, `SELECT min(id) FROM events WHERE thread = 'new'`).Scan(&low); err != nil {
		t.Fatal(err)
	}
	if low <= high {
		t.Errorf("the new message took id %d, not past the deleted ones' %d", low, high)
	}
}

// openAt opens the file at path, every thread's search through the index.
func openAt(t *testing.T, path string) *Store {
	t.Helper()
	s := openFile(t, path)
	s.searchPath = useIndex
	return s
}

// TestIndexTwoProcesses: two stores on one file (as two processes are),
// each appending, searching and so moving the queue into the index, and
// deleting threads, leave an index that is the log's.
func TestIndexTwoProcesses(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	a, b := openAt(t, path), openAt(t, path)
	run := func(s *Store, name string, errc chan<- error) {
		for i := range IndexBatch + 200 {
			thread := fmt.Sprintf("%s%d", name, i%4)
			last, err := s.LastSeq(ctx, "acme", thread)
			if err == nil {
				m := message.NewText(message.User, fmt.Sprintf("note %d of %s about a refund", i, name))
				_, err = s.Append(ctx, "acme", thread, last, []store.Event{{Kind: store.KindMessage, Message: &m}})
			}
			if err == nil && i%50 == 49 {
				_, err = s.Search(ctx, "acme", store.SearchQuery{Text: "refund"})
			}
			if err == nil && i%300 == 299 {
				err = s.DeleteThread(ctx, "acme", thread)
			}
			if err != nil {
				errc <- fmt.Errorf("%s, step %d: %w", name, i, err)
				return
			}
		}
		errc <- nil
	}
	errc := make(chan error, 2)
	go run(a, "a", errc)
	go run(b, "b", errc)
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	checkIndex(t, a)
	checkIndex(t, b)
}

// TestDeleteWhileAnotherMoves: while a delete is between the two files,
// another process's move passes over the thread's queued rows, so that a
// finished delete leaves none of them in the index and a failed one puts
// them all back.
func TestDeleteWhileAnotherMoves(t *testing.T) {
	ctx := context.Background()
	for _, deleted := range []bool{true, false} {
		t.Run(fmt.Sprintf("deleted=%v", deleted), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.db")
			a, b := openAt(t, path), openAt(t, path)
			addTexts(t, a, "acme", "doomed", "an indexed refund")
			checkIndex(t, a)
			addTexts(t, a, "acme", "doomed", "a queued refund", "another queued refund")
			addTexts(t, a, "acme", "kept", "a kept refund")
			end, err := a.mustIndex(t).beginDelete(ctx, "acme", "doomed")
			if err != nil {
				t.Fatal(err)
			}
			if err := b.catchUpIndex(ctx); err != nil { // the other process's move
				t.Fatal(err)
			}
			if deleted {
				if err := a.deleteFromLog(ctx, "acme", "doomed"); err != nil {
					t.Fatal(err)
				}
			}
			if err := end(deleted); err != nil {
				t.Fatal(err)
			}
			checkIndex(t, a)
			want := 3
			if deleted {
				want = 0
			}
			if n := hitCount(t, b, "acme", "doomed", "refund"); n != want {
				t.Errorf("%d hits of the thread, want %d", n, want)
			}
		})
	}
}

// TestIndexOddPath: the index's writer attaches the log by a URI; a path
// with a space, a percent sign and non-ASCII letters is escaped in it.
func TestIndexOddPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my data 100% ü")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s := openAt(t, filepath.Join(dir, "m é.db"))
	addTexts(t, s, "acme", "t", "the refund for INV-4401", "a second refund")
	checkIndex(t, s)
	if n := hitCount(t, s, "acme", "t", "refund"); n != 2 {
		t.Errorf("%d hits, want 2", n)
	}
}

// TestIndexWriterConnectionReplaced: the index's writer reads the log, which
// is attached to its connection; when database/sql replaces that connection
// (it drops one whose statement was interrupted, as a caller's context
// ending during a move or a delete interrupts it), the new one has the log
// attached too, and the queue still moves.
func TestIndexWriterConnectionReplaced(t *testing.T) {
	ctx := context.Background()
	s := openWithPath(t, useIndex)
	m := message.NewText(message.User, "a queued message about refunds")
	if _, err := s.Append(ctx, "acme", "t", 0, []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
		t.Fatal(err)
	}
	x := s.mustIndex(t)
	x.mu.Lock()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	var n int64
	err := x.w.QueryRowContext(cctx, `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c) SELECT count(*) FROM c`).Scan(&n)
	cancel()
	x.mu.Unlock()
	if err == nil {
		t.Fatal("the endless statement ended without an interrupt")
	}
	if err := s.catchUpIndex(ctx); err != nil {
		t.Fatalf("moving the queue on a new connection: %v", err)
	}
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "refunds"})
	if err != nil || len(hits) != 1 {
		t.Fatalf("tenant search after the move: %+v, %v", hits, err)
	}
}

// TestThreadSearchReadsItsOwnQueue: a thread's search through the index
// reads the thread's own queued messages beside it, however many other
// threads have queued, and moves the queue into the index first only when
// the thread itself has more than readQueued queued.
func TestThreadSearchReadsItsOwnQueue(t *testing.T) {
	defer func(n int64) { indexBatch = n }(indexBatch)
	indexBatch = 1 << 40 // no move but the searches'
	ctx := context.Background()
	s := openWithPath(t, useIndex)
	find := func(thread, text string) []int64 {
		t.Helper()
		hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: text, Thread: thread})
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, h := range hits {
			seqs = append(seqs, h.Seq)
		}
		return seqs
	}
	x, err := s.index()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		say(t, s, "acme", "big", fmt.Sprintf("indexed note %d about the warehouse", i))
	}
	if err := s.catchUpIndex(ctx); err != nil {
		t.Fatal(err)
	}
	mark := x.mark(ctx)
	// Five of the thread's own, and 300 of other threads', queued.
	for i := range 5 {
		say(t, s, "acme", "big", fmt.Sprintf("queued note %d about the lighthouse", i))
	}
	for i := range 300 {
		say(t, s, "acme", fmt.Sprint("other", i%7), fmt.Sprintf("other note %d about the lighthouse", i))
	}
	if got := find("big", "lighthouse"); len(got) != 5 || got[0] < 21 {
		t.Errorf("the thread's queued messages found at seqs %v, want its five past 20", got)
	}
	if got := find("big", "warehouse"); len(got) != 10 {
		t.Errorf("the thread's indexed messages: %d hits, want 10 (the limit)", len(got))
	}
	if m := x.mark(ctx); m != mark {
		t.Errorf("the index's mark moved from %d to %d: the search moved the queue, other threads' messages counted as the thread's", mark, m)
	}
	// More of its own than readQueued: the queue is moved first.
	for i := range readQueued + 1 {
		say(t, s, "acme", "big", fmt.Sprintf("later note %d about the harbour", i))
	}
	if got := find("big", "harbour"); len(got) != 10 {
		t.Errorf("the thread's newly queued messages: %d hits, want 10 (the limit)", len(got))
	}
	if m := x.mark(ctx); m <= mark {
		t.Errorf("the index's mark stayed at %d with %d of the thread's messages queued", m, readQueued+1)
	}
	if got := find("big", "lighthouse"); len(got) != 5 {
		t.Errorf("after the move, %d lighthouse hits in the thread, want 5", len(got))
	}
}

// TestIndexScopeIsNoTerm: the index trusts its scope tokens for a thread's
// search (no tenant or thread is read back from the log), so no message's
// words may ever spell them. A message of another tenant that holds another
// thread's tokens, as the log's older index spelled them and as the index
// file does, with and without the "_", is no candidate of that thread's
// search, nor of its tenant's.
func TestIndexScopeIsNoTerm(t *testing.T) {
	ctx := context.Background()
	s := openWithPath(t, useIndex)
	say(t, s, "acme", "victim", "the vault code is kept elsewhere")
	forged := strings.Join([]string{
		tenantToken("acme"), threadToken("acme", "victim"),
		"_" + tenantToken("acme"), "_" + threadToken("acme", "victim"),
		indexScope("acme", "victim"), "vault",
	}, " ")
	say(t, s, "mallory", "m", forged)
	if err := s.catchUpIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.indexedIDs(t, "acme"); len(got) != 1 {
		t.Fatalf("acme's scope token finds %v in the index, want acme's one message", got)
	}
	for _, q := range []store.SearchQuery{{Text: "vault", Thread: "victim"}, {Text: "vault"}} {
		hits, err := s.Search(ctx, "acme", q)
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != 1 || hits[0].Thread != "victim" {
			t.Fatalf("search %+v in acme: %+v, want acme's one message", q, hits)
		}
	}
}

// TestTenantSearchReadsTheQueue: a tenant's search reads the queue beside
// the index, its own tenant's rows of it only, and finds and ranks what it
// finds once the queue is moved; the index's mark stays where it was. With
// more than tenantReadQueued queued, it moves the queue first.
func TestTenantSearchReadsTheQueue(t *testing.T) {
	defer func(n int64) { indexBatch = n }(indexBatch)
	indexBatch = 1 << 40 // no move but the test's and the searches'
	ctx := context.Background()
	s := openWithPath(t, useIndex)
	search := func() []store.Hit {
		t.Helper()
		hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "lighthouse keeper", Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			if h.Thread == "intruder" {
				t.Fatalf("another tenant's message found: %+v", h)
			}
		}
		return hits
	}
	for i := range 6 {
		say(t, s, "acme", []string{"a", "b"}[i%2], fmt.Sprintf("indexed: the lighthouse note %d", i))
	}
	if err := s.catchUpIndex(ctx); err != nil {
		t.Fatal(err)
	}
	x, err := s.index()
	if err != nil {
		t.Fatal(err)
	}
	mark := x.mark(ctx)
	// Queued: acme's own in both threads (one thread new) and, between
	// them, more of another tenant's than acme's whole history.
	for i := range 5 {
		say(t, s, "acme", []string{"b", "a", "c"}[i%3], fmt.Sprintf("queued: the lighthouse keeper %d", i))
		for j := range 40 {
			say(t, s, "umbrella", "intruder", fmt.Sprintf("the lighthouse keeper %d/%d", i, j))
		}
	}
	beside := search()
	if m := x.mark(ctx); m != mark {
		t.Fatalf("the index's mark moved from %d to %d: the search moved the queue", mark, m)
	}
	if len(beside) != 11 {
		t.Fatalf("%d hits with 5 of 11 queued, want 11: %+v", len(beside), beside)
	}
	if err := s.catchUpIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if indexed := search(); fmt.Sprint(indexed) != fmt.Sprint(beside) {
		t.Fatalf("read beside the index:\n%+v\nonce moved into it:\n%+v", beside, indexed)
	}
	// Past the bound, the queue is moved first.
	for i := range int(tenantReadQueued) + 1 {
		say(t, s, "umbrella", "intruder", fmt.Sprintf("filler %d", i))
	}
	say(t, s, "acme", "a", "late: the lighthouse keeper")
	mark = x.mark(ctx)
	if got := search(); len(got) != 12 {
		t.Fatalf("%d hits with a long queue, want 12", len(got))
	}
	if m := x.mark(ctx); m == mark {
		t.Fatalf("the index's mark stayed at %d with %d queued", m, tenantReadQueued+2)
	}
}

// TestTenantSearchPlansAgree: a tenant's search finds and ranks the same
// hits whether it reads its candidates by id or walks the tenant's
// messages (byID chooses by their number), with messages both in the index
// and queued, and filters.
func TestTenantSearchPlansAgree(t *testing.T) {
	defer func(n int64) { indexBatch = n }(indexBatch)
	indexBatch = 1 << 40 // no move but the test's
	defer func(r int64) { tenantWalkRatio = r }(tenantWalkRatio)
	ctx := context.Background()
	s := openWithPath(t, useIndex)
	words := []string{"lighthouse", "keeper", "INV-4401", "harbour", "storm", "refund policy"}
	for i := range 60 {
		say(t, s, "acme", fmt.Sprint("t", i%4), fmt.Sprintf("%s and %s, note %d", words[i%len(words)], words[(i*5)%len(words)], i))
		say(t, s, "umbrella", "u", words[i%len(words)])
		if i == 40 {
			if err := s.catchUpIndex(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, q := range []store.SearchQuery{
		{Text: "lighthouse"}, {Text: "keeper storm", Limit: 50}, {Text: "INV-4401"}, {Text: `"refund policy"`},
		{Text: "harbour", Role: message.User}, {Text: "storm", FromSeq: 5, ToSeq: 12}, {Text: "nothing-holds-this"},
	} {
		var got [2]string
		for i, ratio := range []int64{0, 1 << 40} { // by id, then the walk
			tenantWalkRatio = ratio
			hits, err := s.Search(ctx, "acme", q)
			if err != nil {
				t.Fatal(err)
			}
			got[i] = fmt.Sprint(hits)
		}
		if got[0] != got[1] {
			t.Errorf("search %+v by id:\n%s\nwalking:\n%s", q, got[0], got[1])
		}
	}
}

// TestMoveInChunks: the queue moves in chunks of ids, and a chunk's end is
// the queue's last row when fewer are left: every message is moved once,
// the count moved is the messages' (events without one leave gaps in the
// ids and hold no terms), and each thread's messages are then found
// through the index alone.
func TestMoveInChunks(t *testing.T) {
	defer func(n, c int64) { indexBatch, moveChunk = n, c }(indexBatch, moveChunk)
	indexBatch = 1 << 40 // no move but the test's
	moveChunk = 7
	ctx := context.Background()
	s := openWithPath(t, useIndex)
	const msgs = 40 // one an append, and a note beside every fourth
	for i := range msgs {
		thread := fmt.Sprint("t", i%3)
		last, err := s.LastSeq(ctx, "acme", thread)
		if err != nil {
			t.Fatal(err)
		}
		m := message.NewText(message.User, fmt.Sprintf("parcel%d arrived", i))
		evs := []store.Event{{Kind: store.KindMessage, Message: &m}}
		if i%4 == 0 {
			evs = append(evs, store.Event{Kind: store.KindNote, Data: json.RawMessage(`{"n":1}`)})
		}
		if _, err := s.Append(ctx, "acme", thread, last, evs); err != nil {
			t.Fatal(err)
		}
	}
	x := s.mustIndex(t)
	moved, err := x.move(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if moved != int64(msgs) {
		t.Fatalf("moved %d rows, want the %d messages", moved, msgs)
	}
	var high int64
	if err := s.r.QueryRowContext(ctx, `SELECT max(id) FROM events`).Scan(&high); err != nil {
		t.Fatal(err)
	}
	if mark := x.mark(ctx); mark != high {
		t.Fatalf("the mark is %d after the move, want the last id %d", mark, high)
	}
	if again, err := x.move(ctx); err != nil || again != 0 {
		t.Fatalf("a second move moved %d, %v", again, err)
	}
	for i := range msgs {
		hits, err := s.Search(ctx, "acme", store.SearchQuery{Thread: fmt.Sprint("t", i%3), Text: fmt.Sprintf("parcel%d", i)})
		if err != nil || len(hits) != 1 {
			t.Fatalf("parcel%d: %+v, %v", i, hits, err)
		}
	}
}
