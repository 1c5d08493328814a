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
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return dsn
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, hasPw := strings.Cut(rest[:at], ":"); hasPw {
			return scheme + "://" + user + ":xxxxx" + rest[at:]
		}
	}
	return dsn
}
