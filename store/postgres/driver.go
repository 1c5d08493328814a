package postgres

import (
	"context"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/dsn"
)

// init registers the postgres and postgresql schemes: the whole URL goes
// to Open.
func init() {
	open := func(ctx context.Context, d string) (store.Store, error) {
		s, err := Open(ctx, d)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	}
	dsn.Register("postgres", open)
	dsn.Register("postgresql", open)
}
