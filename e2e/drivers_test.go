package e2e

// The tests open stores by DSN (memory:, sqlite:PATH, postgres://...):
// link the backends that register those schemes.
import (
	_ "github.com/mnemehq/mneme/store/inmem"
	_ "github.com/mnemehq/mneme/store/postgres"
	_ "github.com/mnemehq/mneme/store/sqlite"
)
