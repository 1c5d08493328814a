package inmem

import (
	"context"
	"fmt"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/dsn"
)

// init registers the memory scheme: "memory:" is a new, empty store.
func init() {
	dsn.Register("memory", func(_ context.Context, d string) (store.Store, error) {
		if d != "memory:" && d != "memory" {
			return nil, fmt.Errorf("%w: %q (the memory store takes no parameters: memory:)", store.ErrInvalid, d)
		}
		return New(), nil
	})
}
