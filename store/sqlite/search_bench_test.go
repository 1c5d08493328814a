package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/store/storetest"
)

// Per-thread search p50/p95 and CPU with 100,000 messages of other threads
// and tenants in the file, against the same thread alone:
//
//	go test -run '^$' -bench ScopedSearch -benchtime 1000x ./store/sqlite/
func BenchmarkScopedSearch(b *testing.B) {
	var path string // the file of the store last opened
	storetest.BenchmarkScopedSearch(b, storetest.ScopedSearchBackend{
		Open: func(b *testing.B) store.Store {
			path = filepath.Join(b.TempDir(), "bench.db")
			s, err := sqlite.Open(context.Background(), path)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
		Size: func(b *testing.B, _ store.Store) int64 {
			var n int64
			for _, suffix := range []string{"", "-wal"} {
				if fi, err := os.Stat(path + suffix); err == nil {
					n += fi.Size()
				}
			}
			return n
		},
	})
}
