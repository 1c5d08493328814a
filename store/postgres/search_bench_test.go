package postgres_test

import (
	"context"
	"testing"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/postgres"
	"github.com/mnemehq/mneme/store/storetest"
)

// Per-thread search p50/p95 and client CPU with 100,000 messages of other
// threads and tenants in the database, against the same thread alone:
//
//	MNEME_TEST_POSTGRES=postgres://... go test -run '^$' -bench ScopedSearch -benchtime 1000x ./store/postgres/
func BenchmarkScopedSearch(b *testing.B) {
	storetest.BenchmarkScopedSearch(b, storetest.ScopedSearchBackend{
		Open: func(b *testing.B) store.Store { return open(b) },
		// What autovacuum does after a bulk write, so that the planner
		// sees the tables as they are.
		Settle: func(b *testing.B, s store.Store) {
			if _, err := s.(*postgres.Store).Pool().Exec(context.Background(), `VACUUM ANALYZE events, threads`); err != nil {
				b.Fatal(err)
			}
		},
		Size: func(b *testing.B, s store.Store) int64 {
			var n int64
			err := s.(*postgres.Store).Pool().QueryRow(context.Background(), `SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint
				FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
				WHERE ns.nspname = current_schema() AND c.relkind = 'r'`).Scan(&n)
			if err != nil {
				b.Fatal(err)
			}
			return n
		},
	})
}
