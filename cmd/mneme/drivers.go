package main

// The CLI opens every kind of store a DSN can name (memory:, sqlite:PATH,
// PATH.db, postgres://...): it links every backend, which registers its
// scheme with store/dsn. The library itself links none.
import (
	_ "github.com/mnemehq/mneme/store/inmem"
	_ "github.com/mnemehq/mneme/store/postgres"
	_ "github.com/mnemehq/mneme/store/sqlite"
)
