package recall_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mnemehq/mneme/embed"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
)

// runIndexer starts ix with an owner that stops and waits for it at the
// end of the test.
func runIndexer(t *testing.T, ix *recall.Indexer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func flush(t *testing.T, ix *recall.Indexer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ix.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// corpus appends n messages made of words from a small vocabulary, so that
// full-text and vector rankings overlap but differ.
func corpus(t *testing.T, s store.Store, tenant, thread string, n int) []store.Event {
	vocab := strings.Fields("checkout payment timeout gateway retry invoice refund cart latency database index cache deploy rollback queue worker")
	rng := rand.New(rand.NewPCG(7, 7))
	var evs []store.Event
	for i := range n {
		var words []string
		for range 3 + rng.IntN(12) {
			words = append(words, vocab[rng.IntN(len(vocab))])
		}
		role := []message.Role{message.User, message.Assistant}[i%2]
		evs = append(evs, text(role, strings.Join(words, " ")))
	}
	return appendAll(t, s, tenant, thread, evs...)
}

// The hybrid ranking is the reciprocal-rank fusion of the full-text and
// the vector rankings, the vectors having been written by the background
// indexer; it differs from full-text alone on this corpus.
func TestHybridRanking(t *testing.T) {
	backends(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		emb := embed.Hashing{Dims: 256}
		ix := recall.NewIndexer(s.(store.Vectors), emb, recall.IndexerConfig{Batch: 7})
		runIndexer(t, ix)
		evs := corpus(t, s, "a", "t", 60)
		if n := ix.Add("a", evs...); n != len(evs) {
			t.Fatalf("queued %d of %d", n, len(evs))
		}
		flush(t, ix)
		if st := ix.Stats(); st.Indexed != int64(len(evs)) || st.Dropped != 0 {
			t.Fatalf("stats %+v", st)
		}

		r := &recall.Recall{Store: s, Embedder: emb}
		q := store.SearchQuery{Text: "payment timeout rollback", Thread: "t", Limit: 10}
		got, err := r.Search(ctx, "a", q)
		if err != nil {
			t.Fatal(err)
		}

		// The two rankings, as the components give them.
		deep := q
		deep.Limit = 30
		text, err := s.Search(ctx, "a", deep)
		if err != nil {
			t.Fatal(err)
		}
		qv, _ := emb.Embed(ctx, []string{q.Text})
		near, err := s.(store.Vectors).SearchVectors(ctx, "a", store.VectorQuery{Model: emb.Model(), V: qv[0], Thread: "t", Limit: 30})
		if err != nil {
			t.Fatal(err)
		}
		// The vector ranking agrees with an independent exact cosine.
		best, bestScore := "", -2.0
		for _, ev := range evs {
			v, _ := emb.Embed(ctx, []string{ev.Message.PlainText()})
			if c := backend.Cosine(qv[0], v[0]); c > bestScore {
				best, bestScore = ev.Ref, c
			}
		}
		if len(near) == 0 || near[0].Ref != best {
			t.Fatalf("nearest %v, want %s (cosine %.3f)", refs(near), best, bestScore)
		}

		want := fused(text, near, 10)
		if !slices.Equal(refs(got), want) {
			t.Fatalf("hybrid order\n %v\nwant the score fusion\n %v", refs(got), want)
		}
		if slices.Equal(refs(got), refs(text[:min(10, len(text))])) {
			t.Fatal("the corpus does not exercise fusion: hybrid equals full-text order")
		}
		for _, h := range got {
			if h.Snippet == "" || h.Thread != "t" {
				t.Errorf("hit %+v lacks a snippet or thread", h)
			}
		}

		// Identifier queries stay exact in hybrid mode.
		extra := appendAll(t, s, "a", "t", text2("payment timeout INV-4401"), text2("payment timeout INV-4402"))
		ix.Add("a", extra...)
		flush(t, ix)
		hits, err := r.Search(ctx, "a", store.SearchQuery{Text: "INV-4401 payment timeout", Thread: "t"})
		if err != nil || len(hits) != 1 || hits[0].Ref != extra[0].Ref {
			t.Fatalf("identifier in hybrid mode: %v %v", refs(hits), err)
		}
		// Vectors of another tenant are never searched.
		hits, err = r.Search(ctx, "b", store.SearchQuery{Text: "payment timeout rollback"})
		if err != nil || len(hits) != 0 {
			t.Fatalf("tenant b sees %v %v", refs(hits), err)
		}
	})
}

func text2(s string) store.Event { return text(message.User, s) }

// fused is the fusion the package documents: a full-text hit scores its
// BM25 score over the best one, a vector hit of cosine c >= 0.3 adds
// 0.3*(c-0.3)/0.7, full-text hits first on ties.
func fused(text, near []store.Hit, limit int) []string {
	score := map[string]float64{}
	textRank := map[string]int{}
	var order []string
	for i, h := range text {
		score[h.Ref] = h.Score / text[0].Score
		textRank[h.Ref] = i + 1
		order = append(order, h.Ref)
	}
	for _, h := range near {
		if h.Score < recall.DefaultMinSimilarity {
			continue
		}
		if _, ok := score[h.Ref]; !ok {
			order = append(order, h.Ref)
		}
		score[h.Ref] += recall.DefaultVectorWeight * (h.Score - recall.DefaultMinSimilarity) / (1 - recall.DefaultMinSimilarity)
	}
	slices.SortStableFunc(order, func(a, b string) int {
		if score[a] != score[b] {
			if score[a] > score[b] {
				return -1
			}
			return 1
		}
		ta, tb := textRank[a], textRank[b]
		if (ta == 0) != (tb == 0) {
			if ta != 0 {
				return -1
			}
			return 1
		}
		return ta - tb
	})
	return order[:min(limit, len(order))]
}

// failing is an embedder that fails its first n calls (all when n < 0).
type failing struct {
	n     int64
	calls atomic.Int64
}

func (f *failing) Model() string { return "flaky" }

func (f *failing) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	c := f.calls.Add(1)
	if f.n < 0 || c <= f.n {
		return nil, fmt.Errorf("%w: upstream 503", embed.ErrEmbed)
	}
	return embed.Hashing{Dims: 32}.Embed(ctx, texts)
}

// brokenVectors fails every vector call.
type brokenVectors struct{}

func (brokenVectors) PutVectors(context.Context, string, []store.Vector) error {
	return errors.New("disk on fire")
}
func (brokenVectors) SearchVectors(context.Context, string, store.VectorQuery) ([]store.Hit, error) {
	return nil, errors.New("disk on fire")
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A failing embedder or vector index degrades search to BM25: same hits
// as full text alone, no error, a warning logged.
func TestDegradesToBM25(t *testing.T) {
	backends(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		corpus(t, s, "a", "t", 40)
		q := store.SearchQuery{Text: "payment timeout rollback", Thread: "t", Limit: 8}
		want, err := (&recall.Recall{Store: s}).Search(ctx, "a", q)
		if err != nil || len(want) == 0 {
			t.Fatal(want, err)
		}
		for name, r := range map[string]*recall.Recall{
			"failing embedder": {Store: s, Embedder: &failing{n: -1}},
			"broken vectors":   {Store: s, Embedder: embed.Hashing{}, Vectors: brokenVectors{}},
			"slow embedder":    {Store: s, Embedder: slow{}, QueryTimeout: 20 * time.Millisecond},
		} {
			t.Run(name, func(t *testing.T) {
				var logs syncBuf
				r.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				got, err := r.Search(ctx, "a", q)
				if err != nil {
					t.Fatalf("search failed instead of degrading: %v", err)
				}
				if !slices.Equal(refs(got), refs(want)) {
					t.Fatalf("got %v, want the BM25 hits %v", refs(got), refs(want))
				}
				if !strings.Contains(logs.String(), "full-text ranking") {
					t.Errorf("no warning logged: %q", logs.String())
				}
			})
		}
	})
}

type slow struct{}

func (slow) Model() string { return "slow" }
func (slow) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// The indexer logs failures and retries later; search works throughout.
func TestIndexerRetries(t *testing.T) {
	backends(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		var logs syncBuf
		log := slog.New(slog.NewTextHandler(&logs, nil))
		emb := &failing{n: 2}
		ix := recall.NewIndexer(s.(store.Vectors), emb, recall.IndexerConfig{RetryAfter: 5 * time.Millisecond, Batch: 100, Logger: log})
		runIndexer(t, ix)
		evs := corpus(t, s, "a", "t", 10)
		ix.Add("a", evs...)
		flush(t, ix)
		st := ix.Stats()
		if st.Indexed != 10 || st.Failures != 2 || st.Dropped != 0 || st.Retrying != 0 {
			t.Fatalf("stats %+v, want 10 indexed after 2 failures", st)
		}
		if !strings.Contains(logs.String(), "will retry") {
			t.Errorf("failure not logged: %q", logs.String())
		}
		r := &recall.Recall{Store: s, Embedder: &failing{n: 0}}
		hits, err := r.Search(ctx, "a", store.SearchQuery{Text: "payment", Thread: "t"})
		if err != nil || len(hits) == 0 {
			t.Fatal(hits, err)
		}

		// An embedder that never recovers: given up after MaxAttempts.
		ix2 := recall.NewIndexer(s.(store.Vectors), &failing{n: -1}, recall.IndexerConfig{RetryAfter: time.Millisecond, MaxAttempts: 3, Logger: log})
		runIndexer(t, ix2)
		ix2.Add("a", evs[:4]...)
		flush(t, ix2)
		if st := ix2.Stats(); st.Dropped != 4 || st.Indexed != 0 || st.Failures < 3 {
			t.Fatalf("stats %+v, want 4 given up after at least 3 failures", st)
		}

		// A full queue drops instead of blocking the caller.
		ix3 := recall.NewIndexer(s.(store.Vectors), embed.Hashing{}, recall.IndexerConfig{Queue: 3})
		if n := ix3.Add("a", evs...); n != 3 || ix3.Stats().Dropped != 7 {
			t.Fatalf("queued %d, stats %+v", n, ix3.Stats())
		}
	})
}

// Vectors go with their thread, are per tenant and per model, and bad
// vectors are ErrInvalid.
func TestVectorsLifecycle(t *testing.T) {
	backends(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		v := s.(store.Vectors)
		emb := embed.Hashing{Dims: 16}
		evs := appendAll(t, s, "a", "t", text2("payment timeout"), text2("cache latency"))
		vs, _ := emb.Embed(ctx, []string{"payment timeout", "cache latency"})
		put := []store.Vector{{Ref: evs[0].Ref, Model: emb.Model(), V: vs[0]}, {Ref: evs[1].Ref, Model: emb.Model(), V: vs[1]},
			{Ref: "m_unknown", Model: emb.Model(), V: vs[0]}}
		if err := v.PutVectors(ctx, "a", put); err != nil {
			t.Fatal(err)
		}
		if err := v.PutVectors(ctx, "b", put); err != nil { // refs of a: skipped for b
			t.Fatal(err)
		}
		q := store.VectorQuery{Model: emb.Model(), V: vs[0], Limit: 5}
		hits, err := v.SearchVectors(ctx, "a", q)
		if err != nil || len(hits) != 2 || hits[0].Ref != evs[0].Ref || hits[0].Score < 0.999 || hits[0].Thread != "t" || hits[0].Seq != 1 {
			t.Fatalf("hits %+v %v", hits, err)
		}
		if hits, _ := v.SearchVectors(ctx, "b", q); len(hits) != 0 {
			t.Fatalf("tenant b: %+v", hits)
		}
		other := q
		other.Model = "another-model"
		if hits, _ := v.SearchVectors(ctx, "a", other); len(hits) != 0 {
			t.Fatalf("another model: %+v", hits)
		}
		other = q
		other.V = append(slices.Clone(vs[0]), 0)
		if hits, err := v.SearchVectors(ctx, "a", other); len(hits) != 0 || err != nil {
			t.Fatalf("another dimension: %+v %v", hits, err)
		}
		for _, bad := range []store.Vector{{Ref: evs[0].Ref, Model: "m", V: make([]float32, 4)}, {Ref: evs[0].Ref, V: vs[0]}, {Model: "m", V: vs[0]}} {
			if err := v.PutVectors(ctx, "a", []store.Vector{bad}); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("bad vector %+v: %v", bad, err)
			}
		}
		if err := s.DeleteThread(ctx, "a", "t"); err != nil {
			t.Fatal(err)
		}
		if hits, err := v.SearchVectors(ctx, "a", q); err != nil || len(hits) != 0 {
			t.Fatalf("after DeleteThread: %+v %v", hits, err)
		}
	})
}
