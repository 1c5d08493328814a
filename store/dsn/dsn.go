// Package dsn opens a store.Store from a data source name, the one string
// the CLI flags, the config file and the library's Open take:
//
//	memory:            an empty in-process store (store/memory)
//	sqlite:PATH        an SQLite file (store/sqlite), created if missing
//	PATH.db            the same, for a bare path ending in .db
//	postgres://...     PostgreSQL (store/postgres); postgresql:// too
//
// It imports the backends and nothing above the store layer.
package dsn

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/memory"
	"github.com/mnemehq/mneme/store/postgres"
	"github.com/mnemehq/mneme/store/sqlite"
)

// ErrUnsupported: the DSN names a backend this build does not have.
var ErrUnsupported = errors.New("store: unsupported data source")

// Open opens the store the DSN names.
func Open(ctx context.Context, dsn string) (store.Store, error) {
	switch {
	case dsn == "memory:" || dsn == "memory":
		return memory.New(), nil
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
		if path == "" {
			return nil, fmt.Errorf("%w: %q has no path", store.ErrInvalid, dsn)
		}
		return sqlite.Open(ctx, path)
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		s, err := postgres.Open(ctx, dsn)
		if err != nil {
			return nil, fmt.Errorf("store %s: %w", redact(dsn), err)
		}
		return s, nil
	case strings.HasSuffix(dsn, ".db") && !strings.Contains(dsn, "://"):
		return sqlite.Open(ctx, dsn)
	}
	return nil, fmt.Errorf("%w: %q (want memory:, sqlite:PATH, PATH.db or postgres://...)", ErrUnsupported, redact(dsn))
}

// redact hides a password in a URL-shaped DSN before it reaches an error
// message.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" || u.Opaque != "" && strings.Contains(dsn, "=") {
		// Not a URL (a keyword DSN such as "host=h password=p"): echo
		// nothing of it.
		if strings.Contains(dsn, "=") || strings.Contains(dsn, "@") {
			return "(a DSN of an unknown form)"
		}
		return dsn
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	for k := range q {
		if strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword") {
			q.Set(k, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}
