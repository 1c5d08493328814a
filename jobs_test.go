package mneme_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/internal/fakellm"
)

// TestBackgroundJobsBounded: with every background slot taken (one slot,
// held by a summarizer call that does not return), other threads start no
// background job; their compactions still happen, on the request path,
// when their windows reach the trigger (reflections too), and the window
// stays within its budget. With a free slot a second thread does start
// one (the control).
func TestBackgroundJobsBounded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		slots    int
		wantJobs int
	}{
		{"full", 1, 1},
		{"control", 4, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var mu sync.Mutex
			release := make(chan struct{})
			summarizations := 0
			srv := fakellm.Start(fakellm.WithHandler(func(r fakellm.Request) fakellm.Reply {
				if r.IsSummarization() {
					mu.Lock()
					summarizations++
					first := summarizations == 1
					mu.Unlock()
					if first || tc.slots > 1 {
						<-release // thread a's background job holds its slot
					}
				}
				return fakellm.DefaultReply(r)
			}))
			defer srv.Close()
			defer close(release) // before srv.Close: let the held calls return
			m := openObserving(t, filepath.Join(t.TempDir(), "m.db"), srv, func(c *mneme.Config) {
				c.Buffer = true
				c.MaxBackgroundJobs = tc.slots
				c.Summarizer.Timeout = time.Minute // held until the test ends
			})
			a := m.Thread("default", "a")
			begin(ctx, t, a)
			for n := 1; n <= 60 && m.RunningJobs() == 0; n++ {
				if _, err := step(ctx, a, n, mneme.WindowOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if m.RunningJobs() != 1 {
				t.Fatalf("thread a started %d background jobs, want 1", m.RunningJobs())
			}
			b := m.Thread("default", "b")
			begin(ctx, t, b)
			compacted := 0
			for n := 1; n <= 120; n++ {
				w, err := step(ctx, b, n, mneme.WindowOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if w.Usage.Total > w.Usage.Budget {
					t.Fatalf("step %d: window %d over its budget %d", n, w.Usage.Total, w.Usage.Budget)
				}
				if w.Usage.Step && w.Usage.Compacted != nil {
					compacted++
					if tc.slots == 1 && !strings.Contains(w.Usage.Compacted.Fallback, "extractive") {
						t.Errorf("step %d: compaction %+v, want the request path's extractive observation", n, w.Usage.Compacted)
					}
				}
				if tc.slots == 1 && m.RunningJobs() > 1 {
					t.Fatalf("step %d: %d background jobs with one slot", n, m.RunningJobs())
				}
				if tc.slots > 1 && m.RunningJobs() == tc.wantJobs {
					break // the control: b got a slot of its own
				}
			}
			time.Sleep(50 * time.Millisecond)
			if got := m.RunningJobs(); got != tc.wantJobs {
				t.Errorf("%d background jobs, want %d", got, tc.wantJobs)
			}
			if tc.slots == 1 && compacted == 0 {
				t.Error("thread b never compacted: with the slots full, compaction must happen on the request path")
			}

		})
	}
}
