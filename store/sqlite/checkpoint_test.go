package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// TestWALBounded: under appends that never pause (four writers), the WAL
// stops growing near walBackstop pages (400 here): the background checkpoints alone
// never leave a moment at which SQLite may start the WAL over, and the
// writer's own checkpoint must.
func TestWALBounded(t *testing.T) {
	ctx := context.Background()
	defer func(v int) { walBackstop = v }(walBackstop)
	walBackstop = 400
	path := filepath.Join(t.TempDir(), "wal.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// 60 messages of 64 KB (text and index terms): about 2,100 WAL pages
	// in all, five times walBackstop.
	text := strings.Repeat("bounded write-ahead log ", 2800)
	const writers, each = 4, 15
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := s.Append(ctx, "acme", fmt.Sprint("t", w), int64(i), msgEvent(text)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	// The WAL file keeps the largest size it reached: walBackstop pages,
	// and the commits made while the writer's own checkpoint found the
	// background's under way (it does not wait), and SQLite started the WAL
	// over once one had copied every page. Unbounded, it would hold them
	// all.
	if limit := int64(2*walBackstop) * (4096 + 24); fi.Size() > limit {
		t.Fatalf("the WAL grew to %d bytes (%d pages), over %d", fi.Size(), fi.Size()/(4096+24), limit)
	}
}
