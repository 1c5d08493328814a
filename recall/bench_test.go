package recall_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/sqlite"
)

// BenchmarkSearch100k builds a 100,000-message archive in a SQLite file
// (batched appends over 20 threads), checks that a planted identifier is
// the top hit, then times a mix of identifier, near-miss and word queries
// and reports p50 and p95 latency:
//
//	go test ./recall -run '^$' -bench Search100k -benchtime 300x
func BenchmarkSearch100k(b *testing.B) {
	ctx := context.Background()
	s, planted, vocab := archive100k(b)
	r := &recall.Recall{Store: s}
	hits, err := r.Search(ctx, "acme", store.SearchQuery{Text: "trace_id=checkout-failure-2026-03-15", Limit: 5})
	if err != nil || len(hits) == 0 || hits[0].Ref != planted {
		b.Fatalf("planted identifier not the top hit: %+v %v", hits, err)
	}
	if len(hits) != 1 {
		b.Fatalf("near misses matched the identifier: %+v", hits)
	}
	queries := []struct {
		name string
		q    store.SearchQuery
	}{
		{"planted-id", store.SearchQuery{Text: "trace_id=checkout-failure-2026-03-15"}},
		{"invoice-id", store.SearchQuery{Text: "INV-04242"}},
		{"id-in-thread", store.SearchQuery{Text: "trace_id=checkout-failure-00042", Thread: "t02"}},
		{"common-words", store.SearchQuery{Text: vocab[5] + " " + vocab[900]}},
		{"rare-words", store.SearchQuery{Text: vocab[2900] + " " + vocab[2950]}},
		{"phrase", store.SearchQuery{Text: `"` + vocab[1] + " " + vocab[2] + `"`}},
		{"word-tool-filter", store.SearchQuery{Text: vocab[2500], Role: message.Tool, Tool: "grep"}},
		{"path-and-word", store.SearchQuery{Text: "src/app/main.go needle"}},
	}
	for _, q := range queries {
		b.Run(q.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := r.Search(ctx, "acme", q.q); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			reportPercentiles(b, lat)
		})
	}
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	lat = slices.Clone(lat)
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.95), "p95-ms")
	b.Logf("%d queries: p50 %.2f ms, p95 %.2f ms", len(lat), pct(0.50), pct(0.95))
}

var (
	bigOnce    sync.Once
	bigStore   *sqlite.Store
	bigPlanted string
	bigVocab   []string
	bigErr     error
	bigDir     string
)

// archive100k builds the archive once per test binary (the benchmark
// function runs more than once); TestMain removes it.
func archive100k(b *testing.B) (*sqlite.Store, string, []string) {
	bigOnce.Do(func() {
		bigDir, bigErr = os.MkdirTemp("", "recall-100k-")
		if bigErr == nil {
			bigStore, bigPlanted, bigVocab, bigErr = build100k(b, filepath.Join(bigDir, "100k.db"))
		}
	})
	if bigErr != nil {
		b.Fatal(bigErr)
	}
	return bigStore, bigPlanted, bigVocab
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bigStore != nil {
		bigStore.Close()
	}
	if bigDir != "" {
		os.RemoveAll(bigDir)
	}
	os.Exit(code)
}

func build100k(b *testing.B, path string) (*sqlite.Store, string, []string, error) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, "", nil, err
	}
	const total, threads, batch = 100_000, 20, 500
	rng := rand.New(rand.NewPCG(3, 4))
	vocab := make([]string, 3000)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("w%co%d", 'a'+i%26, i)
		vocab[i] = strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return 'a' + (r - '0')
			}
			return r
		}, vocab[i]) // letters only: plain words, not identifiers
	}
	planted := ""
	start := time.Now()
	for n := 0; n < total; {
		thread := fmt.Sprintf("t%02d", (n/batch)%threads)
		evs := make([]store.Event, batch)
		for i := range evs {
			var sb strings.Builder
			for range 20 + rng.IntN(60) {
				sb.WriteString(vocab[int(float64(len(vocab))*rng.Float64()*rng.Float64())])
				sb.WriteByte(' ')
			}
			k := n + i
			if k%10 == 0 {
				fmt.Fprintf(&sb, "trace_id=checkout-failure-%05d INV-%05d", k/10, k/10)
			}
			if k == 77_777 {
				sb.WriteString(" needle trace_id=checkout-failure-2026-03-15 in src/app/main.go")
			}
			m := message.NewText([]message.Role{message.User, message.Assistant, message.Tool}[k%3], sb.String())
			if k%3 == 2 {
				m = message.NewToolResult(fmt.Sprintf("c%d", k), sb.String())
				m.Name = "grep"
			}
			evs[i] = store.Event{Kind: store.KindMessage, Message: &m, Tokens: 60}
		}
		last, err := s.LastSeq(ctx, "acme", thread)
		if err != nil {
			return nil, "", nil, err
		}
		out, err := s.Append(ctx, "acme", thread, last, evs)
		if err != nil {
			return nil, "", nil, err
		}
		for i := range out {
			if n+i == 77_777 {
				planted = out[i].Ref
			}
		}
		n += batch
	}
	b.Logf("built %d messages in %v", total, time.Since(start).Round(time.Millisecond))
	return s, planted, vocab, nil
}
