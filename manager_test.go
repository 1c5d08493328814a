package mneme_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/window"
)

// One thread has one state per process, whatever eviction and deletes do
// meanwhile: calls on a thread are serialised. Inspect runs its function
// under the thread's lock, so two of them inside at once for one thread
// mean two states (two locks) for it. Appends, deletes and inspections run
// concurrently on a cache far smaller than the threads in use, so states
// are evicted and deleted between every lookup and lock. Run with -race.
func TestOneStatePerThreadUnderEvictionAndDeletes(t *testing.T) {
	ctx := context.Background()
	m, err := mneme.Open(ctx, mneme.Config{Store: inmem.New(), MaxThreads: 2})
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
						for k := 0; k < 50; k++ { // stay inside long enough for a second state to show
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

// The system prompt's token count follows its content: an edit in place of
// the caller's slice (same address, new text) is counted anew (I3).
func TestSystemPromptCountFollowsContent(t *testing.T) {
	ctx := context.Background()
	m, err := mneme.Open(ctx, mneme.Config{Store: inmem.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	th := m.Thread("default", "sys")
	if _, err := th.Append(ctx, message.NewText(message.User, "hello")); err != nil {
		t.Fatal(err)
	}
	opts := mneme.WindowOptions{System: []message.Message{message.NewText(message.System, "Be brief.")}}
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
