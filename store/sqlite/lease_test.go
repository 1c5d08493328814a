package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/sqlite"
)

// TestLease: two processes' worth of stores on one file: one holder at a
// time, renewal, takeover after expiry, release.
func TestLease(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mneme.db")
	a, b := open2(t, path), open2(t, path)
	const ttl, short = time.Minute, 200 * time.Millisecond
	try := func(s *sqlite.Store, owner string, ttl time.Duration) bool {
		t.Helper()
		ok, err := s.TryLease(ctx, "acme", "t", "compact", owner, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !try(a, "A", ttl) || try(b, "B", ttl) || !try(a, "A", short) {
		t.Fatal("want A to take and renew, B refused")
	}
	time.Sleep(short + 100*time.Millisecond)
	if !try(b, "B", ttl) || try(a, "A", ttl) {
		t.Fatal("want B to take over A's expired lease, A refused")
	}
	if err := a.ReleaseLease(ctx, "acme", "t", "compact", "A"); err != nil {
		t.Fatal(err)
	}
	if try(a, "A", ttl) {
		t.Fatal("a release by a non-holder freed the lease")
	}
	if err := b.ReleaseLease(ctx, "acme", "t", "compact", "B"); err != nil {
		t.Fatal(err)
	}
	if !try(a, "A", ttl) {
		t.Fatal("a released lease was not free")
	}
	if _, err := a.TryLease(ctx, "acme", "t", "compact", "A", 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ttl 0: %v", err)
	}
}

func TestTenants(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	m := message.NewText(message.User, "x")
	for _, tenant := range []string{"b", "a", "b"} {
		if _, err := s.Append(ctx, tenant, "t-"+tenant+time.Now().String(), 0, []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.PutMemory(ctx, "c", store.Memory{Namespace: []string{"n"}, Key: "k", Value: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Tenants(ctx)
	if err != nil || !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Tenants = %v, %v", got, err)
	}
}

func open2(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
