package postgres_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mnemehq/mneme/store/postgres/pgtest"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/postgres"
	"github.com/mnemehq/mneme/store/storetest"
)

var ctx = context.Background()

// freshDSN creates a schema of its own for the test and returns a DSN whose
// search_path is that schema; the schema is dropped when the test ends.
func freshDSN(t testing.TB) string { return pgtest.DSN(t, "mneme_t") }

func open(t testing.TB) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(ctx, freshDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

func msg(role message.Role, text string) store.Event {
	m := message.NewText(role, text)
	return store.Event{Kind: store.KindMessage, Message: &m}
}

// TestConcurrentOpen: replicas starting at once on an empty schema all
// open it; the migrations ran exactly once.
func TestConcurrentOpen(t *testing.T) {
	dsn := freshDSN(t)
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	stores := make([]*postgres.Store, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = postgres.Open(ctx, dsn)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	var versions int
	if err := stores[0].Pool().QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != postgres.SchemaVersion {
		t.Errorf("schema_migrations has %d rows, want %d", versions, postgres.SchemaVersion)
	}
	// Every replica writes and sees the others' writes.
	for i, s := range stores {
		if _, err := s.Append(ctx, "acme", "shared", int64(i), []store.Event{msg(message.User, "from replica")}); err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	if last, _ := stores[0].LastSeq(ctx, "acme", "shared"); last != n {
		t.Errorf("last seq %d, want %d", last, n)
	}
}

// TestDeleteThreadRows: after DeleteThread no table holds a row of the
// thread or a byte of its text (the physical pages are vacuum's business).
func TestDeleteThreadRows(t *testing.T) {
	s := open(t)
	evs, err := s.Append(ctx, "acme", "doomed", 0, []store.Event{
		msg(message.User, "SECRET-PAYLOAD-qzxvkwj-4412 lives here"),
		msg(message.Assistant, "ack qzxvkwjplm"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutVectors(ctx, "acme", []store.Vector{{Ref: evs[0].Ref, Model: "m", V: []float32{1, 2, 3}}}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.TryLease(ctx, "acme", "doomed", "compact", "r1", 10e9); err != nil || !ok {
		t.Fatalf("TryLease = %v, %v", ok, err)
	}
	if _, err := s.Append(ctx, "acme", "kept", 0, []store.Event{msg(message.User, "innocent bystander")}); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var n int
		err := s.Pool().QueryRow(ctx, `SELECT
			(SELECT count(*) FROM threads WHERE id = 'doomed') +
			(SELECT count(*) FROM events WHERE thread = 'doomed' OR message ILIKE '%qzxvkwj%' OR terms ILIKE '%qzxvkwj%') +
			(SELECT count(*) FROM vectors WHERE thread = 'doomed') +
			(SELECT count(*) FROM leases WHERE thread = 'doomed')`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 5 {
		t.Fatalf("before delete %d rows found, want 5: the check below would prove nothing", n)
	}
	if err := s.DeleteThread(ctx, "acme", "doomed"); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Errorf("after delete %d rows of the thread remain", n)
	}
	if info, err := s.Thread(ctx, "acme", "kept"); err != nil || info.Messages != 1 {
		t.Errorf("kept thread = %+v, %v", info, err)
	}
}

// TestInvalidBytes: text PostgreSQL cannot store is ErrInvalid, not a
// database error.
func TestInvalidBytes(t *testing.T) {
	s := open(t)
	for _, c := range []struct{ tenant, thread string }{
		{"acme", "nul\x00thread"},
		{"acme", "bad\xffutf8"},
		{"ten\x00ant", "t"},
	} {
		if _, err := s.Append(ctx, c.tenant, c.thread, 0, []store.Event{msg(message.User, "x")}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Append(%q, %q) err = %v, want ErrInvalid", c.tenant, c.thread, err)
		}
	}
}

// TestLossyDocument: a message too long for exact tsvector positions is
// still found, and its phrases and identifiers still match exactly.
func TestLossyDocument(t *testing.T) {
	s := open(t)
	var b strings.Builder
	for i := range 20000 {
		b.WriteString("the filler word number ")
		b.WriteString(strings.Repeat("x", i%7+1))
		b.WriteByte('\n')
	}
	b.WriteString("closing remark: deadline-9931 was missed, checkout failure\n")
	if _, err := s.Append(ctx, "acme", "big", 0, []store.Event{msg(message.Tool, b.String()), msg(message.User, "failure checkout in a small one")}); err != nil {
		t.Fatal(err)
	}
	var lossy int
	if err := s.Pool().QueryRow(ctx, `SELECT lossy FROM events WHERE thread = 'big' AND seq = 1`).Scan(&lossy); err != nil || lossy == 0 {
		t.Fatalf("the big message is indexed with lossy = %d (%v): the test would not exercise the lossy path", lossy, err)
	}
	for _, c := range []struct {
		q    string
		want []int64
	}{
		{"deadline-9931", []int64{1}},
		{"deadline-993", nil},
		{`"checkout failure"`, []int64{1}},
		{`"failure checkout"`, []int64{2}},
		{`"remark deadline"`, []int64{1}},
		{`"deadline remark"`, nil},
		{"closing", []int64{1}},
	} {
		hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: c.q})
		if err != nil {
			t.Fatalf("Search(%q): %v", c.q, err)
		}
		var got []int64
		for _, h := range hits {
			got = append(got, h.Seq)
			if h.Score <= 0 {
				t.Errorf("Search(%q): score %v", c.q, h.Score)
			}
		}
		if len(got) != len(c.want) || (len(got) > 0 && got[0] != c.want[0]) {
			t.Errorf("Search(%q) = %v, want %v", c.q, got, c.want)
		}
	}
}

// PostgreSQL answers LoCoMo's questions as store/inmem does (whose
// figures storetest.LoCoMoSearch checks).
func TestLoCoMoSame(t *testing.T) {
	storetest.LoCoMoSame(t, open(t), inmem.New())
}

// TestGroupStatement: one group holding two creators of one new thread,
// two appends after the same seq of one thread, and one after a seq the
// thread is not at. One creator and one of the two appends win, the other
// requests fail alone with ErrConflict, and the threads' counters count
// the winners only.
func TestGroupStatement(t *testing.T) {
	s := open(t)
	errs := s.AppendGroup([]postgres.GroupRequest{
		{Tenant: "acme", Thread: "a", After: 0, Events: []store.Event{msg(message.User, "a1")}},
		{Tenant: "acme", Thread: "a", After: 0, Events: []store.Event{msg(message.User, "a1 again")}},
		{Tenant: "acme", Thread: "b", After: 0, Events: []store.Event{msg(message.User, "b1"), msg(message.Assistant, "b2")}},
	})
	if errs[0] != nil || !errors.Is(errs[1], store.ErrConflict) || errs[2] != nil {
		t.Fatalf("creators: %v, want nil, ErrConflict, nil", errs)
	}
	errs = s.AppendGroup([]postgres.GroupRequest{
		{Tenant: "acme", Thread: "a", After: 1, Events: []store.Event{msg(message.Assistant, "a2 first")}},
		{Tenant: "acme", Thread: "a", After: 1, Events: []store.Event{msg(message.Assistant, "a2 second")}},
		{Tenant: "acme", Thread: "b", After: 1, Events: []store.Event{msg(message.User, "b behind")}},
		{Tenant: "other", Thread: "b", After: 2, Events: []store.Event{msg(message.User, "not acme's b")}},
	})
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Errorf("two appends after seq 1 of a: %v, %v; want exactly one to win", errs[0], errs[1])
	}
	for i := range 2 {
		if errs[i] != nil && !errors.Is(errs[i], store.ErrConflict) {
			t.Errorf("the losing append: %v, want ErrConflict", errs[i])
		}
	}
	if !errors.Is(errs[2], store.ErrConflict) || !errors.Is(errs[3], store.ErrConflict) {
		t.Errorf("b behind its tail, another tenant's b: %v, %v; want ErrConflict", errs[2], errs[3])
	}
	want := map[string][]string{"a": {"a1", "a2 first"}, "b": {"b1", "b2"}}
	if errs[0] != nil {
		want["a"][1] = "a2 second"
	}
	for thread, texts := range want {
		checkTexts(t, s, thread, texts)
		if ti, err := s.Thread(ctx, "acme", thread); err != nil || ti.Messages != 2 || ti.Events != 2 {
			t.Errorf("%s: %+v, %v; want 2 messages, 2 events", thread, ti, err)
		}
	}
	if _, err := s.Thread(ctx, "other", "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the other tenant's b: %v, want ErrNotFound", err)
	}
}

// TestGroupStatementMixed: a group of creators and movers takes the
// statement that does both, a group of movers only the one that only
// moves; both answer alike. Of two appends after seq 2 of a, one wins;
// an append after seq 1 of a (behind), after seq 9 of d (ahead: it would
// leave a gap) or after seq 2 of b (which does not exist) conflicts; c is
// created. Then, movers only: d ahead again conflicts, a moves.
func TestGroupStatementMixed(t *testing.T) {
	s := open(t)
	for i, err := range s.AppendGroup([]postgres.GroupRequest{
		{Tenant: "acme", Thread: "a", After: 0, Events: []store.Event{msg(message.User, "a1"), msg(message.Assistant, "a2")}},
		{Tenant: "acme", Thread: "d", After: 0, Events: []store.Event{msg(message.User, "d1")}},
	}) {
		if err != nil {
			t.Fatalf("creator %d: %v", i, err)
		}
	}
	errs := s.AppendGroup([]postgres.GroupRequest{
		{Tenant: "acme", Thread: "a", After: 2, Events: []store.Event{msg(message.User, "a3 first")}},
		{Tenant: "acme", Thread: "c", After: 0, Events: []store.Event{msg(message.User, "c1")}},
		{Tenant: "acme", Thread: "a", After: 1, Events: []store.Event{msg(message.User, "a2 behind")}},
		{Tenant: "acme", Thread: "a", After: 2, Events: []store.Event{msg(message.User, "a3 second")}},
		{Tenant: "acme", Thread: "b", After: 2, Events: []store.Event{msg(message.User, "b3")}},
		{Tenant: "acme", Thread: "d", After: 9, Events: []store.Event{msg(message.User, "d10 ahead")}},
	})
	if errs[1] != nil {
		t.Errorf("c created: %v", errs[1])
	}
	for _, i := range []int{2, 4, 5} {
		if !errors.Is(errs[i], store.ErrConflict) {
			t.Errorf("request %d (a behind, b missing, d ahead): %v, want ErrConflict", i, errs[i])
		}
	}
	if (errs[0] == nil) == (errs[3] == nil) {
		t.Fatalf("two appends after seq 2 of a: %v, %v; want exactly one to win", errs[0], errs[3])
	}
	third := "a3 first"
	if errs[0] != nil {
		third = "a3 second"
		if !errors.Is(errs[0], store.ErrConflict) {
			t.Errorf("the losing append: %v, want ErrConflict", errs[0])
		}
	} else if !errors.Is(errs[3], store.ErrConflict) {
		t.Errorf("the losing append: %v, want ErrConflict", errs[3])
	}
	errs = s.AppendGroup([]postgres.GroupRequest{
		{Tenant: "acme", Thread: "d", After: 5, Events: []store.Event{msg(message.User, "d6 ahead")}},
		{Tenant: "acme", Thread: "a", After: 3, Events: []store.Event{msg(message.Assistant, "a4")}},
	})
	if !errors.Is(errs[0], store.ErrConflict) || errs[1] != nil {
		t.Errorf("movers only, d ahead and a: %v, %v; want ErrConflict, nil", errs[0], errs[1])
	}
	for thread, want := range map[string][]string{"a": {"a1", "a2", third, "a4"}, "c": {"c1"}, "d": {"d1"}} {
		checkTexts(t, s, thread, want)
		if ti, err := s.Thread(ctx, "acme", thread); err != nil || ti.Messages != int64(len(want)) || ti.Events != int64(len(want)) {
			t.Errorf("%s: %+v, %v; want %d messages", thread, ti, err, len(want))
		}
	}
	if _, err := s.Thread(ctx, "acme", "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("b: %v, want ErrNotFound", err)
	}
}

// TestThreadsListedAfterMigration6: threads written at schema version 5
// (listed by an index on updated) are listed at the current version in
// the same order, updated time then id, within a minute and across
// minutes, page by page.
func TestThreadsListedAfterMigration6(t *testing.T) {
	dsn := freshDSN(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	stmts := []string{`CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())`}
	for v := 1; v <= 5; v++ {
		stmts = append(stmts, postgres.Migration(v), fmt.Sprintf(`INSERT INTO schema_migrations (version) VALUES (%d)`, v))
	}
	const minute = int64(time.Minute)
	base := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC).UnixNano()
	updated := map[string]int64{ // ties, the ends of a minute, minutes apart
		"a": base, "b": base, "c": base + minute - 1, "d": base + minute, "e": base + minute,
		"f": base + 3*minute + 5, "g": base - 1, "h": base + 30*time.Second.Nanoseconds(),
	}
	for id, u := range updated {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO threads (tenant, id, created, updated, last_seq) VALUES ('acme', '%s', %d, %d, 0)`, id, base-minute, u))
	}
	for _, stmt := range stmts {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("set up version 5: %v", err)
		}
	}
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := slices.Collect(maps.Keys(updated))
	slices.SortFunc(want, func(a, b string) int {
		if c := cmp.Compare(updated[b], updated[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	for _, size := range []int{1, 2, 3, 100} {
		var got []string
		for cursor := ""; ; {
			infos, next, err := s.Threads(ctx, "acme", store.Page{Cursor: cursor, Limit: size})
			if err != nil {
				t.Fatal(err)
			}
			for _, ti := range infos {
				got = append(got, ti.ID)
				if ti.Updated.UnixNano() != updated[ti.ID] {
					t.Errorf("%s updated %v, want %v", ti.ID, ti.Updated.UnixNano(), updated[ti.ID])
				}
			}
			if cursor = next; cursor == "" {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages of %d: %v, want %v", size, got, want)
		}
	}
}

// TestThreadsIndexesSpareAppends: no index of threads holds a column an
// append moves at every call (last_seq, updated, the counters), so that
// the update of the thread's row is a HOT update (migration 6).
func TestThreadsIndexesSpareAppends(t *testing.T) {
	s := open(t)
	rows, err := s.Pool().Query(ctx, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = 'threads'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cols {
		switch c {
		case "last_seq", "updated", "messages", "tokens":
			t.Errorf("an index of threads holds %s", c)
		}
	}
	var exprs int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_index WHERE indrelid = 'threads'::regclass AND indexprs IS NOT NULL`).Scan(&exprs); err != nil || exprs != 0 {
		t.Errorf("%d expression indexes on threads, %v", exprs, err)
	}
}

// TestGroupStatementColumns: a group's events keep every column as
// appended, NULLs beside values in one argument (events with and without
// a message, a ref, data), text beyond ASCII; and a request whose ref is
// taken fails alone, ErrInvalid, the others committed.
func TestGroupStatementColumns(t *testing.T) {
	s := open(t)
	at := time.Date(2026, 5, 1, 10, 0, 0, 123456789, time.UTC)
	text := msg(message.User, "naïve café ☕ — 日本語")
	text.Ref, text.Tokens, text.At = "m_chosen", 7, at
	note := store.Event{Kind: store.KindNote, Data: []byte(`{"k":"ü"}`), At: at.Add(time.Second)}
	reply := msg(message.Assistant, "plain")
	taken := msg(message.User, "ref taken")
	taken.Ref = "m_chosen"
	errs := s.AppendGroup([]postgres.GroupRequest{
		{Tenant: "acme", Thread: "a", After: 0, Events: []store.Event{text, note}},
		{Tenant: "acme", Thread: "b", After: 0, Events: []store.Event{reply}},
		{Tenant: "acme", Thread: "c", After: 0, Events: []store.Event{taken}},
	})
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], store.ErrInvalid) {
		t.Fatalf("%v, want nil, nil, ErrInvalid", errs)
	}
	evs, err := s.Load(ctx, "acme", "a", 0, 0)
	if err != nil || len(evs) != 2 {
		t.Fatalf("a: %+v, %v", evs, err)
	}
	if e := evs[0]; e.Seq != 1 || e.Kind != store.KindMessage || e.Ref != "m_chosen" || e.Tokens != 7 || !e.At.Equal(at) ||
		e.Message.Role != message.User || e.Message.TextOf() != text.Message.TextOf() || e.Data != nil {
		t.Errorf("message: %+v", e)
	}
	if e := evs[1]; e.Seq != 2 || e.Kind != store.KindNote || e.Ref != "" || e.Message != nil || string(e.Data) != `{"k":"ü"}` || !e.At.Equal(note.At) {
		t.Errorf("note: %+v", e)
	}
	if evs, err := s.Load(ctx, "acme", "b", 0, 0); err != nil || len(evs) != 1 || evs[0].Message.TextOf() != "plain" || evs[0].Ref == "" {
		t.Errorf("b: %+v, %v", evs, err)
	}
	if _, err := s.Thread(ctx, "acme", "c"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("c: %v, want ErrNotFound", err)
	}
}

// TestTSVectorIsTerms: every path that writes events (a group's Append,
// a large Append's COPY, Import) writes tsv as the server parses terms,
// for documents of every shape: scope lexemes, many positions, lossy ones,
// none (an event without a message).
func TestTSVectorIsTerms(t *testing.T) {
	s := open(t)
	docs := storetest.Synthetic(200)
	many := msg(message.User, strings.Repeat("again and again ", 300)+"naïve 日本語 x1 ü")
	huge := msg(message.Assistant, strings.Repeat("w ", 17000))
	note := store.Event{Kind: store.KindNote, Data: []byte(`{}`)}
	for i, evs := range [][]store.Event{{docs[0]}, {docs[1], note}, {many}, {huge}, docs[2:3]} {
		if _, err := s.Append(ctx, "acme", fmt.Sprintf("small%d", i), 0, evs); err != nil {
			t.Fatal(err)
		}
	}
	big := append(append([]store.Event{}, docs[10:100]...), many, note)
	if _, err := s.Append(ctx, "acme", "big", 0, big); err != nil {
		t.Fatal(err)
	}
	imported := append([]store.Event{}, docs[100:200]...)
	for i := range imported {
		imported[i].Seq = int64(i) + 1
	}
	if err := s.Import(ctx, "acme", "imported", imported); err != nil {
		t.Fatal(err)
	}
	// As a replica of the build before schema 7 writes, and an update of
	// terms alone.
	for _, stmt := range []string{
		`INSERT INTO events (tenant, thread, seq, kind, at, terms) VALUES ('acme', 'old', 1, 'note', 1, '''old'':1 ''build'':2')`,
		`UPDATE events SET terms = '''rewritten'':1' WHERE thread = 'small0'`,
	} {
		if _, err := s.Pool().Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	var n, differ int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE tsv IS DISTINCT FROM terms::tsvector) FROM events`).Scan(&n, &differ); err != nil {
		t.Fatal(err)
	}
	if n != 7+len(big)+100 || differ != 0 {
		t.Errorf("%d events, %d whose tsv is not their terms", n, differ)
	}
}

// TestGINCleaner: once a Store's appends have added what starts a
// cleaning to the events' GIN pending list, its cleaner merges the list
// into the index: nothing is left pending. Without the cleaner, the same
// appends leave their entries pending.
func TestGINCleaner(t *testing.T) {
	pending := func(cleanAt int64) int64 {
		dsn := freshDSN(t)
		s, err := postgres.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		if s.GINCleanAt() <= 0 {
			t.Errorf("the cleaner is off by default (starts at %d bytes)", s.GINCleanAt())
		}
		s.SetGINCleanAt(cleanAt)
		appendThreads(t, s, 4)
		s.WaitGINClean()
		s.Close()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var pages int64
		if err := conn.QueryRow(ctx, `SELECT gin_clean_pending_list('events_tsv'::regclass)`).Scan(&pages); err != nil {
			t.Fatal(err)
		}
		return pages
	}
	if n := pending(1); n != 0 {
		t.Errorf("with the cleaner, %d pages were left pending, want 0", n)
	}
	if n := pending(0); n == 0 {
		t.Errorf("without the cleaner, no page was left pending: the test shows nothing")
	}
}

// TestGINCleanerCancelled: a Store closed while its cleaner merges the
// pending list cancels the merge (or finds it done); either way the index
// then finds every message: those merged and those still pending.
func TestGINCleanerCancelled(t *testing.T) {
	dsn := freshDSN(t)
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	s.SetGINCleanAt(1)
	appendThreads(t, s, 20)
	s.Close()
	s, err = postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "invoice", Limit: 100})
	if err != nil || len(hits) != 20 {
		t.Errorf("invoice: %d hits, %v; want the 20 messages that name one", len(hits), err)
	}
}

// appendThreads appends, in one group, ten synthetic messages to each of n
// new threads t0, t1, ... of tenant acme.
func appendThreads(t *testing.T, s *postgres.Store, n int) {
	t.Helper()
	docs := storetest.Synthetic(10 * n)
	var reqs []postgres.GroupRequest
	for i := range n {
		reqs = append(reqs, postgres.GroupRequest{Tenant: "acme", Thread: fmt.Sprint("t", i), Events: docs[i*10 : (i+1)*10]})
	}
	for i, err := range s.AppendGroup(reqs) {
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

// checkTexts checks that acme's thread holds messages of these texts, in
// order.
func checkTexts(t *testing.T, s store.Store, thread string, want []string) {
	t.Helper()
	evs, err := s.Load(ctx, "acme", thread, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Message.TextOf())
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("%s holds %q, want %q", thread, got, want)
	}
}
