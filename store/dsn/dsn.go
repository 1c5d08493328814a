// Package dsn opens a store.Store from a data source name, the one string
// the CLI flags, the config file and the library's Open take. Backends
// register a scheme from their init function, the way database/sql drivers
// do, so a program links only the backends it imports:
//
//	import _ "github.com/mnemehq/mneme/store/sqlite"   // sqlite:PATH, PATH.db
//	import _ "github.com/mnemehq/mneme/store/postgres" // postgres://..., postgresql://...
//	import _ "github.com/mnemehq/mneme/store/inmem"    // memory:
//
// It imports no backend and nothing above the store layer.
package dsn

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/mnemehq/mneme/store"
)

// ErrUnsupported: the DSN names a backend this build does not have.
var ErrUnsupported = errors.New("store: unsupported data source")

// Opener opens a store from a whole DSN, its scheme included.
type Opener func(ctx context.Context, dsn string) (store.Store, error)

var (
	mu      sync.RWMutex
	openers = map[string]Opener{}
)

// Register makes a backend available under scheme (the DSN's text before
// the first colon). Backends call it from init; registering a scheme twice
// or a nil Opener is a programming error and panics, as sql.Register does.
func Register(scheme string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	if open == nil {
		panic("dsn: Register opener is nil")
	}
	if _, dup := openers[scheme]; dup {
		panic("dsn: Register called twice for scheme " + scheme)
	}
	openers[scheme] = open
}

// Schemes returns the registered schemes, sorted.
func Schemes() []string {
	mu.RLock()
	defer mu.RUnlock()
	s := make([]string, 0, len(openers))
	for k := range openers {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Scheme returns the scheme a DSN names: the text before its first colon
// ("memory" for a bare "memory" too), or "sqlite" for a bare path ending in
// .db. It returns "" when the DSN names none.
func Scheme(dsn string) string {
	if dsn == "memory" {
		return "memory"
	}
	if i := strings.IndexByte(dsn, ':'); i > 1 && validScheme(dsn[:i]) {
		return strings.ToLower(dsn[:i])
	}
	// A one-letter "scheme" is a Windows drive (C:\...), not a backend.
	if strings.HasSuffix(dsn, ".db") && !strings.Contains(dsn, "://") {
		return "sqlite"
	}
	return ""
}

// validScheme: RFC 3986's scheme syntax, so a path with a colon in it
// (./a:b.db) is not mistaken for one.
func validScheme(s string) bool {
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}

// drivers maps the schemes of the backends in this module to the package
// that registers them, for the error that tells a caller what to import.
var drivers = map[string]string{
	"memory":     "github.com/mnemehq/mneme/store/inmem",
	"sqlite":     "github.com/mnemehq/mneme/store/sqlite",
	"postgres":   "github.com/mnemehq/mneme/store/postgres",
	"postgresql": "github.com/mnemehq/mneme/store/postgres",
}

// Open opens the store the DSN names, through the backend registered for
// its scheme.
func Open(ctx context.Context, dsn string) (store.Store, error) {
	scheme := Scheme(dsn)
	mu.RLock()
	open := openers[scheme]
	mu.RUnlock()
	if open == nil {
		if pkg, ok := drivers[scheme]; ok {
			return nil, fmt.Errorf("%w: %q: no %s backend in this program (import _ %q)", ErrUnsupported, redact(dsn), scheme, pkg)
		}
		return nil, fmt.Errorf("%w: %q (want memory:, sqlite:PATH, PATH.db or postgres://...)", ErrUnsupported, redact(dsn))
	}
	s, err := open(ctx, dsn)
	if err != nil {
		if strings.Contains(dsn, "://") {
			// Name the server that failed, its password hidden.
			return nil, fmt.Errorf("store %s: %w", redact(dsn), err)
		}
		return nil, err
	}
	return s, nil
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
