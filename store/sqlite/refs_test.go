package sqlite

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// TestRefCipher: a locator sealed opens to itself, refs of consecutive
// locators share no visible structure, and what this key did not seal
// does not open: random refs, a sealed ref with any one digit changed,
// another key's refs, and refs spelled otherwise (upper case, too short).
func TestRefCipher(t *testing.T) {
	key := func(b byte) refCipher {
		k := make([]byte, 16)
		for i := range k {
			k[i] = b + byte(i)
		}
		c, err := newRefCipher(k)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c, other := key(1), key(100)
	seen := map[string]bool{}
	for _, loc := range []uint64{0, 1, 2, 4095, 4096, 1 << 40, 1<<63 - 1, 1<<64 - 1} {
		ref := c.seal(loc)
		if len(ref) != 26 || !strings.HasPrefix(ref, "m_") || strings.ToLower(ref) != ref {
			t.Fatalf("seal(%d) = %q, want m_ and 24 lower-case hex digits", loc, ref)
		}
		if seen[ref] {
			t.Fatalf("seal(%d) = %q twice", loc, ref)
		}
		seen[ref] = true
		if got, ok := c.open(ref); !ok || got != loc {
			t.Errorf("open(seal(%d)) = %d, %v", loc, got, ok)
		}
		if _, ok := other.open(ref); ok {
			t.Errorf("another key opens seal(%d)", loc)
		}
		if _, ok := c.open(strings.ToUpper(ref[:2]) + strings.ToUpper(ref[2:])); ok && ref[2:] != strings.ToUpper(ref[2:]) {
			t.Errorf("the upper-case spelling of seal(%d) opens", loc)
		}
		// Every one-digit change opens to nothing (or, once in 2^32, to
		// another locator; never here).
		for i := 2; i < len(ref); i++ {
			for _, d := range "0123456789abcdef" {
				if byte(d) == ref[i] {
					continue
				}
				near := ref[:i] + string(d) + ref[i+1:]
				if got, ok := c.open(near); ok {
					t.Fatalf("%q, one digit from seal(%d), opens to %d", near, loc, got)
				}
			}
		}
	}
	for i := range 20000 {
		if loc, ok := c.open(store.NewRef()); ok {
			t.Fatalf("random ref %d opens to %d", i, loc)
		}
	}
	for _, bad := range []string{"", "m_", "m_00", "x_" + strings.Repeat("0", 24), "m_" + strings.Repeat("g", 24), c.seal(7) + "0"} {
		if _, ok := c.open(bad); ok {
			t.Errorf("%q opens", bad)
		}
	}
	// Consecutive locators' refs differ in about half their bits, as
	// random ones do (a counter shows in a handful).
	total := 0
	for loc := range uint64(1000) {
		a, _ := hex.DecodeString(c.seal(loc)[2:])
		b, _ := hex.DecodeString(c.seal(loc + 1)[2:])
		for i := range a {
			for x := a[i] ^ b[i]; x != 0; x &= x - 1 {
				total++
			}
		}
	}
	if mean := float64(total) / 1000; mean < 44 || mean > 52 {
		t.Errorf("consecutive locators' refs differ in %.1f bits on average, want about 48", mean)
	}
}

// TestStoreMadeRefs: refs the store makes (for events without one, and
// through NewRef, as the engine takes them) are kept by their locator's
// key in the ref column, the ref in made_ref; they are found by EventByRef, returned by Load and
// Search, unique per tenant (a second use in the tenant fails as invalid,
// another tenant may use it); refs made elsewhere are kept in the ref
// column and found too.
func TestStoreMadeRefs(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "refs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	msg := func(text, ref string) store.Event {
		m := message.NewText(message.User, text)
		return store.Event{Kind: store.KindMessage, Message: &m, Ref: ref}
	}
	made, foreign := s.NewRef(), store.NewRef()
	got, err := s.Append(ctx, "acme", "t", 0, []store.Event{
		msg("made by the store for us about refunds", ""),
		msg("made through NewRef about refunds", made),
		msg("made elsewhere about refunds", foreign),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got[1].Ref != made || got[2].Ref != foreign || got[0].Ref == "" {
		t.Fatalf("refs %q %q %q", got[0].Ref, got[1].Ref, got[2].Ref)
	}
	for i, ev := range got {
		var ref, madeRef sql.NullString
		if err := s.r.QueryRowContext(ctx, `SELECT ref, made_ref FROM events WHERE tenant = 'acme' AND thread = 't' AND seq = ?`, ev.Seq).Scan(&ref, &madeRef); err != nil {
			t.Fatal(err)
		}
		loc, opens := s.opener.open(ev.Ref)
		switch {
		case i < 2 && (!opens || ref.String != locKey(loc) || madeRef.String != ev.Ref):
			t.Errorf("event %d (store-made ref %s, locator %d): ref %q, made_ref %v", i, ev.Ref, loc, ref.String, madeRef)
		case i == 2 && (opens || ref.String != foreign || madeRef.Valid):
			t.Errorf("event %d (foreign ref): ref %v, made_ref %v", i, ref, madeRef)
		}
		thread, byRef, err := s.EventByRef(ctx, "acme", ev.Ref)
		if err != nil || thread != "t" || byRef.Seq != ev.Seq || byRef.Ref != ev.Ref {
			t.Errorf("EventByRef(%s) = %s %+v, %v", ev.Ref, thread, byRef, err)
		}
		if _, _, err := s.EventByRef(ctx, "other", ev.Ref); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("EventByRef(%s) in another tenant: %v, want not found", ev.Ref, err)
		}
	}
	loaded, err := s.Load(ctx, "acme", "t", 1, 0)
	if err != nil || len(loaded) != 3 {
		t.Fatalf("load: %d, %v", len(loaded), err)
	}
	for i := range loaded {
		if loaded[i].Ref != got[i].Ref {
			t.Errorf("loaded ref %d %q, appended %q", i, loaded[i].Ref, got[i].Ref)
		}
	}
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "refunds", Thread: "t"})
	if err != nil || len(hits) != 3 {
		t.Fatalf("search: %+v, %v", hits, err)
	}
	for _, h := range hits {
		if h.Ref != got[h.Seq-1].Ref {
			t.Errorf("hit at seq %d has ref %q, want %q", h.Seq, h.Ref, got[h.Seq-1].Ref)
		}
	}
	// Unique per tenant, whichever kind.
	for i, ref := range []string{got[0].Ref, made, foreign} {
		if _, err := s.Append(ctx, "acme", "t", 3, []store.Event{msg("again", ref)}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ref %d used again in the tenant: %v, want invalid", i, err)
		}
		if _, err := s.Append(ctx, fmt.Sprintf("other%d", i), "t", 0, []store.Event{msg("elsewhere", ref)}); err != nil {
			t.Errorf("ref %d in another tenant: %v", i, err)
		}
	}
}

// TestLocatorsNotGivenAgain: the locators behind made refs are never given
// twice: not after a reopen (the block reserved before is skipped), not by
// two stores open on one file at once.
func TestLocatorsNotGivenAgain(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locs.db")
	a, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]string{}
	take := func(s *Store, name string, n int) {
		for range n {
			ref := s.NewRef()
			loc, ok := s.opener.open(ref)
			if !ok {
				t.Fatalf("%s made %q, which does not open", name, ref)
			}
			if by, dup := seen[loc]; dup {
				t.Fatalf("locator %d given by %s and %s", loc, by, name)
			}
			seen[loc] = name
		}
	}
	take(a, "a", 10)
	take(b, "b", locBlock+10) // past its first block
	take(a, "a", locBlock)
	a.Close()
	b.Close()
	c, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	take(c, "c after reopening", 10)
	if len(seen) != 2*locBlock+30 {
		t.Fatalf("%d locators", len(seen))
	}
}

// TestMigrateRefs: a file at version 12 keeps its refs in the ref column;
// after migration 13 they are still found and loaded, and the messages
// appended after it get store-made refs, all unique in the tenant.
func TestMigrateRefs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v12.db")
	texts := []string{"an old message about invoices", "another old one"}
	oldFile(t, path, 12, texts, func(db *sql.DB, i int, id int64, body string) error {
		_, err := db.ExecContext(ctx, `INSERT INTO events_terms (id, terms) VALUES (?, ?)`, id, body)
		return err
	})
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old, err := s.Load(ctx, "acme", "t", 1, 0)
	if err != nil || len(old) != 2 || old[0].Ref == "" {
		t.Fatalf("old events %+v, %v", old, err)
	}
	for _, ev := range old {
		if thread, _, err := s.EventByRef(ctx, "acme", ev.Ref); err != nil || thread != "t" {
			t.Errorf("old ref %s: %s, %v", ev.Ref, thread, err)
		}
	}
	m := message.NewText(message.User, "a new message about invoices")
	got, err := s.Append(ctx, "acme", "t", 2, []store.Event{{Kind: store.KindMessage, Message: &m}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.opener.open(got[0].Ref); !ok {
		t.Errorf("the new message's ref %s is not store-made", got[0].Ref)
	}
	if _, err := s.Append(ctx, "acme", "t", 3, []store.Event{{Kind: store.KindMessage, Message: &m, Ref: old[0].Ref}}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("an old ref used again: %v, want invalid", err)
	}
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "invoices", Thread: "t"})
	if err != nil || len(hits) != 2 {
		t.Fatalf("search: %+v, %v", hits, err)
	}
	for _, h := range hits {
		want := got[0].Ref
		if h.Seq == 1 {
			want = old[0].Ref
		}
		if h.Ref != want {
			t.Errorf("hit at seq %d: ref %q, want %q", h.Seq, h.Ref, want)
		}
	}
}

// FuzzRefOpen: any text given as a ref (EventByRef's, an import's) opens
// without a panic, and what opens is exactly the seal of its locator.
func FuzzRefOpen(f *testing.F) {
	c, err := newRefCipher([]byte("0123456789abcdef"))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{c.seal(0), c.seal(12345), store.NewRef(), "m_", "", "m_" + strings.Repeat("0", 24), strings.ToUpper(c.seal(1)), "m_zz" + strings.Repeat("0", 22)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		loc, ok := c.open(ref)
		if ok && c.seal(loc) != ref {
			t.Fatalf("%q opens to %d, whose seal is %q", ref, loc, c.seal(loc))
		}
	})
}

// TestLocKeyFormat: locKey spells a locator as the ref column has always
// held it ("\x01" and 16 lowercase hex digits): a key spelled otherwise
// would not find the refs already stored.
func TestLocKeyFormat(t *testing.T) {
	for _, loc := range []uint64{0, 1, 15, 16, 255, 0xdeadbeef, 1 << 63, ^uint64(0), 0x0123456789abcdef} {
		if got, want := locKey(loc), fmt.Sprintf("\x01%016x", loc); got != want {
			t.Errorf("locKey(%#x) = %q, want %q", loc, got, want)
		}
	}
}
