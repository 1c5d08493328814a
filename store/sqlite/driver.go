package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/dsn"
)

// init registers the sqlite scheme: "sqlite:PATH" (or "sqlite://PATH"),
// and a bare PATH ending in .db, open the file at PATH.
func init() {
	dsn.Register("sqlite", func(ctx context.Context, d string) (store.Store, error) {
		path := d
		if strings.HasPrefix(d, "sqlite:") {
			path = strings.TrimPrefix(strings.TrimPrefix(d, "sqlite:"), "//")
		}
		if path == "" {
			return nil, fmt.Errorf("%w: %q has no path", store.ErrInvalid, d)
		}
		s, err := Open(ctx, path)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	})
}
