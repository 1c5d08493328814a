package mneme

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mnemehq/mneme/store"
)

// Retention: threads whose last activity is older than a tenant's
// retention period are deleted whole (log, archive index, vectors and the
// observations, which are events of the log), by a sweeper the server runs
// at start and then periodically. It goes through the same path as a
// DELETE of the thread, so the engine forgets its materialised window.

// ErrNoTenantList: the store cannot enumerate its tenants, so a sweep over
// every tenant is impossible (DeleteThreadsBefore per tenant still works).
var ErrNoTenantList = errors.New("mneme: the store cannot list its tenants (store.TenantLister)")

// DeleteThreadsBefore deletes the tenant's threads whose last activity
// (ThreadInfo.Updated) is before cutoff and returns their ids. Each thread
// is checked again under its lock just before it goes, so a thread that
// came back to life since the listing is kept.
func (m *Engine) DeleteThreadsBefore(ctx context.Context, tenant string, cutoff time.Time) ([]string, error) {
	var old []string
	cursor := ""
	for {
		infos, next, err := m.store.Threads(ctx, tenant, store.Page{Cursor: cursor, Limit: 500})
		if err != nil {
			return nil, err
		}
		for _, in := range infos {
			if in.Updated.Before(cutoff) {
				old = append(old, in.ID)
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	var deleted []string
	for _, id := range old {
		ok, err := m.Thread(tenant, id).deleteIfIdleSince(ctx, cutoff)
		if err != nil {
			return deleted, fmt.Errorf("retention: %s: %w", id, err)
		}
		if ok {
			deleted = append(deleted, id)
		}
	}
	return deleted, nil
}

// deleteIfIdleSince deletes the thread when its last activity is before
// cutoff; it reports whether it did.
func (t *Thread) deleteIfIdleSince(ctx context.Context, cutoff time.Time) (bool, error) {
	ts := t.m.pin(threadKey{t.tenant, t.id})
	ts.mu.Lock()
	defer t.m.unlock(ts)
	info, err := t.m.store.Thread(ctx, t.tenant, t.id)
	if errors.Is(err, store.ErrNotFound) {
		ts.clear()
		return false, nil
	}
	if err != nil || !info.Updated.Before(cutoff) {
		return false, err
	}
	err = t.m.store.DeleteThread(ctx, t.tenant, t.id)
	ts.clear()
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// SweepRetention deletes, for every tenant of the store, the threads idle
// for longer than maxAge; it returns how many it deleted.
func (m *Engine) SweepRetention(ctx context.Context, maxAge time.Duration) (int, error) {
	tl, ok := store.As[store.TenantLister](m.store)
	if !ok {
		return 0, ErrNoTenantList
	}
	tenants, err := tl.Tenants(ctx)
	if err != nil {
		return 0, err
	}
	cutoff := now().Add(-maxAge)
	n := 0
	var errs []error
	for _, tenant := range tenants {
		ids, err := m.DeleteThreadsBefore(ctx, tenant, cutoff)
		n += len(ids)
		if err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if n > 0 {
		if err := m.Purge(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// RunRetention sweeps at once and then every interval until ctx ends (it
// returns nil then). A failed sweep is logged and tried again at the next
// tick. The caller owns it: run it in a goroutine it waits for before
// closing the Engine.
func (m *Engine) RunRetention(ctx context.Context, maxAge, interval time.Duration) error {
	if maxAge <= 0 {
		return fmt.Errorf("mneme: retention period %v: want > 0", maxAge)
	}
	if interval <= 0 {
		interval = min(maxAge, time.Hour)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		n, err := m.SweepRetention(ctx, maxAge)
		switch {
		case errors.Is(err, ErrNoTenantList):
			return err
		case err != nil && ctx.Err() == nil:
			m.log.Error("retention sweep", "deleted", n, "err", err)
		case n > 0:
			m.log.Info("retention sweep", "deleted", n, "older_than", maxAge)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// purgeState coalesces purge requests: one purge runs at a time, and a
// request made while it runs makes it run once more.
type purgeState struct {
	mu               sync.Mutex
	running, pending bool
}

// Purge rewrites the store's files so that what was deleted is gone from
// them too, when the store can hold stale copies (store.Purger, found
// through wrappers); otherwise it does nothing.
func (m *Engine) Purge(ctx context.Context) error {
	p, ok := store.As[store.Purger](m.store)
	if !ok {
		return nil
	}
	return p.Purge(ctx)
}

// PurgeSoon runs Purge in the background (a job Close waits for), after a
// deletion that must reach the files: an erasure answers at once and the
// bytes follow within the time one purge takes.
func (m *Engine) PurgeSoon() {
	if _, ok := store.As[store.Purger](m.store); !ok || m.bg.Err() != nil {
		return
	}
	m.purge.mu.Lock()
	defer m.purge.mu.Unlock()
	if m.purge.running {
		m.purge.pending = true
		return
	}
	m.purge.running = true
	m.goJob(func() {
		for {
			if err := m.Purge(m.bg); err != nil && m.bg.Err() == nil {
				m.log.Error("purge after a deletion", "err", err)
			}
			m.purge.mu.Lock()
			if !m.purge.pending || m.bg.Err() != nil {
				m.purge.running = false
				m.purge.mu.Unlock()
				return
			}
			m.purge.pending = false
			m.purge.mu.Unlock()
		}
	})
}
