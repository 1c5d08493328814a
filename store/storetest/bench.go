package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// Neighbours is how many messages of other threads and tenants
// BenchmarkScopedSearch puts beside the searched thread.
const Neighbours = 100_000

// ScopedSearchBackend is a backend under BenchmarkScopedSearch.
type ScopedSearchBackend struct {
	// Open returns a fresh, empty store.
	Open func(b *testing.B) store.Store
	// Settle, when set, runs once the store is filled: what the backend
	// does by itself after a bulk write (PostgreSQL's autovacuum ANALYZE).
	Settle func(b *testing.B, s store.Store)
	// Size, when set, returns the bytes the store takes on disk.
	Size func(b *testing.B, s store.Store) int64
	// ServerCPU, when set, starts counting the CPU a database server
	// spends for the store (PostgreSQL on this machine) and returns what
	// reports it since; ok is false when it cannot be known.
	ServerCPU func(b *testing.B, s store.Store) (since func() time.Duration, ok bool)
}

// BenchmarkScopedSearch measures per-thread search in a thread of 500
// messages, side by side in one run: on a store holding nothing else (the
// baseline) and on one that also holds Neighbours messages of other
// threads of the same tenant and of other tenants, made of the same
// words. Each reports the latency of one search, p50 and p95 (p50-ms,
// p95-ms), the CPU time the process spent on it, p50, p95 and mean
// (p50-cpu-ms, p95-cpu-ms, cpu-ms/op: the figures that hold on a loaded
// machine, where latency measures the other processes too), a database
// server's mean CPU per search when the backend can tell
// (server-cpu-ms/op), the messages in the store and its size on disk
// (msgs, MB), and the neighbours' run its ratios to the baseline's
// (p95-ratio, p95-cpu-ratio): search whose scope is in the index keeps
// them near 1.
func BenchmarkScopedSearch(b *testing.B, be ScopedSearchBackend) {
	ctx := context.Background()
	queries := []string{
		"what did the team decide about the payment gateway timeout",
		"refund invoice customer",
		"deploy rollback database index",
		"INV-0042 status",
		"when was the cache latency fixed",
	}
	fill := func(b *testing.B, s store.Store, withNeighbours bool) int {
		b.Helper()
		appendSynthetic(b, s, "acme", "target", 500, 1)
		if !withNeighbours {
			return 500
		}
		// Half in 50 other threads of the tenant, half in 50 other tenants.
		per := Neighbours / 100
		for i := range 50 {
			appendSynthetic(b, s, "acme", fmt.Sprintf("other-%d", i), per, uint64(10+i))
			appendSynthetic(b, s, fmt.Sprintf("tenant-%d", i), "t", per, uint64(100+i))
		}
		return 500 + 100*per
	}
	var base, baseCPU time.Duration
	for _, withNeighbours := range []bool{false, true} {
		name := "empty-neighbours"
		if withNeighbours {
			name = fmt.Sprintf("%dk-neighbours", Neighbours/1000)
		}
		b.Run(name, func(b *testing.B) {
			s := be.Open(b)
			msgs := fill(b, s, withNeighbours)
			if be.Settle != nil {
				be.Settle(b, s)
			}
			found := 0
			for _, q := range queries { // warm caches and check the scope
				hits, err := s.Search(ctx, "acme", store.SearchQuery{Text: q, Thread: "target"})
				if err != nil {
					b.Fatal(err)
				}
				found += len(hits)
				for _, h := range hits {
					if h.Thread != "target" {
						b.Fatalf("hit from thread %q", h.Thread)
					}
				}
			}
			if found == 0 {
				b.Fatal("no hits")
			}
			var server func() time.Duration
			if be.ServerCPU != nil {
				if since, ok := be.ServerCPU(b, s); ok {
					server = since
				}
			}
			var lat, cpu []time.Duration
			var cpuTotal time.Duration
			for i := 0; b.Loop(); i++ {
				t0, c0 := time.Now(), cpuTime()
				if _, err := s.Search(ctx, "acme", store.SearchQuery{Text: queries[i%len(queries)], Thread: "target"}); err != nil {
					b.Fatal(err)
				}
				c := cpuTime() - c0
				lat, cpu = append(lat, time.Since(t0)), append(cpu, c)
				cpuTotal += c
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			if server != nil {
				b.ReportMetric(ms(server())/float64(len(cpu)), "server-cpu-ms/op")
			}
			p95, p95CPU := Percentile(lat, 95), Percentile(cpu, 95)
			b.ReportMetric(ms(Percentile(lat, 50)), "p50-ms")
			b.ReportMetric(ms(p95), "p95-ms")
			b.ReportMetric(ms(Percentile(cpu, 50)), "p50-cpu-ms")
			b.ReportMetric(ms(p95CPU), "p95-cpu-ms")
			b.ReportMetric(ms(cpuTotal)/float64(len(cpu)), "cpu-ms/op")
			b.ReportMetric(float64(msgs), "msgs")
			if be.Size != nil {
				b.ReportMetric(float64(be.Size(b, s))/1e6, "MB")
			}
			if !withNeighbours {
				base, baseCPU = p95, p95CPU
			} else if base > 0 && baseCPU > 0 {
				b.ReportMetric(float64(p95)/float64(base), "p95-ratio")
				b.ReportMetric(float64(p95CPU)/float64(baseCPU), "p95-cpu-ratio")
			}
		})
	}
}

// Percentile is the p-th percentile of d, which it sorts.
func Percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, len(d)*p/100)]
}

// benchVocab is a vocabulary of everyday words, so that the neighbours'
// messages hold the queries' words too.
var benchVocab = strings.Fields(`payment gateway timeout retry invoice refund customer cart latency
	database index cache deploy rollback queue worker team decide fixed status meeting plan friday
	weekend family trip paint music book read write call email report budget review launch design
	test bug feature release server client order shipping price discount account login password
	error crash memory disk network backup restore config update version migrate schema table`)

// appendSynthetic appends n messages of 8 to 40 words drawn from
// benchVocab (with stopwords between), one in twenty with an invoice id.
func appendSynthetic(b *testing.B, s store.Store, tenant, thread string, n int, seed uint64) {
	b.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	stop := []string{"the", "a", "we", "did", "about", "and", "to", "of"}
	var evs []store.Event
	var after int64
	for i := range n {
		var w []string
		for range 8 + rng.IntN(32) {
			if rng.IntN(3) == 0 {
				w = append(w, stop[rng.IntN(len(stop))])
			}
			w = append(w, benchVocab[int(float64(len(benchVocab))*rng.Float64()*rng.Float64())])
		}
		if i%20 == 0 {
			w = append(w, fmt.Sprintf("INV-%04d", rng.IntN(100)))
		}
		role := message.User
		if i%2 == 1 {
			role = message.Assistant
		}
		m := message.NewText(role, strings.Join(w, " "))
		evs = append(evs, store.Event{Kind: store.KindMessage, Message: &m, Tokens: 40})
		if len(evs) == 500 || i == n-1 {
			if _, err := s.Append(context.Background(), tenant, thread, after, evs); err != nil {
				b.Fatal(err)
			}
			after += int64(len(evs))
			evs = evs[:0]
		}
	}
}

// FsyncMedian returns the median time of n page writes each followed by
// an fsync, in a file of the benchmark's temporary directory: the disk's
// floor under every durable append.
func FsyncMedian(b *testing.B, n int) time.Duration {
	f, err := os.Create(filepath.Join(b.TempDir(), "fsync-probe"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	ds := make([]time.Duration, n)
	for i := range ds {
		start := time.Now()
		if _, err := f.WriteAt(page, int64(i%64)*4096); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		ds[i] = time.Since(start)
	}
	slices.Sort(ds)
	return ds[n/2]
}
