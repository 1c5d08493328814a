package sqlite_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/sqlite"
)

// synthetic returns n deterministic messages of 30 to 80 words drawn from a
// 2,000-word vocabulary, one in ten mentioning an invoice id.
func synthetic(n int) []store.Event {
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := make([]string, 2000)
	for i := range vocab {
		vocab[i] = word(i)
	}
	evs := make([]store.Event, n)
	for i := range evs {
		var b strings.Builder
		for range 30 + rng.IntN(50) {
			// Zipf-ish: low ranks are frequent.
			b.WriteString(vocab[int(float64(len(vocab))*rng.Float64()*rng.Float64())])
			b.WriteByte(' ')
		}
		if i%10 == 0 {
			fmt.Fprintf(&b, "invoice INV-%04d", i/10)
		}
		role := message.User
		if i%2 == 1 {
			role = message.Assistant
		}
		m := message.NewText(role, b.String())
		evs[i] = store.Event{Kind: store.KindMessage, Message: &m, Tokens: 60}
	}
	return evs
}

// word is the vocabulary's i-th word: letters only, so a plain word and
// not an identifier.
func word(i int) string {
	w := []byte("w")
	for ; i > 0; i /= 26 {
		w = append(w, byte('a'+i%26))
	}
	return string(w) + "o"
}

func benchOpen(b *testing.B) *sqlite.Store {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkAppend: one message per Append (one durable transaction each).
func BenchmarkAppend(b *testing.B) {
	s := benchOpen(b)
	ctx := context.Background()
	evs := synthetic(1000)
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Append(ctx, "acme", "bench", int64(i), evs[i%len(evs):i%len(evs)+1]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkAppendBatch: 100 messages per Append.
func BenchmarkAppendBatch(b *testing.B) {
	s := benchOpen(b)
	ctx := context.Background()
	evs := synthetic(100)
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Append(ctx, "acme", "bench", int64(i*100), evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkSearch: queries over a 10,000-message archive in 10 threads,
// cycling through a frequent word, two rare words, an identifier and a
// thread-filtered query.
func BenchmarkSearch(b *testing.B) {
	s := benchOpen(b)
	ctx := context.Background()
	evs := synthetic(10000)
	for th := range 10 {
		if _, err := s.Append(ctx, "acme", fmt.Sprintf("t%d", th), 0, evs[th*1000:(th+1)*1000]); err != nil {
			b.Fatal(err)
		}
	}
	queries := []struct {
		name string
		q    store.SearchQuery
	}{
		{"frequent", store.SearchQuery{Text: word(0)}},
		{"rare", store.SearchQuery{Text: word(1801) + " " + word(1302)}},
		{"identifier", store.SearchQuery{Text: "INV-0042"}},
		{"identifier+word", store.SearchQuery{Text: "invoice INV-0777"}},
		{"filtered", store.SearchQuery{Text: word(5), Thread: "t3", Role: message.Assistant}},
	}
	for _, c := range queries {
		b.Run(c.name, func(b *testing.B) {
			hits, err := s.Search(ctx, "acme", c.q)
			if err != nil {
				b.Fatal(err)
			}
			if len(hits) == 0 {
				b.Fatalf("query %q finds nothing: the benchmark would measure nothing", c.q.Text)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := s.Search(ctx, "acme", c.q); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/op")
		})
	}
}

// BenchmarkLoadShort: a Load of a thread's last two events, as the engine
// reads what follows its snapshot at every request: the statement's cost,
// more than the rows'.
func BenchmarkLoadShort(b *testing.B) {
	s := benchOpen(b)
	ctx := context.Background()
	evs := synthetic(1000)
	if _, err := s.Append(ctx, "acme", "bench", 0, evs); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if got, err := s.Load(ctx, "acme", "bench", 999, 0); err != nil || len(got) != 2 {
			b.Fatalf("Load = %d events, %v", len(got), err)
		}
	}
}

// BenchmarkOpen: opening an existing file at this build's schema version,
// the first step of a cold start.
func BenchmarkOpen(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "bench.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	s.Close()
	for b.Loop() {
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}
