package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/mnemehq/mneme/store"
)

// Store wraps st so that every call of the store.Store interface is timed
// into mneme_store_operation_duration_seconds. The optional interfaces of
// st (store.Leaser, store.Vectors, store.TenantLister, store.Purger, ...)
// are found through the wrapper with store.As, untimed; a plain type
// assertion on the result sees store.Store alone.
func (m *Metrics) Store(st store.Store) store.Store {
	return &timedStore{Store: st, m: m}
}

// timedStore times every method of store.Store.
type timedStore struct {
	store.Store
	m *Metrics
}

// Unwrap implements store.Unwrapper: store.As finds the optional
// interfaces on the wrapped store.
func (s *timedStore) Unwrap() store.Store { return s.Store }

func (s *timedStore) observe(op string, start time.Time, err error) {
	outcome := "ok"
	switch {
	case err == nil:
	case errors.Is(err, store.ErrNotFound):
		outcome = "not_found"
	case errors.Is(err, store.ErrConflict):
		outcome = "conflict"
	case errors.Is(err, store.ErrInvalid):
		outcome = "invalid"
	default:
		outcome = "error"
	}
	s.m.storeOps.WithLabelValues(op, outcome).Observe(time.Since(start).Seconds())
}

func (s *timedStore) Append(ctx context.Context, tenant, thread string, after int64, evs []store.Event) (out []store.Event, err error) {
	defer func(start time.Time) { s.observe("append", start, err) }(time.Now())
	return s.Store.Append(ctx, tenant, thread, after, evs)
}

func (s *timedStore) Load(ctx context.Context, tenant, thread string, from int64, limit int) (out []store.Event, err error) {
	defer func(start time.Time) { s.observe("load", start, err) }(time.Now())
	return s.Store.Load(ctx, tenant, thread, from, limit)
}

func (s *timedStore) LastSeq(ctx context.Context, tenant, thread string) (n int64, err error) {
	defer func(start time.Time) { s.observe("last_seq", start, err) }(time.Now())
	return s.Store.LastSeq(ctx, tenant, thread)
}

func (s *timedStore) Threads(ctx context.Context, tenant string, p store.Page) (infos []store.ThreadInfo, next string, err error) {
	defer func(start time.Time) { s.observe("threads", start, err) }(time.Now())
	return s.Store.Threads(ctx, tenant, p)
}

func (s *timedStore) Thread(ctx context.Context, tenant, thread string) (ti store.ThreadInfo, err error) {
	defer func(start time.Time) { s.observe("thread", start, err) }(time.Now())
	return s.Store.Thread(ctx, tenant, thread)
}

func (s *timedStore) DeleteThread(ctx context.Context, tenant, thread string) (err error) {
	defer func(start time.Time) { s.observe("delete_thread", start, err) }(time.Now())
	return s.Store.DeleteThread(ctx, tenant, thread)
}

func (s *timedStore) EventByRef(ctx context.Context, tenant, ref string) (thread string, ev store.Event, err error) {
	defer func(start time.Time) { s.observe("event_by_ref", start, err) }(time.Now())
	return s.Store.EventByRef(ctx, tenant, ref)
}

func (s *timedStore) Search(ctx context.Context, tenant string, q store.SearchQuery) (hits []store.Hit, err error) {
	defer func(start time.Time) { s.observe("search", start, err) }(time.Now())
	return s.Store.Search(ctx, tenant, q)
}

func (s *timedStore) PutMemory(ctx context.Context, tenant string, it store.Memory) (out store.Memory, err error) {
	defer func(start time.Time) { s.observe("put_memory", start, err) }(time.Now())
	return s.Store.PutMemory(ctx, tenant, it)
}

func (s *timedStore) GetMemory(ctx context.Context, tenant string, namespace []string, key string) (out store.Memory, err error) {
	defer func(start time.Time) { s.observe("get_memory", start, err) }(time.Now())
	return s.Store.GetMemory(ctx, tenant, namespace, key)
}

func (s *timedStore) DeleteMemory(ctx context.Context, tenant string, namespace []string, key string) (err error) {
	defer func(start time.Time) { s.observe("delete_memory", start, err) }(time.Now())
	return s.Store.DeleteMemory(ctx, tenant, namespace, key)
}

func (s *timedStore) SearchMemory(ctx context.Context, tenant string, q store.MemoryQuery) (items []store.Memory, err error) {
	defer func(start time.Time) { s.observe("search_memory", start, err) }(time.Now())
	return s.Store.SearchMemory(ctx, tenant, q)
}

func (s *timedStore) DeleteNamespace(ctx context.Context, tenant string, prefix []string) (n int, err error) {
	defer func(start time.Time) { s.observe("delete_namespace", start, err) }(time.Now())
	return s.Store.DeleteNamespace(ctx, tenant, prefix)
}
