package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// TestThreadsListedByActive: threads are listed newest first, by updated
// then id, page after page, though the index holds only the minute
// (migration 8): threads appended to at random moments over a few
// minutes, several in one nanosecond, listed in pages of every size, give
// the order a sort of (updated desc, id) gives; and every row's active is
// its updated's minute, whichever of the two updates moved it.
func TestThreadsListedByActive(t *testing.T) {
	ctx := context.Background()
	s := openWithPath(t, 0)
	rng := rand.New(rand.NewPCG(8, 8))
	base := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var now time.Time
	s.now = func() time.Time { return now }
	last := map[string]int64{}
	for range 400 {
		// Moments cluster, so that ties on updated happen.
		now = base.Add(time.Duration(rng.IntN(240)) * time.Second / 2)
		id := fmt.Sprintf("t%02d", rng.IntN(40))
		m := message.NewText(message.User, "x")
		if _, err := s.Append(ctx, "acme", id, last[id], []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
			t.Fatal(err)
		}
		last[id]++
	}
	all, _, err := s.Threads(ctx, "acme", store.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(all)
	slices.SortFunc(want, func(a, b store.ThreadInfo) int {
		if c := b.Updated.Compare(a.Updated); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if len(want) != len(last) {
		t.Fatalf("%d threads listed, %d written", len(want), len(last))
	}
	for size := 1; size <= 7; size++ {
		var got []store.ThreadInfo
		p := store.Page{Limit: size}
		for {
			page, next, err := s.Threads(ctx, "acme", p)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page...)
			if next == "" {
				break
			}
			p.Cursor = next
		}
		if len(got) != len(want) {
			t.Fatalf("pages of %d: %d threads, want %d", size, len(got), len(want))
		}
		for i := range got {
			if got[i].ID != want[i].ID {
				t.Fatalf("pages of %d: thread %d is %s (updated %v), want %s (updated %v)", size, i, got[i].ID, got[i].Updated, want[i].ID, want[i].Updated)
			}
		}
	}
	var bad int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM threads WHERE active != updated - updated % 60000000000`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d rows whose active is not their updated's minute (%v)", bad, err)
	}
}

// TestMigrateActive: a version-7 file's threads get their minute, and an
// append to one of them moves it to the top of the list.
func TestMigrateActive(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v7.db")
	db := fileAt(t, path, 7)
	for i, u := range []int64{90_000_000_000, 30_000_000_000, 150_000_000_000} {
		if _, err := db.ExecContext(ctx, `INSERT INTO threads (tenant, id, created, updated, last_seq, messages, tokens) VALUES ('acme', ?, 1, ?, 1, 0, 0)`, fmt.Sprint("t", i), u); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := func() string {
		list, _, err := s.Threads(ctx, "acme", store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ti := range list {
			out = append(out, ti.ID)
		}
		return strings.Join(out, " ")
	}
	if got := ids(); got != "t2 t0 t1" {
		t.Fatalf("after the migration: %s, want t2 t0 t1", got)
	}
	var bad int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM threads WHERE active != updated - updated % 60000000000`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d migrated rows whose active is not their updated's minute (%v)", bad, err)
	}
	m := message.NewText(message.User, "x")
	if _, err := s.Append(ctx, "acme", "t1", 1, []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
		t.Fatal(err)
	}
	if got := ids(); got != "t1 t2 t0" {
		t.Fatalf("after an append to t1: %s, want t1 t2 t0", got)
	}
}

// TestMigrateAutomerge: migration 11 set the archive index's automerge to
// 8 on a file made at version 10; since version 12 the index has a file of
// its own, made with automerge 8, from a version 10 file as for a new one.
func TestMigrateAutomerge(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v10.db")
	db := fileAt(t, path, 10)
	automerge := func(db *sql.DB) (v sql.NullInt64) {
		t.Helper()
		err := db.QueryRowContext(ctx, `SELECT v FROM events_fts_config WHERE k = 'automerge'`).Scan(&v)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		return v
	}
	if v := automerge(db); v.Valid {
		t.Fatalf("version 10 has automerge %d set already: the test would prove nothing", v.Int64)
	}
	db.Close()
	for _, p := range []string{path, filepath.Join(t.TempDir(), "new.db")} {
		s, err := Open(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if v := automerge(s.mustIndex(t).r); v.Int64 != 8 {
			t.Errorf("%s: automerge %v, want 8", filepath.Base(p), v)
		}
		s.Close()
	}
}
