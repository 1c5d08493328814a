// Finding 7 of issue 17, the engine's tests ported to the code the issue
// was filed against (11caf8c), for scripts/old-code-proof: it copies this
// file into that tree's root package and runs it. The port is the renames
// only (Engine was Manager, store/inmem was store/memory; a state was
// taken with m.state(k) and needed no unpin; the retry test checks the
// attempts alone, as the old store had no ErrUnavailable to map to).
// Today's versions: manager_test.go and manager_internal_test.go.

package mneme

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/memory"
	"github.com/mnemehq/mneme/window"
)

func TestOneStatePerThreadUnderEvictionAndDeletes(t *testing.T) {
	ctx := context.Background()
	m, err := Open(ctx, Config{Store: memory.New(), MaxThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const threads, workers, rounds = 6, 12, 150
	inside := make([]atomic.Int32, threads)
	var overlaps atomic.Int32
	var g errgroup.Group
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			for i := 0; i < rounds; i++ {
				n := (w*7 + i) % threads
				th := m.Thread("default", fmt.Sprintf("t%d", n))
				switch (w + i) % 4 {
				case 0:
					if err := th.Delete(ctx); err != nil && !errors.Is(err, store.ErrNotFound) {
						return err
					}
				case 1, 2:
					if _, err := th.Append(ctx, message.NewText(message.User, fmt.Sprintf("w%d i%d", w, i))); err != nil {
						return err
					}
				default:
					err := th.Inspect(ctx, func(*window.State) error {
						if inside[n].Add(1) > 1 {
							overlaps.Add(1)
						}
						for k := 0; k < 50; k++ {
							_ = strings.Repeat("x", k)
						}
						inside[n].Add(-1)
						return nil
					})
					if err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d times two calls ran at once on one thread: a thread had two states", n)
	}
}

func TestSystemPromptCountFollowsContent(t *testing.T) {
	ctx := context.Background()
	m, err := Open(ctx, Config{Store: memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	th := m.Thread("default", "sys")
	if _, err := th.Append(ctx, message.NewText(message.User, "hello")); err != nil {
		t.Fatal(err)
	}
	opts := WindowOptions{System: []message.Message{message.NewText(message.System, "Be brief.")}}
	w1, err := th.Window(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.System[0] = message.NewText(message.System, strings.Repeat("Always cite the ticket number. ", 200))
	w2, err := th.Window(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if w2.Usage.System < w1.Usage.System+1000 {
		t.Fatalf("system tokens %d after the edit, %d before: the count did not follow the content", w2.Usage.System, w1.Usage.System)
	}
}

type conflictingStore struct {
	store.Store
	appends atomic.Int64
}

func (c *conflictingStore) Append(ctx context.Context, tenant, thread string, after int64, evs []store.Event) ([]store.Event, error) {
	c.appends.Add(1)
	other := message.NewText(message.User, "another writer")
	if _, err := c.Store.Append(ctx, tenant, thread, after, []store.Event{{Kind: store.KindMessage, Message: &other}}); err != nil {
		return nil, err
	}
	return nil, store.ErrConflict
}

func TestOneRetryLoopPerConflict(t *testing.T) {
	ctx := context.Background()
	cs := &conflictingStore{Store: memory.New()}
	e, err := Open(ctx, Config{Store: cs})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	th := e.Thread("default", "busy")
	_, err = th.Append(ctx, message.NewText(message.User, "hello"))
	if err == nil {
		t.Fatal("Append on a log that always moves succeeded")
	}
	if n := cs.appends.Load(); n != retryConflicts+1 {
		t.Fatalf("Append made %d attempts, want %d (one loop); error %v", n, retryConflicts+1, err)
	}
}

// BenchmarkEngineLockHold20k: the longest hold of the manager's lock
// while 20,000 threads pass through the default cache of 10,000.
func BenchmarkEngineLockHold20k(b *testing.B) {
	m, err := Open(context.Background(), Config{Store: memory.New()})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const threads = 20000
	holds := make([]time.Duration, 0, threads)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var worst time.Duration
	for i := 0; i < b.N; i++ {
		holds = holds[:0]
		for n := 0; n < threads; n++ {
			k := threadKey{"default", fmt.Sprintf("b%d-%d", i, n)}
			start := time.Now()
			m.state(k)
			holds = append(holds, time.Since(start))
		}
		sort.Slice(holds, func(a, c int) bool { return holds[a] < holds[c] })
		worst = max(worst, holds[len(holds)-1])
	}
	b.ReportMetric(float64(worst.Microseconds())/1000, "max_hold_ms")
	b.ReportMetric(float64(holds[len(holds)/2].Nanoseconds())/1000, "p50_hold_µs")
}
