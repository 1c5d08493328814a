package dsn

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/memory"
	"github.com/mnemehq/mneme/store/sqlite"
)

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cases := []struct {
		dsn     string
		want    string // "memory", "sqlite" or "" for an error
		err     error
		created string // file that must exist afterwards
	}{
		{dsn: "memory:", want: "memory"},
		{dsn: "sqlite:" + filepath.Join(dir, "a.db"), want: "sqlite", created: "a.db"},
		{dsn: "sqlite:" + filepath.Join(dir, "b.sqlite3"), want: "sqlite", created: "b.sqlite3"},
		{dsn: filepath.Join(dir, "c.db"), want: "sqlite", created: "c.db"},
		{dsn: "sqlite:", err: store.ErrInvalid},
		{dsn: "postgres://u:hunter2@localhost/db", err: ErrUnsupported},
		{dsn: "postgresql://localhost/db", err: ErrUnsupported},
		{dsn: "mysql://u:hunter2@h/db", err: ErrUnsupported},
		{dsn: "", err: ErrUnsupported},
		{dsn: "whatever", err: ErrUnsupported},
	}
	for _, c := range cases {
		s, err := Open(ctx, c.dsn)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("Open(%q) err = %v, want %v", c.dsn, err, c.err)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Open(%q) error leaks the password: %v", c.dsn, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q): %v", c.dsn, err)
			continue
		}
		var got string
		switch s.(type) {
		case *memory.Store:
			got = "memory"
		case *sqlite.Store:
			got = "sqlite"
		}
		if got != c.want {
			t.Errorf("Open(%q) = %T, want %s", c.dsn, s, c.want)
		}
		if c.created != "" {
			if _, err := os.Stat(filepath.Join(dir, c.created)); err != nil {
				t.Errorf("Open(%q) created no file: %v", c.dsn, err)
			}
		}
		s.Close()
	}
	_, err := Open(ctx, "postgres://x")
	if err == nil || !strings.Contains(err.Error(), "postgres backend not built yet") {
		t.Errorf("postgres error = %v", err)
	}
}
