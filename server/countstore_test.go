package server_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/mnemehq/mneme/store"
)

// countingStore counts the store calls made through it, by method and
// outcome: two requests that make the same calls with the same outcomes
// do the same store work, so they fall in the same timing class.
type countingStore struct {
	store.Store
	vectors store.Vectors

	mu    sync.Mutex
	calls map[string]int
}

func newCountingStore(st store.Store) *countingStore {
	v, _ := store.As[store.Vectors](st)
	return &countingStore{Store: st, vectors: v, calls: map[string]int{}}
}

func (c *countingStore) count(op string, err error) {
	outcome := "ok"
	switch {
	case err == nil:
	case errors.Is(err, store.ErrNotFound):
		outcome = "not_found"
	case errors.Is(err, store.ErrInvalid):
		outcome = "invalid"
	default:
		outcome = "error"
	}
	c.mu.Lock()
	c.calls[op+":"+outcome]++
	c.mu.Unlock()
}

// take returns the calls counted since the last take, as sorted lines.
func (c *countingStore) take() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lines []string
	for k, n := range c.calls {
		lines = append(lines, fmt.Sprintf("%s×%d", k, n))
	}
	c.calls = map[string]int{}
	sort.Strings(lines)
	return strings.Join(lines, " ")
}

func (c *countingStore) Append(ctx context.Context, tenant, thread string, after int64, evs []store.Event) ([]store.Event, error) {
	out, err := c.Store.Append(ctx, tenant, thread, after, evs)
	c.count("append", err)
	return out, err
}

func (c *countingStore) Load(ctx context.Context, tenant, thread string, from int64, limit int) ([]store.Event, error) {
	out, err := c.Store.Load(ctx, tenant, thread, from, limit)
	if err == nil && len(out) == 0 {
		c.count("load_empty", err)
	} else {
		c.count("load", err)
	}
	return out, err
}

func (c *countingStore) LastSeq(ctx context.Context, tenant, thread string) (int64, error) {
	n, err := c.Store.LastSeq(ctx, tenant, thread)
	c.count("last_seq", err)
	return n, err
}

func (c *countingStore) Threads(ctx context.Context, tenant string, p store.Page) ([]store.ThreadInfo, string, error) {
	out, next, err := c.Store.Threads(ctx, tenant, p)
	c.count("threads", err)
	return out, next, err
}

func (c *countingStore) Thread(ctx context.Context, tenant, thread string) (store.ThreadInfo, error) {
	out, err := c.Store.Thread(ctx, tenant, thread)
	c.count("thread", err)
	return out, err
}

func (c *countingStore) DeleteThread(ctx context.Context, tenant, thread string) error {
	err := c.Store.DeleteThread(ctx, tenant, thread)
	c.count("delete_thread", err)
	return err
}

func (c *countingStore) EventByRef(ctx context.Context, tenant, ref string) (string, store.Event, error) {
	th, ev, err := c.Store.EventByRef(ctx, tenant, ref)
	c.count("event_by_ref", err)
	return th, ev, err
}

func (c *countingStore) Search(ctx context.Context, tenant string, q store.SearchQuery) ([]store.Hit, error) {
	out, err := c.Store.Search(ctx, tenant, q)
	c.count("search", err)
	return out, err
}

func (c *countingStore) PutMemory(ctx context.Context, tenant string, it store.Memory) (store.Memory, error) {
	out, err := c.Store.PutMemory(ctx, tenant, it)
	c.count("put_memory", err)
	return out, err
}

func (c *countingStore) GetMemory(ctx context.Context, tenant string, ns []string, key string) (store.Memory, error) {
	out, err := c.Store.GetMemory(ctx, tenant, ns, key)
	c.count("get_memory", err)
	return out, err
}

func (c *countingStore) DeleteMemory(ctx context.Context, tenant string, ns []string, key string) error {
	err := c.Store.DeleteMemory(ctx, tenant, ns, key)
	c.count("delete_memory", err)
	return err
}

func (c *countingStore) SearchMemory(ctx context.Context, tenant string, q store.MemoryQuery) ([]store.Memory, error) {
	out, err := c.Store.SearchMemory(ctx, tenant, q)
	c.count("search_memory", err)
	return out, err
}

func (c *countingStore) DeleteNamespace(ctx context.Context, tenant string, prefix []string) (int, error) {
	n, err := c.Store.DeleteNamespace(ctx, tenant, prefix)
	c.count("delete_namespace", err)
	return n, err
}

func (c *countingStore) PutVectors(ctx context.Context, tenant string, vs []store.Vector) error {
	err := c.vectors.PutVectors(ctx, tenant, vs)
	c.count("put_vectors", err)
	return err
}

func (c *countingStore) SearchVectors(ctx context.Context, tenant string, q store.VectorQuery) ([]store.Hit, error) {
	out, err := c.vectors.SearchVectors(ctx, tenant, q)
	c.count("search_vectors", err)
	return out, err
}

// Unwrap implements store.Unwrapper.
func (c *countingStore) Unwrap() store.Store { return c.Store }
