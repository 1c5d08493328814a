// Package memory is the long-term memory API: a tenant's namespaced
// key-value store shared across its threads (LangGraph Store semantics:
// namespace tuple, key, JSON value, search by query and filter, TTL), over
// any store.Memories backend, with optional semantic ranking through an
// embedder, and Inject, which renders matching items for the window's
// memory block.
//
// Every call is scoped by tenant (I8). It imports store, embed and token;
// never window, recall, proxy or a database driver.
package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/mnemehq/mneme/embed"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
	"github.com/mnemehq/mneme/token"
)

// Bank is a tenant's long-term memory over a backend: the items it
// keeps, scoped by tenant on every call.
type Bank struct {
	backend  store.Memories
	embedder embed.Embedder
	counter  token.Counter
	log      *slog.Logger
	now      func() time.Time

	mu    sync.Mutex
	cache map[vecKey][]float32 // item embeddings, by item version
}

// Options configure a Bank; every field is optional.
type Options struct {
	// Embedder adds semantic ranking to Search (fused with BM25). Without
	// it, or when it fails, Search is BM25 alone.
	Embedder embed.Embedder
	// Counter counts Inject's tokens (default o200k_base).
	Counter token.Counter
	// Logger receives degradation warnings (default slog.Default()).
	Logger *slog.Logger
}

// New returns a Bank over backend.
func New(backend store.Memories, opts Options) *Bank {
	s := &Bank{backend: backend, embedder: opts.Embedder, counter: opts.Counter, log: opts.Logger, now: time.Now,
		cache: map[vecKey][]float32{}}
	if s.counter == nil {
		s.counter, _ = token.Get(token.O200kBase)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// Search and list limits.
const (
	DefaultLimit = 10
	MaxLimit     = 100
)

// Put stores value under namespace and key, replacing any item there. A
// ttl > 0 makes the item expire (invisible, then purged) after it; 0 keeps
// it until deleted.
func (s *Bank) Put(ctx context.Context, tenant string, namespace []string, key string, value json.RawMessage, ttl time.Duration) (store.Memory, error) {
	if ttl < 0 {
		return store.Memory{}, fmt.Errorf("%w: negative ttl", store.ErrInvalid)
	}
	it := store.Memory{Namespace: namespace, Key: key, Value: value}
	if ttl > 0 {
		it.Expires = s.now().Add(ttl).UTC()
	}
	return s.backend.PutMemory(ctx, tenant, it)
}

// Get returns one item, or store.ErrNotFound (also when expired or of
// another tenant).
func (s *Bank) Get(ctx context.Context, tenant string, namespace []string, key string) (store.Memory, error) {
	return s.backend.GetMemory(ctx, tenant, namespace, key)
}

// Delete removes one item; store.ErrNotFound if there is none.
func (s *Bank) Delete(ctx context.Context, tenant string, namespace []string, key string) error {
	return s.backend.DeleteMemory(ctx, tenant, namespace, key)
}

// List returns the items under the namespace prefix (nil: all the
// tenant's), most recently updated first.
func (s *Bank) List(ctx context.Context, tenant string, prefix []string, limit, offset int) ([]store.Memory, error) {
	return s.backend.SearchMemory(ctx, tenant, store.MemoryQuery{Prefix: prefix, Limit: clampLimit(limit), Offset: offset})
}

func clampLimit(n int) int {
	if n <= 0 {
		return DefaultLimit
	}
	return min(n, MaxLimit)
}

// Search returns the items under the prefix whose value matches filter
// (equality on top-level fields) and query, best first. An empty query
// lists by recency. With an embedder, BM25 and embedding similarity are
// fused by reciprocal rank (identifier-like or quoted terms still must
// match exactly: similarity then only re-ranks). Embedding failures
// degrade to BM25, never to an error.
func (s *Bank) Search(ctx context.Context, tenant string, prefix []string, query string, filter map[string]any, limit int) ([]store.Memory, error) {
	limit = clampLimit(limit)
	q := store.MemoryQuery{Prefix: prefix, Text: query, Filter: filter, Limit: limit}
	pq, err := fulltext.ParseQuery(query)
	if err != nil {
		return nil, err
	}
	if s.embedder == nil || pq.Empty() {
		return s.backend.SearchMemory(ctx, tenant, q)
	}
	q.Limit = min(3*limit, 300)
	text, err := s.backend.SearchMemory(ctx, tenant, q)
	if err != nil {
		return nil, err
	}
	var pool []store.Memory
	if len(pq.Required()) == 0 {
		// Candidates the words missed: the newest items under the prefix.
		pool, err = s.backend.SearchMemory(ctx, tenant, store.MemoryQuery{Prefix: prefix, Filter: filter, Limit: 200})
		if err != nil {
			return nil, err
		}
	}
	near, err := s.rankBySimilarity(ctx, query, append(append([]store.Memory(nil), text...), pool...))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.log.Warn("memory: embedding failed, using full-text ranking", "tenant", tenant, "err", err)
		return cutItems(text, limit), nil
	}
	return fuse(text, near, limit), nil
}

func cutItems(items []store.Memory, n int) []store.Memory {
	if len(items) > n {
		return items[:n]
	}
	return items
}

type vecKey struct {
	model, ns, key string
	updated        int64
}

// maxCache bounds the embedding cache; it is cleared when full.
const maxCache = 20000

// rankBySimilarity embeds the query and the items (cached per item
// version) and returns the items by decreasing cosine similarity.
func (s *Bank) rankBySimilarity(ctx context.Context, query string, items []store.Memory) ([]store.Memory, error) {
	model := s.embedder.Model()
	seen := map[vecKey]bool{}
	var uniq []store.Memory
	var keys []vecKey
	var missing []int
	s.mu.Lock()
	for _, it := range items {
		k := vecKey{model, backend.JoinNamespace(it.Namespace), it.Key, it.Updated.UnixNano()}
		if seen[k] {
			continue
		}
		seen[k] = true
		if s.cache[k] == nil {
			missing = append(missing, len(uniq))
		}
		uniq = append(uniq, it)
		keys = append(keys, k)
	}
	s.mu.Unlock()
	texts := []string{query}
	for _, i := range missing {
		texts = append(texts, backend.MemoryText(uniq[i].Key, uniq[i].Value))
	}
	vs, err := s.embedder.Embed(ctx, texts)
	if err != nil {
		return nil, err
	}
	if len(vs) != len(texts) {
		return nil, fmt.Errorf("%w: %d vectors for %d texts", embed.ErrEmbed, len(vs), len(texts))
	}
	vecs := make([][]float32, len(uniq))
	s.mu.Lock()
	for i, k := range keys {
		vecs[i] = s.cache[k]
	}
	if len(s.cache)+len(missing) > maxCache {
		clear(s.cache)
	}
	for n, i := range missing {
		vecs[i] = vs[n+1]
		s.cache[keys[i]] = vs[n+1]
	}
	s.mu.Unlock()
	scores := make([]float64, len(uniq))
	for i, v := range vecs {
		scores[i] = backend.Cosine(vs[0], v)
	}
	idx := make([]int, len(uniq))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return scores[idx[a]] > scores[idx[b]] })
	out := make([]store.Memory, len(idx))
	for i, j := range idx {
		out[i] = uniq[j]
		out[i].Score = scores[j]
	}
	return out, nil
}

// fuse merges the BM25 and similarity rankings by reciprocal rank and
// keeps the best limit items, each scored by its fused score.
func fuse(text, near []store.Memory, limit int) []store.Memory {
	id := func(it store.Memory) string { return backend.JoinNamespace(it.Namespace) + "\x00" + it.Key }
	all := embed.Fuse(text, near, id, embed.RRFK)
	out := make([]store.Memory, 0, min(limit, len(all)))
	for _, f := range all[:min(limit, len(all))] {
		it := f.Item
		it.Score = f.Score
		out = append(out, it)
	}
	return out
}
