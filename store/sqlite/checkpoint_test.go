package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackgroundCheckpoint: commits reach the database file by the
// background checkpoints, long before the WAL holds walBackstop pages (the
// writer's own checkpoint), and what they copied reads back after a
// reopen.
func TestBackgroundCheckpoint(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ck.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s.ckRun.Wait()
	size := func() int64 {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	// 3 × checkpointEvery commits of 8 KB messages: about 300 WAL pages,
	// far below walBackstop.
	text := strings.Repeat("checkpointed words ", 420)
	for i := range 3 * checkpointEvery {
		if _, err := s.Append(ctx, "acme", "t", int64(i), msgEvent(text)); err != nil {
			t.Fatal(err)
		}
	}
	s.ckRun.Wait()
	if grew := size() - before; grew < checkpointEvery*8000 {
		t.Fatalf("the database file grew by %d bytes after %d commits of 8 KB: the background checkpoints copied too little", grew, 3*checkpointEvery)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := s.Load(ctx, "acme", "t", 0, 0)
	if err != nil || len(evs) != 3*checkpointEvery {
		t.Fatalf("after reopening: %d events, %v", len(evs), err)
	}
}
