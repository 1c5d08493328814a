package sqlite_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/store/storetest"
)

func open(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "mneme.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

// TestReopen: what was written survives closing and reopening the file, and
// reopening does not rerun migrations.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mneme.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	m := message.NewText(message.User, "persist INV-9001")
	if _, err := s.Append(ctx, "acme", "t", 0, []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	evs, err := s.Load(ctx, "acme", "t", 0, 0)
	if err != nil || len(evs) != 1 || evs[0].Message.TextOf() != "persist INV-9001" {
		t.Fatalf("after reopen Load = %v, %v", evs, err)
	}
	hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: "INV-9001"})
	if err != nil || len(hits) != 1 {
		t.Fatalf("after reopen Search = %v, %v", hits, err)
	}
}

// TestDeleteLeavesNoBytes: after DeleteThread and DeleteMemory the deleted
// text is in neither the database file nor its WAL.
func TestDeleteLeavesNoBytes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "mneme.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	secrets := [][]byte{[]byte("SECRET-PAYLOAD-qzxvkwj-4412"), []byte("qzxvkwjplm"), []byte("memsecret-uvwqz")}
	var evs []store.Event
	for i := range 50 {
		m := message.NewText(message.User, "row "+string(rune('a'+i%26))+" SECRET-PAYLOAD-qzxvkwj-4412 and qzxvkwjplm")
		evs = append(evs, store.Event{Kind: store.KindMessage, Message: &m})
	}
	if _, err := s.Append(ctx, "acme", "doomed", 0, evs); err != nil {
		t.Fatal(err)
	}
	keep := message.NewText(message.User, "innocent bystander")
	if _, err := s.Append(ctx, "acme", "kept", 0, []store.Event{{Kind: store.KindMessage, Message: &keep}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutMemory(ctx, "acme", store.Memory{Namespace: []string{"n"}, Key: "k", Value: []byte(`{"v":"memsecret-uvwqz"}`)}); err != nil {
		t.Fatal(err)
	}
	// Closing checkpoints the WAL, so the secrets are now in the main file.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = sqlite.Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	if !filesContain(t, path, secrets) {
		t.Fatal("the secrets are not in the files even before delete: the check below would prove nothing")
	}
	if err := s.DeleteMemory(ctx, "acme", []string{"n"}, "k"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteThread(ctx, "acme", "doomed"); err != nil {
		t.Fatal(err)
	}
	if filesContain(t, path, secrets) {
		t.Error("deleted content is still in the database files")
	}
}

// filesContain reports whether any of the database's files (main, WAL)
// holds one of secrets, in any case (FTS5 stores tokens lowercased).
func filesContain(t *testing.T, path string, secrets [][]byte) bool {
	t.Helper()
	files, _ := filepath.Glob(path + "*")
	found := false
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ToLower(b)
		for _, sec := range secrets {
			if bytes.Contains(b, bytes.ToLower(sec)) {
				t.Logf("%s holds %q", filepath.Base(f), sec)
				found = true
			}
		}
	}
	return found
}
