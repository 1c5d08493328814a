package postgres_test

import (
	"testing"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/storetest"
)

// Per-thread search p95 with 100,000 messages of other threads and
// tenants in the database, against the same thread alone.
func BenchmarkScopedSearch(b *testing.B) {
	storetest.BenchmarkScopedSearch(b, func(b *testing.B) store.Store { return open(b) })
}
