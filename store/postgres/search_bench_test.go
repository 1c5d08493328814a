package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/postgres"
	"github.com/mnemehq/mneme/store/storetest"
)

// Per-thread search p50/p95, client CPU and (the server on this machine)
// the server's, with 100,000 messages of other threads and tenants in the
// database, against the same thread alone:
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
		ServerCPU: func(b *testing.B, s store.Store) (func() time.Duration, bool) {
			cpu0, local := serverCPU(b, s)
			return func() time.Duration {
				cpu1, _ := serverCPU(b, s)
				var d time.Duration
				for pid, t := range cpu1 {
					d += t - cpu0[pid] // a backend born during the run counts from 0
				}
				return d
			}, local
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
