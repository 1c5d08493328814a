package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/storetest"
)

// BenchmarkTenantSearch: searches of a whole tenant of 80,000 messages (32
// threads of the package's synthetic messages, all moved into the index),
// for a rare word, an invoice id, a word of the middle of the vocabulary and
// its most frequent one, and the rare word again with one message queued
// more before each search. Each runs with the store's choice of plan (auto,
// byID) and with each plan forced beside it: walk (the tenant's messages
// in (thread, seq) order on its index, keeping the candidates) and byid
// (the candidates read by id, then sorted). b.N is the searches of each.
//
//	go test ./store/sqlite/ -run '^$' -bench TenantSearch -benchtime 100x
func BenchmarkTenantSearch(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "tenant.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	evs := storetest.Synthetic(4096)
	const threads, perThread, batch = 32, 2500, 100
	last := make([]int64, threads)
	for i := 0; i < perThread; i += batch {
		for th := range threads {
			from := (i*threads + th*batch) % (len(evs) - batch)
			if _, err := s.Append(ctx, "acme", fmt.Sprint("t", th), last[th], evs[from:from+batch]); err != nil {
				b.Fatal(err)
			}
			last[th] += batch
		}
	}
	if err := s.catchUpIndex(ctx); err != nil {
		b.Fatal(err)
	}
	defer func(r int64) { tenantWalkRatio = r }(tenantWalkRatio)
	auto := tenantWalkRatio
	for _, q := range []struct{ name, text string }{
		{"rare", storetest.Word(1900)}, {"id", "INV-0042"}, {"middle", storetest.Word(300)}, {"frequent", storetest.Word(3)}, {"rare-queued", storetest.Word(1900)},
	} {
		for _, plan := range []struct {
			name  string
			ratio int64
		}{{"auto", auto}, {"walk", 1 << 40}, {"byid", 0}} {
			b.Run(q.name+"/"+plan.name, func(b *testing.B) {
				tenantWalkRatio = plan.ratio
				lat := make([]time.Duration, 0, b.N)
				for i := 0; b.Loop(); i++ {
					if q.name == "rare-queued" {
						b.StopTimer()
						th := i % threads
						if _, err := s.Append(ctx, "acme", fmt.Sprint("t", th), last[th], evs[i%len(evs):][:1]); err != nil {
							b.Fatal(err)
						}
						last[th]++
						b.StartTimer()
					}
					start := time.Now()
					if _, err := s.Search(ctx, "acme", store.SearchQuery{Text: q.text, Limit: 10}); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(start))
				}
				b.ReportMetric(us(storetest.Percentile(lat, 50)), "p50-µs")
				b.ReportMetric(us(storetest.Percentile(lat, 99)), "p99-µs")
			})
		}
	}
}
