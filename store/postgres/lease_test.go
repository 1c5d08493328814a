package postgres_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mnemehq/mneme/store"
)

// TestLease: one holder at a time; renewal by the holder; takeover once
// the holder stops renewing (a dead replica); release frees it at once.
func TestLease(t *testing.T) {
	s := open(t)
	try := func(owner string, ttl time.Duration) bool {
		t.Helper()
		ok, err := s.TryLease(ctx, "acme", "t", "compact", owner, ttl)
		if err != nil {
			t.Fatalf("TryLease(%s): %v", owner, err)
		}
		return ok
	}
	// Long ttls where a check must not depend on timing; the dying
	// holder's last renewal is short.
	const ttl, short = time.Minute, 200 * time.Millisecond
	if !try("replica-a", ttl) {
		t.Fatal("a free lease was not granted")
	}
	if try("replica-b", ttl) {
		t.Fatal("a held lease was granted to another owner")
	}
	// Another name or thread or tenant is another lease.
	for _, k := range [][3]string{{"acme", "t", "buffer"}, {"acme", "u", "compact"}, {"other", "t", "compact"}} {
		if ok, err := s.TryLease(ctx, k[0], k[1], k[2], "replica-b", ttl); err != nil || !ok {
			t.Errorf("lease %v: %v, %v", k, ok, err)
		}
	}
	if !try("replica-a", short) {
		t.Fatal("the holder could not renew")
	}
	// replica-a dies: it stops renewing. Its lease passes on once expired.
	time.Sleep(short + 100*time.Millisecond)
	if !try("replica-b", ttl) {
		t.Fatal("an expired lease was not taken over")
	}
	if try("replica-a", ttl) {
		t.Fatal("the old holder got the lease back while the new one holds it")
	}
	// Releasing a lease one does not hold changes nothing.
	if err := s.ReleaseLease(ctx, "acme", "t", "compact", "replica-a"); err != nil {
		t.Fatal(err)
	}
	if try("replica-c", ttl) {
		t.Fatal("a release by a non-holder freed the lease")
	}
	if err := s.ReleaseLease(ctx, "acme", "t", "compact", "replica-b"); err != nil {
		t.Fatal(err)
	}
	if !try("replica-c", time.Hour) {
		t.Fatal("a released lease was not free")
	}

	for _, c := range []struct {
		tenant, thread, name, owner string
		ttl                         time.Duration
	}{
		{"", "t", "n", "o", ttl}, {"a", "", "n", "o", ttl}, {"a", "t", "", "o", ttl}, {"a", "t", "n", "", ttl}, {"a", "t", "n", "o", 0}, {"a", "t", "n", "o", -time.Second},
	} {
		if _, err := s.TryLease(ctx, c.tenant, c.thread, c.name, c.owner, c.ttl); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("TryLease(%q, %q, %q, %q, %v) err = %v, want ErrInvalid", c.tenant, c.thread, c.name, c.owner, c.ttl, err)
		}
	}
}

// TestLeaseRace: many replicas racing for one free lease: exactly one wins,
// in every round; from the second round on they race to take over an
// expired one (expired by the test, so that no round depends on timing).
func TestLeaseRace(t *testing.T) {
	s := open(t)
	for round := range 5 {
		if round > 0 {
			if _, err := s.Pool().Exec(ctx, `UPDATE leases SET expires = clock_timestamp() - interval '1 second'`); err != nil {
				t.Fatal(err)
			}
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for r := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := s.TryLease(ctx, "acme", "t", "compact", fmt.Sprintf("r%d-%d", round, r), time.Minute)
				if err != nil {
					t.Error(err)
				}
				if ok {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d owners got the lease", round, n)
		}
	}
}
