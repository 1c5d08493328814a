package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

func msgEvent(text string) []store.Event {
	m := message.NewText(message.User, text)
	return []store.Event{{Kind: store.KindMessage, Message: &m}}
}

// A database file removed or replaced while the store is open is noticed:
// the health check fails and writes answer store.ErrUnavailable instead of
// succeeding into a file that the next open will not see.
func TestFileGoneOrReplaced(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault func(t *testing.T, path string)
	}{
		{"removed", func(t *testing.T, path string) {
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
			}
		}},
		{"replaced", func(t *testing.T, path string) {
			other := filepath.Join(filepath.Dir(path), "other.db")
			if err := os.WriteFile(other, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "m.db")
			s, err := Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Append(ctx, "default", "t", 0, msgEvent("before")); err != nil {
				t.Fatal(err)
			}
			if err := s.Health(ctx); err != nil {
				t.Fatalf("health before the fault: %v", err)
			}
			c.fault(t, path)
			if err := s.Health(ctx); !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("health after the fault: %v, want ErrUnavailable", err)
			}
			if _, err := s.Append(ctx, "default", "t", 1, msgEvent("after")); !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("append after the fault: %v, want ErrUnavailable", err)
			}
		})
	}
}

// A full disk is a transient fault (store.ErrUnavailable), not an internal
// error. SQLite's max_page_count gives the same SQLITE_FULL a full disk does.
func TestDiskFullIsUnavailable(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var pages int
	if err := s.w.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA max_page_count = "+strconv.Itoa(pages)); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 64<<10)
	for i := range big {
		big[i] = 'a' + byte(i%26)
	}
	_, err = s.Append(ctx, "default", "t", 0, msgEvent(string(big)))
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("append on a full database: %v, want ErrUnavailable", err)
	}
	// Once there is room again, the writer takes appends: the failed one
	// left no transaction open and nothing of itself in the log.
	if _, err := s.w.ExecContext(ctx, "PRAGMA max_page_count = 1000000"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "default", "t", 0, msgEvent("after")); err != nil {
		t.Fatalf("append once there is room: %v", err)
	}
	evs, err := s.Load(ctx, "default", "t", 0, 0)
	if err != nil || len(evs) != 1 || evs[0].Message.PlainText() != "after" {
		t.Fatalf("log after the failed append = %d events, %v; want the one appended after", len(evs), err)
	}
}

// A database file that is not writable when opened (mode 0444: SQLite
// opens it read-only without a word) fails the health check, and writes
// answer store.ErrUnavailable. Root writes through a file's mode, so as
// root the e2e test TestFaultReadOnlyFile runs the server as nobody.
func TestReadOnlyFileFailsHealth(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes through a file's mode: covered by e2e TestFaultReadOnlyFile (server run as nobody)")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "default", "t", 0, msgEvent("before")); err != nil {
		t.Fatal(err)
	}
	if err := s.Health(ctx); err != nil {
		t.Fatalf("health of a writable file: %v", err)
	}
	s.Close()
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, path)
	if err != nil {
		t.Logf("open of a read-only file refused: %v", err)
		return
	}
	defer s.Close()
	if err := s.Health(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("health of a read-only file: %v, want ErrUnavailable", err)
	}
	if _, err := s.Append(ctx, "default", "t", 1, msgEvent("after")); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("append to a read-only file: %v, want ErrUnavailable", err)
	}
}
