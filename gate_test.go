package mneme_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/window"
)

// onRequest marks the context of the test's own requests, so that a
// Compactor can tell a call on the request path from a background one (a
// background job runs under the engine's context, not the request's).
type onRequest struct{}

func requestCtx() context.Context { return context.WithValue(context.Background(), onRequest{}, true) }

// gatedCompactor observes and reflects extractively, but every call waits
// at a gate the test opens, after saying that it started. While the gate is
// shut, a request that returns has provably not waited for the summarizer:
// one that did would never return. No clock is involved.
type gatedCompactor struct {
	base    mneme.Compactor
	refl    mneme.Reflector
	started chan string   // "observe" or "reflect", once per call held at the gate
	gate    chan struct{} // closed by the test: every call, held or later, goes on
	calls   atomic.Int32
	// passRequests lets calls made with a requestCtx through at once,
	// counted in onPath: the buffering test allows the request path no
	// summarizer wait, and proves it did not need one.
	passRequests bool
	onPath       atomic.Int32
	cancelled    atomic.Int32 // held calls that ended by their context
}

func newGated() *gatedCompactor {
	return &gatedCompactor{
		base:    mneme.NewCompactor(compact.Extractive{}),
		refl:    mneme.NewCompactor(nil).(mneme.Reflector),
		started: make(chan string, 64),
		gate:    make(chan struct{}),
	}
}

func (g *gatedCompactor) wait(ctx context.Context, what string) error {
	g.calls.Add(1)
	if g.passRequests && ctx.Value(onRequest{}) != nil {
		g.onPath.Add(1)
		return nil
	}
	g.started <- what
	select {
	case <-g.gate:
		return nil
	case <-ctx.Done():
		g.cancelled.Add(1)
		return ctx.Err()
	}
}

func (g *gatedCompactor) Observe(ctx context.Context, in mneme.CompactInput) (window.CompactedData, error) {
	if err := g.wait(ctx, "observe"); err != nil {
		return window.CompactedData{}, err
	}
	d, err := g.base.Observe(ctx, in)
	d.Model = "gated"
	return d, err
}

func (g *gatedCompactor) Reflect(ctx context.Context, in mneme.ReflectInput) (window.ReflectedData, error) {
	if err := g.wait(ctx, "reflect"); err != nil {
		return window.ReflectedData{}, err
	}
	d, err := g.refl.Reflect(ctx, in)
	d.Model = "gated"
	return d, err
}

// heldCall reports which call waits at the gate, "" when none has started.
func (g *gatedCompactor) heldCall() string {
	select {
	case what := <-g.started:
		return what
	default:
		return ""
	}
}

// waitIdle returns once the engine runs no background job: what a job
// computed is then in the thread's state for the next call to see. The
// jobs it waits for never block (the gate is open).
func waitIdle(t testing.TB, m *mneme.Engine) {
	t.Helper()
	for m.RunningJobs() > 0 {
		runtime.Gosched()
	}
}
