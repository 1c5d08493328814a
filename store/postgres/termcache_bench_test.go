package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/postgres/pgtest"
	"github.com/mnemehq/mneme/store/storetest"
)

// BenchmarkThreadSearchCold: what the term cache costs a thread's first
// search on a replica (cold: the entry is dropped before each search,
// which then reads and caches every message), against a search without
// the cache (uncached) and a search of a cached thread that gained two
// messages since (grown: auto-recall's case), in a 500-message thread:
//
//	MNEME_TEST_POSTGRES=postgres://... go test -run '^$' -bench ThreadSearchCold ./store/postgres/
func BenchmarkThreadSearchCold(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.DSN(b, "mneme_t"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	words := []string{"payment", "gateway", "timeout", "refund", "invoice", "customer", "deploy", "rollback", "the", "a", "of"}
	text := func(i int) string {
		var w string
		for j := range 20 + i%20 {
			w += words[(i*7+j*j)%len(words)] + " "
		}
		return w
	}
	var evs []store.Event
	for i := range 500 {
		m := message.NewText(message.User, text(i))
		evs = append(evs, store.Event{Kind: store.KindMessage, Message: &m, Tokens: 30})
	}
	if _, err := s.Append(ctx, "acme", "t", 0, evs); err != nil {
		b.Fatal(err)
	}
	q := store.SearchQuery{Text: "refund invoice customer", Thread: "t"}
	last := int64(500)
	for _, mode := range []string{"uncached", "cold", "warm", "grown"} {
		b.Run(mode, func(b *testing.B) {
			s.searchPath = bySize
			if mode == "uncached" {
				s.searchPath = readThread
			}
			cpu0 := storetest.CPUTime()
			var searching time.Duration
			for b.Loop() {
				switch mode {
				case "cold":
					s.terms.drop(termKey{"acme", "t"})
				case "grown":
					b.StopTimer()
					if last >= scanMessages-2 { // the thread stays small: written again
						if err := s.DeleteThread(ctx, "acme", "t"); err != nil {
							b.Fatal(err)
						}
						if _, err := s.Append(ctx, "acme", "t", 0, evs); err != nil {
							b.Fatal(err)
						}
						last = 500
						if _, err := s.Search(ctx, "acme", q); err != nil {
							b.Fatal(err)
						}
					}
					m1, m2 := message.NewText(message.User, text(int(last))), message.NewText(message.Assistant, text(int(last)+1))
					if _, err := s.Append(ctx, "acme", "t", last, []store.Event{{Kind: store.KindMessage, Message: &m1}, {Kind: store.KindMessage, Message: &m2}}); err != nil {
						b.Fatal(err)
					}
					last += 2
					b.StartTimer()
				}
				t0 := time.Now()
				if hits, err := s.Search(ctx, "acme", q); err != nil || len(hits) == 0 {
					b.Fatalf("%d hits, %v", len(hits), err)
				}
				searching += time.Since(t0)
			}
			// The searches alone (grown's appends are not timed, but b.Loop
			// may count them).
			b.ReportMetric(float64(searching.Microseconds())/float64(b.N)/1000, "search-ms/op")
			if mode != "grown" {
				b.ReportMetric(float64((storetest.CPUTime()-cpu0).Microseconds())/float64(b.N)/1000, "cpu-ms/op")
			}
		})
	}
}
