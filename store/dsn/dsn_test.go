package dsn_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/store/postgres/pgtest"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/dsn"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/postgres"
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
		{dsn: "postgres://u:hunter2@127.0.0.1:notaport/db", err: store.ErrInvalid},
		{dsn: "mysql://u:hunter2@h/db", err: dsn.ErrUnsupported},
		{dsn: "", err: dsn.ErrUnsupported},
		{dsn: "whatever", err: dsn.ErrUnsupported},
	}
	for _, c := range cases {
		s, err := dsn.Open(ctx, c.dsn)
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
		case *inmem.Store:
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
}

// TestOpenPostgresUnreachable: a postgres DSN opens store/postgres, so a
// server that is not there is a connection error (not dsn.ErrUnsupported), and
// the error names the server but not the password.
func TestOpenPostgresUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, d := range []string{
		"postgres://u:hunter2@127.0.0.1:1/db?sslmode=disable",
		"postgresql://u:hunter2@127.0.0.1:1/db?sslmode=disable&connect_timeout=5",
	} {
		s, err := dsn.Open(ctx, d)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) connected to port 1", d)
			continue
		}
		if errors.Is(err, dsn.ErrUnsupported) || errors.Is(err, store.ErrInvalid) {
			t.Errorf("Open(%q) err = %v, want a connection error", d, err)
		}
		msg := err.Error()
		if strings.Contains(msg, "hunter2") {
			t.Errorf("Open(%q) error leaks the password: %v", d, err)
		}
		if !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, "connect") {
			t.Errorf("Open(%q) error does not say which server failed: %v", d, err)
		}
	}
}

// TestOpenPostgres: with MNEME_TEST_POSTGRES set (always under CI), Open on
// it returns a working *postgres.Store, in a schema of the test's own; a
// wrong password is an error that does not contain it.
func TestOpenPostgres(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(pgtest.DSN(t, "mneme_dsn"))
	if err != nil {
		t.Fatalf("MNEME_TEST_POSTGRES does not parse: %v", err)
	}

	s, err := dsn.Open(ctx, u.String())
	if err != nil {
		t.Fatalf("dsn.Open(MNEME_TEST_POSTGRES): %v", err)
	}
	defer s.Close()
	if _, ok := s.(*postgres.Store); !ok {
		t.Errorf("Open(MNEME_TEST_POSTGRES) = %T, want *postgres.Store", s)
	}
	m := message.NewText(message.User, "hello from dsn")
	evs, err := s.Append(ctx, "acme", "t", 0, []store.Event{{Kind: store.KindMessage, Message: &m}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, "acme", "t", 0, 0)
	if err != nil || len(got) != 1 || got[0].Ref != evs[0].Ref || got[0].Message == nil || got[0].Message.PlainText() != "hello from dsn" {
		t.Errorf("Load after Append = %+v, %v", got, err)
	}

	if u.User == nil {
		t.Fatal("MNEME_TEST_POSTGRES has no user: cannot check a wrong password")
	}
	const wrong = "wrong-pw-hunter2"
	u.User = url.UserPassword(u.User.Username(), wrong)
	if s, err := dsn.Open(ctx, u.String()); err == nil {
		s.Close()
		t.Errorf("Open with password %q succeeded: the server does not check passwords, nothing was tested", wrong)
	} else if strings.Contains(err.Error(), wrong) {
		t.Errorf("wrong-password error leaks the password: %v", err)
	}
}

// No form of DSN puts its password into an error.
func TestErrorsNeverShowPasswords(t *testing.T) {
	ctx := context.Background()
	for _, d := range []string{
		"postgres://u:hunter2@127.0.0.1:1/db",
		"postgres://u@127.0.0.1:1/db?password=hunter2",
		"postgresql://u@127.0.0.1:1/db?sslmode=disable&PASSWORD=hunter2",
		"host=127.0.0.1 port=1 password=hunter2",
		"mysql://u:hunter2@h/db",
	} {
		_, err := dsn.Open(ctx, d)
		if err == nil {
			t.Fatalf("%s: opened", d)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error shows the password: %v", d, err)
		}
	}
}
