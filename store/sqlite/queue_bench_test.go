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

// BenchmarkSearchBesideWrites: a search of a large thread (through the
// archive index) after each of its own appends, while other threads append
// (busy: 16 messages between two searches) or do not (quiet, the
// baseline beside it); the same for a search of the whole tenant
// (tenant/...). A thread's search reads the thread's own queued messages
// beside the index, so that other threads' writes do not make it move the
// queue first (as it did when it counted every thread's queued messages:
// then one search in four moved the queue, and the busy p99 was four
// times the quiet one); a tenant's reads the whole queue beside it (it
// moved the queue first: at every search here). b.N is the number of
// searches.
//
//	go test ./store/sqlite/ -run '^$' -bench SearchBesideWrites -benchtime 500x
func BenchmarkSearchBesideWrites(b *testing.B) {
	for _, scope := range []string{"thread", "tenant"} {
		var quiet [2]float64 // the quiet run's p50 and p99
		for _, others := range []int{0, 16} {
			name := scope + "/quiet"
			if others > 0 {
				name = scope + "/busy"
			}
			b.Run(name, func(b *testing.B) {
				searchBesideWrites(b, scope, others, &quiet)
			})
		}
	}
}

// searchBesideWrites is one run of BenchmarkSearchBesideWrites.
func searchBesideWrites(b *testing.B, scope string, others int, quiet *[2]float64) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "busy.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.searchPath = useIndex
	evs := storetest.Synthetic(4096)
	last := map[string]int64{}
	add := func(thread string, n int) {
		from := int(last[thread]) % (len(evs) - n)
		if _, err := s.Append(ctx, "acme", thread, last[thread], evs[from:from+n]); err != nil {
			b.Fatal(err)
		}
		last[thread] += int64(n)
	}
	for range 30 {
		add("big", 100)
	}
	if err := s.catchUpIndex(ctx); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		add("big", 1)
		for j := range others {
			add(fmt.Sprint("other", (i*others+j)%32), 1)
		}
		b.StartTimer()
		start := time.Now()
		q := store.SearchQuery{Text: storetest.Word(1280), Thread: "big", Limit: 10}
		if scope == "tenant" {
			q.Thread = ""
		}
		if _, err := s.Search(ctx, "acme", q); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	p50, p99 := us(storetest.Percentile(lat, 50)), us(storetest.Percentile(lat, 99))
	b.ReportMetric(p50, "p50-µs")
	b.ReportMetric(p99, "p99-µs")
	if others == 0 {
		*quiet = [2]float64{p50, p99}
	} else if quiet[0] > 0 {
		b.ReportMetric(p50/quiet[0], "busy/quiet-p50")
		b.ReportMetric(p99/quiet[1], "busy/quiet-p99")
	}
}

func us(d time.Duration) float64 { return float64(d.Microseconds()) }
